#!/usr/bin/env bash
# The seventh device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run38.sh OUTDIR
# two_shot_gap.cu --flush-smem: every kernel at w2 and w8, 4 KiB and 1 MiB, behind the plain
# write kernel and behind the same write launched with the TMA kernels' dynamic shared memory,
# alternating blocks of 50 calls: is the TMA kernels' slow launch mode (run 32) the SMs'
# shared-memory carve-out changing after a kernel without shared memory?
set -u
out="${1:?usage: run38.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels -I kernels/include \
  -o /tmp/tsg validation/experiments/two_shot_gap.cu || exit 1
timeout 120 /tmp/tsg --flush-smem > "$out/two_shot_gap_smem.jsonl"
echo "two_shot_gap --flush-smem exit $? at $(( $(date +%s) - t0 )) s"
