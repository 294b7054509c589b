#!/usr/bin/env bash
# The sixth device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run30.sh OUTDIR
# The two-shot by registers at w8 64 KiB runs 0.7 us over the model (run 28, after the refit),
# which predicts its move (block_moves_cross) well: two_shot_gap.cu with its register variants,
# and the suite's libraries timed from C++ (harness_gap.sh: whole, no phase, phase alone).
set -u
out="${1:?usage: run30.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels -I kernels/include \
  -o /tmp/tsg validation/experiments/two_shot_gap.cu || exit 1
timeout 90 /tmp/tsg --stamps > "$out/two_shot_gap.jsonl"
echo "two_shot_gap exit $? at $(( $(date +%s) - t0 )) s"
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vb \
  > "$out/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s"
bash validation/experiments/harness_gap.sh build/vb "$out/harness_gap.jsonl"
echo "harness_gap exit $? at $(( $(date +%s) - t0 )) s"
