#!/usr/bin/env bash
# Build the Hopper GEMM on the GPU machine, check and time it against torch.matmul, and
# profile one launch of two variants with Nsight Compute. Everything lands in OUT_DIR:
#   build.log (ptxas -v), sass_hgmma.txt (HGMMA count), gemm.jsonl + gemm.txt (variants 0-3),
#   gemm-c2.jsonl + gemm-c2.txt (variant 4, clusters of two, in its own process so that a
#   failure there cannot cost the others' results), ncu.txt.
#
#   validation/device/gemm.sh OUT_DIR
set -u -o pipefail
out="${1:?usage: gemm_gpu.sh OUT_DIR}"
mkdir -p "$out" build/gemm
export PYTHONUNBUFFERED=1 CUDA_MODULE_LOADING=EAGER
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
lib=build/gemm/libpk_gemm.so
start=$(date +%s)
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -shared -Xcompiler -fPIC \
  -I kernels/include -I kernels -Xptxas -v -o "$lib" kernels/gemm/gemm_bf16.cu >"$out/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - start )) s; spills:"
grep "spill" "$out/build.log"
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass "$lib" | grep -c HGMMA >"$out/sass_hgmma.txt"
fi

timeout 55 python3 validation/run/gemm.py --so "$lib" --variants 0,1,2,3 \
  --out "$out/gemm.jsonl" >/dev/null 2>"$out/gemm.txt"
echo "bench v0-3 rc=$?"; cat "$out/gemm.txt"
timeout 35 python3 validation/run/gemm.py --so "$lib" --variants 4 \
  --out "$out/gemm-c2.jsonl" >/dev/null 2>"$out/gemm-c2.txt"
echo "bench v4 rc=$?"; cat "$out/gemm-c2.txt"

if command -v ncu >/dev/null; then
  timeout 30 ncu --clock-control none -k regex:gemm_kernel -c 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis python3 -c "
import sys, torch
sys.path.insert(0, '.')
from validation.run import gemm as g
run = g.Runner(g.load_library('$lib'), torch)
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
b = torch.randn_like(a); c = torch.empty_like(a)
run.gemm(a, b, c, 0); run.gemm(a, b, c, 4); torch.cuda.synchronize()
" >"$out/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "gemm_kernel|Duration|Throughput|L2 Cache|DRAM|SM Busy|Hit Rate" "$out/ncu.txt" | head -40
fi
