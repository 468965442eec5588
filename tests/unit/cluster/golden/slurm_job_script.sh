#!/bin/bash
# OffPolicy Lab run 42, attempt 3, profile 'a100'
set -eo pipefail
if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then
  echo "Slurm restarted this job (restart ${SLURM_RESTART_COUNT}); OffPolicy Lab resubmits it as a new attempt" >&2
  exit 1
fi
# --- set-up lines of the cluster profile
module load cuda/12.4
source /opt/conda/bin/activate rl
# ---
argv=()
for ((i = 0; i < OPL_ARGC; i++)); do name="OPL_ARGV_$i"; argv+=("${!name}"); done
cd -- "$OPL_RUN_DIR"
exec "${argv[@]}"
