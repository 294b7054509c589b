#!/usr/bin/env bash
# Build the Hopper GEMM on the GPU machine (or take a prebuilt library), check and time every
# variant against torch.matmul with the GPU's clocks and power sampled throughout, and profile
# one 8192^3 launch of the default, the two clustered variants 4 and 7 and torch.matmul with
# Nsight Compute. Everything lands in OUT_DIR:
#   device.txt   name, uuid, driver, clocks, power limit, date
#   build.log    ptxas -v (when built here)
#   gemm.*       variants 0-3 (.jsonl records, .txt summary)
#   gemm-c2.*    the clusters of two along M (variants 4-6) and variant 0 again
#   gemm-c4.*    the clusters along N (variants 7-9) and variant 4 again
#   gemm-base.*  variant 4 of the --baseline library, quick shapes
#   smi.csv      nvidia-smi every 50 ms: timestamp, SM and memory clocks, power, temperature,
#                the active clock-event reasons
#   ncu.txt      the profile
# gemm-c2 and gemm-c4 end with SUSTAIN seconds of back-to-back 8192^3 calls of torch and of each
# of their variants. Every group runs in a process of its own (a failure there cannot cost the
# others' results), and torch is timed in each.
#
#   validation/device/gemm.sh [--lib PREBUILT.so] [--baseline OTHER.so] [--sustain S] [--no-profile] OUT_DIR
#
# --no-profile leaves out the Nsight Compute step.
#
# From the repository root; the benchmark runs as python3 -m validation.run.gemm, so the
# checkout needs no PYTHONPATH (run as a script path it could not import the project).
set -u -o pipefail
lib=
base=
sustain=1.5
profile=1
while [ $# -gt 1 ]; do
  case "$1" in
    --lib) lib=$2; shift 2;;
    --baseline) base=$2; shift 2;;
    --sustain) sustain=$2; shift 2;;
    --no-profile) profile=; shift;;
    *) echo "gemm.sh: unknown option $1" >&2; exit 2;;
  esac
done
out="${1:?usage: validation/device/gemm.sh [--lib SO] [--baseline SO] [--sustain S] [--no-profile] OUT_DIR}"
mkdir -p "$out" build/gemm
export PYTHONUNBUFFERED=1 CUDA_MODULE_LOADING=EAGER
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu \
  --format=csv | tee "$out/device.txt"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$out/device.txt"
if [ -z "$lib" ]; then
  lib=build/gemm/libpk_gemm.so
  start=$(date +%s)
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -shared -Xcompiler -fPIC \
    -I kernels/include -I kernels -Xptxas -v -o "$lib" kernels/gemm/gemm_bf16.cu >"$out/build.log" 2>&1
  echo "build rc=$? in $(( $(date +%s) - start )) s; spills:"
  grep "spill" "$out/build.log"
fi

reasons=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
  --format=csv -lms 50 >"$out/smi.csv" 2>&1 &
smi=$!

timeout 80 python3 -m validation.run.gemm --so "$lib" --variants 0,1,2,3 \
  --out "$out/gemm.jsonl" >/dev/null 2>"$out/gemm.txt"
echo "bench v0-3 rc=$?"; cat "$out/gemm.txt"
timeout 90 python3 -m validation.run.gemm --so "$lib" --variants 4,5,6,0 --sustain "$sustain" \
  --out "$out/gemm-c2.jsonl" >/dev/null 2>"$out/gemm-c2.txt"
echo "bench v4-6,0 rc=$?"; cat "$out/gemm-c2.txt"
timeout 80 python3 -m validation.run.gemm --so "$lib" --variants 7,8,9,4 --sustain "$sustain" \
  --out "$out/gemm-c4.jsonl" >/dev/null 2>"$out/gemm-c4.txt"
echo "bench v7-9,4 rc=$?"; cat "$out/gemm-c4.txt"
if [ -n "$base" ]; then
  timeout 35 python3 -m validation.run.gemm --so "$base" --variants 4 --quick \
    --out "$out/gemm-base.jsonl" >/dev/null 2>"$out/gemm-base.txt"
  echo "baseline v4 rc=$?"; cat "$out/gemm-base.txt"
fi
kill "$smi"

if [ -n "$profile" ] && command -v ncu >/dev/null; then
  timeout 60 ncu --clock-control none -k regex:'gemm|nvjet|xmma|cutlass' -c 4 --section LaunchStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis python3 -c "
import sys, torch
sys.path.insert(0, '.')
from validation.run import gemm as g
run = g.Runner(g.load_library('$lib'), torch)
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
b = torch.randn_like(a); c = torch.empty_like(a)
run.gemm(a, b, c, 0); run.gemm(a, b, c, 4); run.gemm(a, b, c, 7); torch.matmul(a, b, out=c); torch.cuda.synchronize()
" >"$out/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "^  [a-z_A-Z].*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Cluster Size|Grid Size|Registers" "$out/ncu.txt" | head -60
fi
