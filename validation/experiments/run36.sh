#!/usr/bin/env bash
# The fifth device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run36.sh OUTDIR
# block_moves with its shared reads (R groups moving the same S sources into their own
# destination: the one-shot all-reduce's and the broadcast's shape in virtual ranks) also at 4
# and 64 KiB alone behind a write on the suite's blocks per group: the small one-shots had no
# primitive of their own shape in the fit.
set -u
out="${1:?usage: run36.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
python3 validation/microbench/run.py --out "$out/mb" --only block_moves --budget-s 200 | tail -n 5
echo "block_moves at $(( $(date +%s) - t0 )) s"
