"""On the GPU machine, first: which python3, torch, CUDA and GPU the check runs on.

    python3 scripts/gpu_check/preflight.py ENV.json [--device cuda|cpu]

Prints and records the interpreter (and whether it is a venv, as the machine's /opt/torch/.venv
is), torch with its CUDA build and the GPU it sees, and transformers. Exit 1 when torch does not
import, or when --device cuda and torch sees no CUDA device (the dry run passes --device cpu).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args()
    env: dict = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "device": args.device,
        "venv_over": sys.base_prefix if sys.prefix != sys.base_prefix else None,
    }
    problems = []
    t0 = time.perf_counter()
    try:
        import torch
    except Exception as exc:
        problems.append(f"torch does not import: {type(exc).__name__}: {exc}")
    else:
        env.update(
            torch=torch.__version__, torch_cuda=torch.version.cuda, torch_import_s=round(time.perf_counter() - t0, 2)
        )
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env.update(
                gpu=props.name,
                gpu_count=torch.cuda.device_count(),
                capability=f"{props.major}.{props.minor}",
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                multiprocessors=props.multi_processor_count,
            )
            torch.ones(1, device="cuda").add_(1)  # the first allocation: the driver answers
            torch.cuda.synchronize()
        elif args.device == "cuda":
            problems.append(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device")
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except Exception as exc:
        problems.append(f"transformers does not import: {type(exc).__name__}: {exc}")
    env["problems"] = problems
    args.report.write_text(json.dumps(env, indent=1))
    venv = f"a venv over {env['venv_over']}" if env["venv_over"] else "not a venv"
    print(f"preflight: python3 {env['python']} at {env['executable']} ({venv})")
    print(
        f"preflight: torch {env.get('torch', '-')} (CUDA {env.get('torch_cuda', '-')}), "
        f"transformers {env.get('transformers', '-')}, "
        f"device {args.device}: {env.get('gpu', 'no GPU')}"
        + (f" x{env['gpu_count']}, {env['gpu_memory_gib']} GiB, sm {env['capability']}" if "gpu" in env else "")
    )
    for problem in problems:
        print(f"preflight: PROBLEM {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
