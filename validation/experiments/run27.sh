#!/usr/bin/env bash
# The third device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run27.sh OUTDIR
# block_moves with its launches alone behind a write now also at 1 MiB and 4 MiB: cold moves
# of the sizes where the suite's TMA and register sums part (run 25), the primitive the
# 4 and 16 MiB back-to-back points of run 26 (hot in L2) are not.
set -u
out="${1:?usage: run27.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
bash validation/experiments/block_moves.sh "$out" bm
echo "block_moves exit $? at $(( $(date +%s) - t0 )) s"
