#!/usr/bin/env bash
# pksim.torch on the GPU at hand, from the repository root (a device call):
#   validation/device/torch_check.sh OUTDIR
# Every op of pksim.torch against torch references (python -m pksim.torch.selftest), worlds
# PK_TORCH_WORLDS (2,4,8) of processes sharing the GPU(s), PK_TORCH_CASES (2) random cases each,
# bf16 and fp32; PK_TORCH_FUSED_PER_RANK=1: the fused ops launched one rank per process too. Writes OUTDIR/device.txt, torch_check.jsonl (one line per op, dtype, world,
# case), torch_check.jsonl.notes.json (what each communicator said) and torch_check.log.
# The kernels are built here (nvcc) into PKSIM_CACHE (default /tmp/pksim-cache).
set -u
out="$1"
mkdir -p "$out"
source validation/device/env.sh
export PKSIM_CACHE=${PKSIM_CACHE:-/tmp/pksim-cache} PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1
  git rev-parse HEAD 2>/dev/null || true
} > "$out/device.txt" 2>&1
timeout --signal=KILL "${PK_TORCH_TIMEOUT:-300}" python3 -m pksim.torch.selftest \
  --worlds "${PK_TORCH_WORLDS:-2,4,8}" --cases "${PK_TORCH_CASES:-2}" \
  --out "$out/torch_check.jsonl" ${PK_TORCH_FUSED_PER_RANK:+--fused-per-rank} > "$out/torch_check.log" 2>&1
echo "selftest exit $?" >> "$out/torch_check.log"
tail -n 25 "$out/torch_check.log"
