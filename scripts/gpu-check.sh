#!/usr/bin/env bash
# The GPU check: the `gpu` tests and the GPU figures on one CUDA GPU, in under 8 minutes.
#
#   scripts/gpu-check.sh --fetch-wheels [DIR]   # anywhere with PyPI: DIR (default .gpu-wheels, git-ignored) gets
#                                               # the wheels the GPU node's python3 lacks, for its Python
#                                               # (GPU_PYTHON_VERSION, default 3.12), and the study plan;
#                                               # prints what travels and the tree + wheels size
#   scripts/gpu-check.sh [--study] [DIR]        # on the node, offline: preflight, install, tests, benchmark, study
#
# docs/GPU_CHECK.md says how to run it, what it prints and where it writes.
#
# It runs under the node's python3 (GPU_CHECK_PYTHON), a venv holding its CUDA torch and transformers, and makes no
# venv of its own (one made from a venv sees the base interpreter's packages, not torch): the missing
# wheels go to a --target folder on PYTHONPATH. Every phase has a timeout inside the run's budget
# (GPU_CHECK_BUDGET_S, default 450 s), pytest's per-test timeout is shorter
# than its phase, and a failed phase is recorded while the next one still runs. --study runs the GPU study
# preset (GPU_CHECK_STUDY_PRESET, default examples/presets/gpu-study-smollm2.yaml) after the checks, only if
# GPU_CHECK_STUDY_MIN_S (default 120) are left. Everything lands under $OUT (default var/gpu-check/out):
# gpu-check.log, junit.xml, gpu-figures.json, nvidia-smi-before.txt, nvidia-smi-after.txt, study-runs.tar.gz.
# The last line sums up each phase's exit code and the headline figures.
#
# GPU_CHECK_DRY=cpu is the CPU dry run (tests/gpu/test_gpu_check_dry.py, in `make test`): the same phases,
# the device forced to the CPU, the benchmark at a tiny shape, the study preset under a tiny override.
set -uo pipefail  # no -e: one failed phase must not lose the others' figures
cd "$(dirname "$0")/.."
REPO=$PWD
TOOLS=$REPO/scripts/gpu_check
DRY=${GPU_CHECK_DRY:-}
STUDY_PRESET=${GPU_CHECK_STUDY_PRESET:-examples/presets/gpu-study-smollm2.yaml}
RESERVE_S=25  # kept back from the budget for nvidia-smi after and the report
KILL_AFTER_S=5

fetch_wheels() {
  local dest=${1:-.gpu-wheels} host=${GPU_CHECK_HOST_PYTHON:-$REPO/.venv/bin/python}
  [ -x "$host" ] || { echo "gpu-check: $host not found: run make venv (or set GPU_CHECK_HOST_PYTHON)" >&2; return 1; }
  mkdir -p "$dest" && rm -f "$dest/study-plan.json" || return 1
  if [ -f "$STUDY_PRESET" ]; then
    local override=()
    [ "$DRY" = cpu ] && override=(--override "$TOOLS/study-cpu-override.yaml" --max-runs "${GPU_CHECK_STUDY_MAX_RUNS:-2}")
    "$host" "$TOOLS/study_plan.py" "$STUDY_PRESET" "$dest/study-plan.json" "${override[@]}" \
      || echo "study: the plan records why; --study will skip it"
  else
    echo "study: $STUDY_PRESET does not exist: no study in the bundle, --study will skip"
  fi
  "$host" "$TOOLS/bundle.py" "$dest"
}

record() {  # record NAME RC SECONDS TIMEOUT NOTE [START]: START in seconds from the run's start
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-$(( $(date +%s) - DEADLINE + BUDGET ))}" >> "$WORK/phases.tsv"
}

phase_time() {  # phase_time CAP: CAP, or less where the budget has less left
  local left=$(( DEADLINE - $(date +%s) - RESERVE_S - KILL_AFTER_S ))
  echo $(( $1 < left ? $1 : left ))
}

phase() {  # phase NAME TIMEOUT COMMAND...: run it under its timeout and record how it ended
  local name=$1 limit=$2 t0 rc
  shift 2
  if [ "$limit" -lt 10 ]; then
    echo "== $name: skipped, ${limit}s left of the budget"
    record "$name" skipped 0 "$limit" "no time left in the budget"
    return
  fi
  echo "== $name (timeout ${limit}s, $(( DEADLINE - $(date +%s) ))s of the budget left)"
  t0=$(date +%s)
  timeout --kill-after="$KILL_AFTER_S" "$limit" "$@"
  rc=$?
  echo "== $name: exit $rc in $(( $(date +%s) - t0 ))s"
  record "$name" "$rc" "$(( $(date +%s) - t0 ))" "$limit" "${PHASE_NOTE:-}" "$(( t0 - DEADLINE + BUDGET ))"
}

