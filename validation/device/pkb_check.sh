#!/usr/bin/env bash
# ParallelKernelBench solutions against PKB's references on the GPU at hand, from the
# repository root (a device call):
#   validation/device/pkb_check.sh PKB SOLUTIONS OUTDIR
# PKB: a ParallelKernelBench checkout (carried; no PKB code is part of pksim); SOLUTIONS: the
# folder `pksim pkb solve` wrote. Runs `pksim pkb check` at world PK_PKB_WORLD (8) for
# PK_PKB_PROBLEMS (all), PK_PKB_TRIALS (5) trials, stopping resumably after PK_PKB_BUDGET
# seconds; OUTDIR/pkb.jsonl holds the results, pkb.log the log. PK_PKB_TIME=1 adds --time with
# PK_PKB_WARMUP / PK_PKB_ITERS iterations.
set -u
pkb="$1"; sol="$2"; out="$3"
mkdir -p "$out"
source validation/device/env.sh
export PYTHONUNBUFFERED=1 PKSIM_CACHE=${PKSIM_CACHE:-/tmp/pksim-cache}
extra=()
[ -n "${PK_PKB_PROBLEMS:-}" ] && extra+=(--problems "$PK_PKB_PROBLEMS")
[ -n "${PK_PKB_BUDGET:-}" ] && extra+=(--budget-s "$PK_PKB_BUDGET")
[ "${PK_PKB_TIME:-0}" = 1 ] && extra+=(--time --warmup "${PK_PKB_WARMUP:-5}" --iters "${PK_PKB_ITERS:-10}")
timeout --signal=KILL "${PK_PKB_TIMEOUT:-400}" python3 -m pksim_cli.main pkb check --pkb "$pkb" \
  --solutions "$sol" --results "$out/pkb.jsonl" --world "${PK_PKB_WORLD:-8}" \
  --trials "${PK_PKB_TRIALS:-5}" --deadline-s "${PK_PKB_DEADLINE:-60}" "${extra[@]}" > "$out/pkb.log" 2>&1
echo "pkb check exit $?" >> "$out/pkb.log"
tail -n 40 "$out/pkb.log"
