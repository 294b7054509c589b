#!/usr/bin/env bash
# The fifth device call of 2026-12-03, session 14, from the repository root, carry .whl:
#   bash validation/experiments/run43.sh OUTDIR
# block_moves with its shared sums also in the generated one-shot's staggered peer order
# ("order": "staggered", measured only): two_shot_gap (run 32) had the one-shot's phase
# 0.3-0.6 us faster than block_moves' shared sums at 4 KiB - 1 MiB, every group reading
# source 0 first; is it the order?
set -u
out="${1:?usage: run43.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
python3 validation/microbench/run.py --out "$out/mb" --only block_moves --budget-s 120 | tail -n 5
echo "block_moves at $(( $(date +%s) - t0 )) s"
rm -rf "$out/mb/bin" "$out/mb/logs"
