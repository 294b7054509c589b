#!/usr/bin/env bash
# One device call of 2026-12-03 (run 18): the two_shot experiment, then
# validation/device_session.sh (the block pieces of be40c0b): 380 s in all.
#   bash validation/experiments/run18.sh OUTDIR   (carry .whl)
set -u
out="${1:?usage: run18.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I kernels \
  validation/experiments/two_shot.cu -o /tmp/two_shot && timeout 60 /tmp/two_shot > "$out/two_shot.jsonl"
echo "two_shot exit $? at $(( $(date +%s) - t0 )) s"
PK_SESSION_S=$(( 380 - ($(date +%s) - t0) )) bash validation/device_session.sh "$out"
