#!/usr/bin/env bash
# The fourth device call of 2026-12-03, session 14, from the repository root, carry .whl:
#   bash validation/experiments/run42.sh OUTDIR
# block_moves with its 1 MiB points alone behind a write (since run 42): the two-shot's
# crossed parts at 1 MiB (1 MiB / G per group) and the one-shot's / broadcast's shared reads
# at 1 MiB per destination. The fit had these moves at 4-64 KiB and at 8-64 MiB only, and
# the all-reduce at 1 MiB w2 is where the suite's ranking misses (two-shot picked, 7-9 %).
set -u
out="${1:?usage: run42.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
python3 validation/microbench/run.py --out "$out/mb" --only block_moves --budget-s 150 | tail -n 5
echo "block_moves at $(( $(date +%s) - t0 )) s"
rm -rf "$out/mb/bin"
