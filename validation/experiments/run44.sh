#!/usr/bin/env bash
# The second device call of 2026-12-04, session 15, from the repository root, carry .whl:
#   bash validation/experiments/run44.sh OUTDIR
# 1. block_moves with its kernels declared one block an SM as the generated kernels are (its TMA
#    copy had 32 B of stack before) and the staggered shared sums by a subtraction (run 43's `%`
#    made them 0.2-0.8 us slower than the same order): a calibration input;
# 2. two_shot_gap.cu on the same GPU: the generated one-shot's and two-shot's phases beside
#    block_moves' shared and crossed sums of the same shapes.
set -u
out="${1:?usage: run44.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt"
python3 validation/microbench/run.py --out "$out/mb" --only block_moves --budget-s 150 | tail -n 5
echo "block_moves at $(( $(date +%s) - t0 )) s"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels -I kernels/include \
  -o /tmp/tsg validation/experiments/two_shot_gap.cu || exit 1
timeout 200 /tmp/tsg > "$out/two_shot_gap.jsonl"
echo "two_shot_gap exit $? at $(( $(date +%s) - t0 )) s"
rm -rf "$out/mb/bin"
tar -C "$out" -czf "$out/r44.tgz" device.txt mb two_shot_gap.jsonl && rm -rf "$out/mb" "$out/two_shot_gap.jsonl" "$out/device.txt"
