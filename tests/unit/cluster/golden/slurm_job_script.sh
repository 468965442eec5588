#!/bin/bash
# OffPolicy Lab run 42, attempt 3, profile 'a100'
set -eo pipefail
# --- set-up lines of the cluster profile
module load cuda/12.4
source /opt/conda/bin/activate rl
# ---
argv=()
for ((i = 0; i < OPL_ARGC; i++)); do name="OPL_ARGV_$i"; argv+=("${!name}"); done
cd -- "$OPL_RUN_DIR"
exec "${argv[@]}"
