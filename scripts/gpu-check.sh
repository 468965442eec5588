#!/usr/bin/env bash
# The GPU check: run the `gpu` tests and print GPU figures, on one CUDA GPU (H100/H200), in < 8 minutes.
#
#   scripts/gpu-check.sh --fetch-wheels DIR   # on a machine that reaches PyPI: fill DIR with the wheels
#   scripts/gpu-check.sh DIR                  # on the GPU machine (no network needed)
#
# It uses the GPU machine's own CUDA build of torch (>= 2.11; never installs one) in a virtualenv
# that sees the system's packages, plus the trainer's other wheels from DIR (requirements-trainer.txt
# without torch, and without accelerate/gguf, which only the smollm2 preset's GGUF conversion needs)
# and pytest. vLLM is not needed: the vLLM GPU test skips without it.
# It prints, from benchmarks/gpu_check.py: bf16 training tokens/s of a random-init Qwen2-0.5B-shaped
# model, m2po vs grpo time per update (ratio), hf-engine generation tokens/s, peak GPU memory.
set -euo pipefail
cd "$(dirname "$0")/.."

requirements() {  # the wheels the check installs
  grep -v -E '^[[:space:]]*(#|$)|^(torch|accelerate|gguf)==' requirements-trainer.txt
  grep -E '^(pytest|pytest-timeout)==' requirements-test.txt
}

if [ "${1:-}" = "--fetch-wheels" ]; then
  dest=${2:?usage: scripts/gpu-check.sh --fetch-wheels DIR}
  mkdir -p "$dest"
  requirements > "$dest/requirements.txt"
  # The GPU machine's Python may differ from this one's: GPU_PYTHON_VERSION (default 3.11).
  python3 -m pip download --quiet --dest "$dest" --only-binary=:all: \
    --python-version "${GPU_PYTHON_VERSION:-3.11}" --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -r "$dest/requirements.txt"
  echo "wheels for the GPU check in $dest ($(ls "$dest" | wc -l) files)"
  exit 0
fi

wheels=${1:?usage: scripts/gpu-check.sh WHEELS_DIR (see --fetch-wheels)}
wheels=$(cd "$wheels" && pwd)
PY=${PYTHON:-python3}
started=$(date +%s)

"$PY" - <<'EOF'
import sys
import torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
if (major, minor) < (2, 11):
    sys.exit(f"gpu-check: torch {torch.__version__} is older than 2.11")
if not torch.cuda.is_available():
    sys.exit(f"gpu-check: torch {torch.__version__} sees no CUDA device")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
EOF

work=$(mktemp -d /tmp/opl-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv --system-site-packages "$work/venv"
requirements > "$work/requirements.txt"
"$work/venv/bin/pip" install --quiet --no-index --find-links "$wheels" -r "$work/requirements.txt"
"$work/venv/bin/python" -c "import torch, transformers; print('venv: torch', torch.__version__, 'transformers', transformers.__version__)"

export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD"
echo "== gpu tests"
# No Django here: the suite's conftest and its env plugin stay out (--noconftest, addopts replaced).
timeout 300 "$work/venv/bin/python" -m pytest -m gpu tests/gpu tests/integration/trainer/test_vllm_engine.py \
  --noconftest -o addopts="-ra --strict-markers --import-mode=importlib" -p no:cacheprovider -q

echo "== GPU figures"
timeout 300 "$work/venv/bin/python" benchmarks/gpu_check.py
echo "gpu-check done in $(( $(date +%s) - started )) s"
