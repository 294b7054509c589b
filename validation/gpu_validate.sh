#!/usr/bin/env bash
# One GPU session of the collective validation, from the repository root:
#   validation/gpu_validate.sh BUNDLE OUTDIR
# BUNDLE: `pksim validate --prepare -o BUNDLE` (libraries + the suite's cases.json), with the
# correctness matrix of validation/collective_cases.py in BUNDLE/matrix (cases.json,
# ipc_cases.json, library paths relative to it). Writes into OUTDIR:
#   mb/microbench.json   the primitives the collective model is fitted to (block_moves,
#                        launch_latency incl. the host calls, hbm_copy): calibration inputs;
#   measured.jsonl       the suite, timed and checked: judged, never fitted;
#   matrix/              correctness matrix, compute-sanitizer memcheck, two-process IPC run
#                        (validation/gpu_collectives.sh).
# Time limits (seconds): PK_SUITE_DEADLINE (240), PK_MATRIX_DEADLINE (120).
set -u
bundle="$1"
out="$2"
mkdir -p "$out"
export CUDA_MODULE_LOADING=EAGER PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
py=${PYTHON:-python3}
t0=$(date +%s)
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$out/device.txt" 2>&1

timeout --signal=KILL 120 $py validation/microbench/run.py --out "$out/mb" \
  --only block_moves,launch_latency,hbm_copy --budget-s 110 > "$out/mb.log" 2>&1
echo "microbench exit $? at $(( $(date +%s) - t0 )) s" >> "$out/times.txt"

$py -m validation.run_collectives --cases "$bundle/cases.json" --out "$out/measured.jsonl" \
  --deadline-s "${PK_SUITE_DEADLINE:-240}" --case-timeout 60 2> "$out/suite.log"
echo "suite exit $? at $(( $(date +%s) - t0 )) s" >> "$out/times.txt"

[ -e "$bundle/matrix/lib" ] || ln -s ../lib "$bundle/matrix/lib"   # the matrix shares the libraries
if command -v nvcc >/dev/null; then
  nvcc -O2 -std=c++17 -I kernels -o "$bundle/matrix/sanitize_collectives" \
    validation/sanitize_collectives.cpp -ldl >> "$out/device.txt" 2>&1
fi
PK_MATRIX_DEADLINE=${PK_MATRIX_DEADLINE:-120} PK_SANITIZE_TIMEOUT=50 PK_IPC_TIMEOUT=40 \
  bash validation/gpu_collectives.sh "$bundle/matrix" "$out/matrix" > "$out/matrix.log" 2>&1
echo "matrix exit $? at $(( $(date +%s) - t0 )) s" >> "$out/times.txt"
cat "$out/times.txt"
tail -n 3 "$out/suite.log"
# the device tool returns a limited number of files: everything in one archive
tar czf "$out.tgz" --exclude=bin --exclude="*.ids" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