smi() {  # smi FILE: nvidia-smi's view of the GPU, or why there is none
  if command -v nvidia-smi >/dev/null; then
    { timeout 10 nvidia-smi; echo; timeout 5 nvidia-smi --format=csv \
        --query-gpu=name,driver_version,pstate,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,clocks.sm,clocks.mem
    } > "$1" 2>&1
    tail -2 "$1"
  else
    echo "nvidia-smi: not found on this machine${DRY:+ (CPU dry run)}" | tee "$1"
  fi
}

run_check() {
  local study=0 wheels=.gpu-wheels started device t
  while [ $# -gt 0 ]; do
    case $1 in
      --study) study=1 ;;
      -*) echo "gpu-check: unknown option $1 (see the top of $0)"; return 2 ;;
      *) wheels=$1 ;;
    esac
    shift
  done
  started=$(date +%s)
  BUDGET=${GPU_CHECK_BUDGET_S:-450}
  DEADLINE=$(( started + BUDGET ))
  WORK=$(mktemp -d /tmp/opl-gpu-check.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
  wheels=$(cd "$wheels" 2>/dev/null && pwd || echo "$wheels")
  local py=${GPU_CHECK_PYTHON:-python3}
  device=cuda
  [ "$DRY" = cpu ] && device=cpu
  export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 OPL_GPU_TEST_DEVICE=$device
  echo "gpu-check: $(date -u +%FT%TZ), budget ${BUDGET}s, device $device${DRY:+ (dry run)}, python3 = $(command -v "$py"), wheels $wheels, OUT $OUT"
  smi "$OUT/nvidia-smi-before.txt"

  phase preflight "$(phase_time 45)" "$py" "$TOOLS/preflight.py" "$WORK/env.json" --device "$device"
  phase install "$(phase_time 90)" "$py" "$TOOLS/install.py" "$wheels" "$WORK/site" "$WORK/install.json"
  export PYTHONPATH="$REPO:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"

  t=$(phase_time 180)
  local per_test=$(( t - 15 < 120 ? t - 15 : 120 ))
  PHASE_NOTE="per-test --timeout $per_test" \
  phase tests "$t" "$py" -m pytest -c "$TOOLS/pytest.ini" --rootdir "$REPO" -p pytest_timeout --noconftest -m gpu \
    --timeout "$per_test" --junitxml "$OUT/junit.xml" \
    tests/gpu tests/integration/trainer/test_vllm_engine.py

  local bench=()
  [ "$DRY" = cpu ] && bench=(--device cpu --tiny)
  phase benchmark "$(phase_time 150)" "$py" benchmarks/gpu_check.py --json "$WORK/bench.json" "${bench[@]}"

  local plan=$wheels/study-plan.json min=${GPU_CHECK_STUDY_MIN_S:-120}
  t=$(phase_time 100000)
  if [ "$study" = 0 ]; then
    record study off 0 0 "not asked: run with --study"
  elif [ ! -f "$plan" ]; then
    echo "== study: skipped: no study plan in $wheels ($STUDY_PRESET did not exist when the wheels were fetched)"
    record study skipped 0 0 "no study plan in the bundle"
  elif [ "$t" -lt "$min" ]; then
    echo "== study: skipped: ${t}s left, it needs ${min}s (GPU_CHECK_STUDY_MIN_S)"
    record study skipped 0 "$t" "${t}s left of the budget, under GPU_CHECK_STUDY_MIN_S=${min}"
  else
    phase study "$t" "$py" "$TOOLS/study_run.py" "$plan" "$WORK/study" "$WORK/study.json" "$OUT/study-runs.tar.gz" \
      --seconds "$(( t - 10 ))" --parallel "${GPU_CHECK_STUDY_PARALLEL:-$([ "$DRY" = cpu ] && echo 2 || echo 4)}" --device "$device"
  fi

  smi "$OUT/nvidia-smi-after.txt"
  timeout 20 "$py" "$TOOLS/report.py" "$WORK" "$OUT" --budget "$BUDGET" --started "$started" --dry "$DRY" && return 0
  local rc=$?
  [ -f "$OUT/gpu-figures.json" ] && return "$rc"
  echo "gpu-check summary: $(awk -F'\t' '{printf "%s=%s ", $1, $2}' "$WORK/phases.tsv")| report.py failed (exit $rc) | $(( $(date +%s) - started )) s of $BUDGET"
  return 1
}

case "${1:-}" in
  --fetch-wheels) shift; fetch_wheels "$@"; exit ;;
  -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
OUT=${OUT:-$REPO/var/gpu-check/out}
mkdir -p "$OUT" || exit 1
: > "$OUT/gpu-check.log"
run_check "$@" 2>&1 | tee -a "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
