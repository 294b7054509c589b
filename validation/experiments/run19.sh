#!/usr/bin/env bash
# The next device call (written 2026-12-03 after run 18, not yet run), from the repository
# root, carry .whl:   bash validation/experiments/run19.sh OUTDIR
# 1. validation/device_session.sh (the suite, fused, matrix, microbench incl. ce_burst's
#    "order": "all" rounds) within 380 s; 2. harness_gap.sh on its bundle (the collectives
#    timed from C++); 3. copy_under_gemm.cu (a register sum beside our GEMM); 4. block_moves
#    at 256 MiB with the pieces of be40c0b (refit input).
# Few files under OUTDIR: the device refuses to bring back many.
set -u
out="${1:?usage: run19.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
PK_SESSION_S=380 bash validation/device_session.sh "$out" | tail -n 12
bash validation/experiments/harness_gap.sh build/vb "$out/harness_gap.jsonl"
echo "harness_gap exit $? at $(( $(date +%s) - t0 )) s"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I kernels \
  validation/experiments/copy_under_gemm.cu -o /tmp/copy_under_gemm \
  && timeout 60 /tmp/copy_under_gemm > "$out/copy_under_gemm.jsonl"
echo "copy_under_gemm exit $? at $(( $(date +%s) - t0 )) s"
python3 validation/microbench/run.py --out /tmp/bm256 --only block_moves --bench-args "--payload-mib 256" \
  --timeout-s 60 --budget-s 60 > /tmp/bm256.log 2>&1
echo "block_moves 256 MiB exit $? at $(( $(date +%s) - t0 )) s"
cp /tmp/bm256/microbench.json "$out/bm256.json"
