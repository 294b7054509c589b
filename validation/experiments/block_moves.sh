#!/usr/bin/env bash
# block_moves alone on the device, from the repository root after validation/device_env.sh:
#   bash validation/experiments/block_moves.sh OUTDIR NAME ["BENCH ARGS"]
# (validation/microbench/run.py --only block_moves, its arguments e.g. "--payload-mib 4"):
# results as OUTDIR/NAME.json, the log as OUTDIR/NAME.log; exits with run.py's status.
set -u
out="${1:?usage: block_moves.sh OUTDIR NAME [BENCH_ARGS]}"
name="${2:?usage: block_moves.sh OUTDIR NAME [BENCH_ARGS]}"
args="${3:-}"
python3 validation/microbench/run.py --out "/tmp/$name" --only block_moves ${args:+--bench-args "$args"} \
  --timeout-s 200 --budget-s 200 > "$out/$name.log" 2>&1
rc=$?
cp "/tmp/$name/microbench.json" "$out/$name.json"
exit $rc
