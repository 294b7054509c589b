#!/usr/bin/env bash
# The first device call of 2026-12-03, session 11, from the repository root, carry .whl and
# build/old (HEAD 15eb9de's kernels/, its golden two-shot by TMA and this experiment's file,
# for the "before" binary):
#   bash validation/experiments/run25.sh OUTDIR
# two_shot_gap.cu before and after the change (the generated collectives declared one block an
# SM, peers staggered by a subtraction, pointer sets filled at compile-time slots), then the
# session (validation/device_session.sh within 300 s): the suite judges the change.
set -u
out="${1:?usage: run25.sh OUTDIR}"
mkdir -p "$out"
flags="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a"
nvcc $flags -I kernels -I kernels/include -o /tmp/tsg_new validation/experiments/two_shot_gap.cu &
nvcc $flags -I build/old/kernels -I build/old/kernels/include -o /tmp/tsg_old \
  build/old/validation/experiments/two_shot_gap.cu &
wait
export CUDA_MODULE_LOADING=EAGER
timeout 60 /tmp/tsg_old --stamps > "$out/two_shot_gap_before.jsonl"; echo "before rc=$?"
timeout 60 /tmp/tsg_new --stamps > "$out/two_shot_gap_after.jsonl"; echo "after rc=$?"
PK_SESSION_S=300 bash validation/device_session.sh "$out" | tail -n 12
