#!/usr/bin/env bash
# The fifth device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run29.sh OUTDIR
# block_moves with crossed reads into one destination (the direct reduce-scatter's shape) at
# 4 KiB - 4 MiB behind a write: where the suite's reduce-scatter by TMA runs 21 % over
# the model at 16 MiB w4 and by registers 11 % (run 28).
set -u
out="${1:?usage: run29.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
bash validation/experiments/block_moves.sh "$out" bm
echo "block_moves exit $? at $(( $(date +%s) - t0 )) s"
