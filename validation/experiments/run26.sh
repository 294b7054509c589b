#!/usr/bin/env bash
# The second device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run26.sh OUTDIR
# block_moves at payloads of 4 MiB and 16 MiB (--payload-mib): the moves between the 256 KiB
# and 64 MiB points, where the suite's TMA and register sums (1-16 MiB) differ by 8-12 % and
# the model, fitted on the two ends, predicts them within 1 % of each other (run 25).
set -u
out="${1:?usage: run26.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
for mib in 4 16; do
  bash validation/experiments/block_moves.sh "$out" "bm$mib" "--payload-mib $mib"
  echo "block_moves --payload-mib $mib exit $? at $(( $(date +%s) - t0 )) s"
done
