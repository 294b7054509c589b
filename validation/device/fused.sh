#!/usr/bin/env bash
# Run the fused GEMM + communication set on a GPU machine, from the repository root:
#   validation/device/fused.sh BUNDLE OUT
# BUNDLE comes from `python -m validation.run.fused --prepare BUNDLE` (libraries, sources,
# cases.json). Writes into OUT: device.txt, fused.jsonl (one line per case), fused.log (one
# line per case as it runs), report.md (the tables of docs/VALIDATION.md), fused-repeat.jsonl
# and .log (a second pass, when time is left), sass.txt (local memory and calls in the gemm-rs
# kernels). Time limits in seconds: PK_FUSED_DEADLINE (120, the first pass, counted from the
# start), PK_FUSED_REPEAT_BEFORE (95: no second pass when started later),
# PK_FUSED_REPEAT_DEADLINE (60). The whole script stays under 200 s.
set -u
start=$(date +%s)
bundle="$1"
out="$2"
mkdir -p "$out"
export CUDA_MODULE_LOADING=EAGER PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
py=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  command -v nvcc >/dev/null && nvcc --version | tail -1
} > "$out/device.txt" 2>&1

# The libraries were built where nvcc and the simulator are; rebuild here only if they do not load.
if ! $py -c "import ctypes, glob, sys; [ctypes.CDLL(p) for p in glob.glob(sys.argv[1] + '/lib/*.so')]" \
    "$bundle" 2>> "$out/device.txt"; then
  echo "prebuilt libraries do not load here: rebuilding from $bundle/src" >> "$out/device.txt"
  for src in "$bundle"/src/*.cu; do
    stem=$(basename "$src" .cu)
    mm=$(grep -q PK_ENABLE_MULTIMEM "$src" && echo 1 || echo 0)
    [ "$mm" = 1 ] && continue
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I kernels \
      -Xcompiler -fPIC -shared -o "$bundle/lib/lib$stem.so" "$src" >> "$out/device.txt" 2>&1 &
  done
  wait
fi

left=$(( ${PK_FUSED_DEADLINE:-120} - ($(date +%s) - start) ))
$py -m validation.run.fused --bundle "$bundle" --out "$out/fused.jsonl" \
  --deadline-s "$left" --case-timeout 40 2> "$out/fused.log"
echo "run_fused exit $?" >> "$out/fused.log"
$py -m validation.run.fused --report "$out/fused.jsonl" > "$out/report.md" 2>> "$out/fused.log"
# A second pass over the same cases (repeatability of the timings) when time is left.
if [ $(( $(date +%s) - start )) -lt "${PK_FUSED_REPEAT_BEFORE:-95}" ]; then
  $py -m validation.run.fused --bundle "$bundle" --out "$out/fused-repeat.jsonl" \
    --deadline-s "${PK_FUSED_REPEAT_DEADLINE:-60}" --case-timeout 40 2> "$out/fused-repeat.log"
fi
# The intra-SM gemm-rs kernel calls an out-of-line routine for rows past an owner boundary:
# local-memory traffic and the call in its SASS, for the record.
if command -v cuobjdump >/dev/null; then
  for lib in "$bundle"/lib/libgemm-rs-*.so; do
    echo "== $lib: STL $(cuobjdump -sass "$lib" | grep -c STL), LDL $(cuobjdump -sass "$lib" | grep -c LDL), CALL $(cuobjdump -sass "$lib" | grep -c CALL)"
    cuobjdump -sass "$lib" | grep -B8 -A2 -E "CALL|STL" | head -80
  done > "$out/sass.txt" 2>&1
fi
rm -f "$out"/*.ids "$out"/*.current
grep -c '"ok": true' "$out/fused.jsonl"; grep -v '"ok": true' "$out/fused.jsonl" | cut -c1-400 | head -20
tail -n 45 "$out/report.md"
