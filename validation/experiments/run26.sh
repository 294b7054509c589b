#!/usr/bin/env bash
# The second device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run26.sh OUTDIR
# block_moves at payloads of 4 MiB and 16 MiB (--payload-mib): the moves between the 256 KiB
# and 64 MiB points, where the suite's TMA and register sums (1-16 MiB) differ by 8-12 % and
# the model, fitted on the two ends, predicts them within 1 % of each other (run 25).
set -u
out="${1:?usage: run26.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
for mib in 4 16; do
  python3 validation/microbench/run.py --out /tmp/bm$mib --only block_moves --bench-args "--payload-mib $mib" \
    --timeout-s 170 --budget-s 170 > "$out/bm$mib.log" 2>&1
  echo "block_moves --payload-mib $mib exit $? at $(( $(date +%s) - t0 )) s"
  cp /tmp/bm$mib/microbench.json "$out/bm$mib.json"
done
