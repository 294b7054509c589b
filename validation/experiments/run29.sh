#!/usr/bin/env bash
# The fifth device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run29.sh OUTDIR
# block_moves with crossed reads into one destination (the direct reduce-scatter's shape) at
# 4 KiB - 4 MiB behind a write: where the suite's reduce-scatter by TMA runs 21 % over
# the model at 16 MiB w4 and by registers 11 % (run 28).
set -u
out="${1:?usage: run29.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
python3 validation/microbench/run.py --out /tmp/bm --only block_moves --timeout-s 200 --budget-s 200 \
  > "$out/bm.log" 2>&1
echo "block_moves exit $? at $(( $(date +%s) - t0 )) s"
cp /tmp/bm/microbench.json "$out/bm.json"
