#!/usr/bin/env bash
# The third device call of 2026-12-04, session 15, from the repository root, carry .whl:
#   git show db5a414:validation/microbench/block_moves.cu > validation/experiments/block_moves_prev.cu
#   bash validation/experiments/run45.sh OUTDIR
# block_moves with its one-destination moves compiled knowing it (pkc::one, as the generated
# one-shot's phase): run 44 had the one-shot's phase (two_shot_gap reg_one_shot) 0.4-0.66 us
# faster than block_moves' shared sums of the same shape on one GPU, not by their order. On one
# GPU: the new block_moves through the driver (a calibration input), then the previous
# (every count at run time) and the new binary alone, each writing its points as JSON lines.
set -u
out="${1:?usage: run45.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/device.txt"
python3 validation/microbench/run.py --out "$out/mb" --only block_moves --budget-s 150 | tail -n 5
echo "block_moves at $(( $(date +%s) - t0 )) s"
flags="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I kernels -I validation/microbench"
nvcc $flags -o /tmp/bm_prev validation/experiments/block_moves_prev.cu || exit 1
nvcc $flags -o /tmp/bm_new validation/microbench/block_moves.cu || exit 1
/tmp/bm_prev > "$out/prev.jsonl"; echo "prev exit $? at $(( $(date +%s) - t0 )) s"
/tmp/bm_new > "$out/new.jsonl"; echo "new exit $? at $(( $(date +%s) - t0 )) s"
rm -rf "$out/mb/bin"
tar -C "$out" -czf "$out/r45.tgz" device.txt mb prev.jsonl new.jsonl && rm -rf "$out/mb" "$out"/*.jsonl "$out/device.txt"
