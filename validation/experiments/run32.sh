#!/usr/bin/env bash
# The first device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run32.sh OUTDIR
# 1. validation/microbench/gemm_store_add.cu: our GEMM with the intra-SM fused kernels' store-add
#    epilogue into D outputs, beside plain stores (the intra-SM kernels ran 8-23 % over the model
#    in run 31);
# 2. validation/experiments/two_shot_gap.cu at w2, w4 and w8, 4 KiB - 1 MiB, with the one-shot's
#    phase beside it (the generated two-shot runs 4-13 % over the model at 4 KiB - 1 MiB while
#    block_moves_cross, its move, is predicted within a few per cent).
set -u
out="${1:?usage: run32.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt"
python3 validation/microbench/run.py --out "$out/mb" --only gemm_store_add --budget-s 120 | tail -n 5
echo "gemm_store_add at $(( $(date +%s) - t0 )) s"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels -I kernels/include \
  -o /tmp/tsg validation/experiments/two_shot_gap.cu || exit 1
timeout 150 /tmp/tsg --stamps > "$out/two_shot_gap.jsonl"
echo "two_shot_gap exit $? at $(( $(date +%s) - t0 )) s"
