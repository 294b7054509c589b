#!/usr/bin/env bash
# ParallelKernelBench and pksim.torch in one device call, from the repository root:
#   validation/device/pkb_session.sh PKB OUTDIR [BUDGET_S]
# PKB: a ParallelKernelBench checkout (carried; no PKB code is part of pksim) holding the
# solutions `pksim pkb solve --pkb PKB` wrote (PKB/solutions_pksim). Within BUDGET_S seconds
# (530): the device's facts; `pksim pkb check` of PK_PKB_FIRST (every problem but 68 and 77)
# at world 8, five trials (every kernel built first), stopping resumably at its share (all but
# PK_PKB_SECOND_S (150) + PK_PKB_TIME_S (40) + the selftest's 50 s); then a second launch over
# PK_PKB_ALL (1-87) that resumes it (68 and 77, the largest, are left for it) with the deadline
# PK_PKB_LARGE_DEADLINE (100 s) a problem; then `pksim pkb check --time` of PK_PKB_TIME_PROBLEMS
# (1,16; one trial, PK_PKB_WARMUP / PK_PKB_ITERS iterations: 3 / 5) into pkb-time.jsonl; then
# pksim.torch's selftest at worlds PK_TORCH_WORLDS (2,4,8; empty: none, and no 50 s kept for
# it), the fused ops launched per rank too, in what is left (at least 45 s).
# PK_PKB_DRY_RUN=1: on a machine without a GPU, every check with --dry-run (pksim.pkb.dryrun:
# the kernels emulated by gloo), no --time and no selftest: the script's flow end to end.
# Writes OUTDIR/device.txt, pkb.jsonl, pkb.log, pkb-time.jsonl, torch_check.jsonl (+ .notes.json),
# torch_check.log.
set -u
pkb="$1"; out="$2"; budget="${3:-530}"
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
mkdir -p "$out"
source validation/device/env.sh
export PYTHONUNBUFFERED=1 PKSIM_CACHE=${PKSIM_CACHE:-/tmp/pksim-cache}
export PKSIM_TORCH_DEADLINE_S=${PKSIM_TORCH_DEADLINE_S:-30}     # a kernel wait, then CommError
deadline=${PK_PKB_DEADLINE:-45}
large=${PK_PKB_LARGE_DEADLINE:-100}
dry=${PK_PKB_DRY_RUN:-0}
mode=(); [ "$dry" = 1 ] && mode=(--dry-run)
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,uuid --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1
  echo "pksim ${PKSIM_COMMIT:-unknown}"
} > "$out/device.txt" 2>&1

check() {  # PROBLEMS SECONDS DEADLINE [OPTION...]: one launch, stopping resumably inside SECONDS
  local ids=$1 s=$2 d=$3; shift 3
  [ "$s" -ge $(( d + 30 )) ] || { echo "pkb check $ids: SKIPPED, $s s left" | tee -a "$out/pkb.log"; return; }
  timeout --signal=KILL "$s" python3 -m pksim_cli.main pkb check --pkb "$pkb" \
    --results "$out/pkb.jsonl" --problems "$ids" --world 8 --trials "${PK_PKB_TRIALS:-5}" \
    --deadline-s "$d" --budget-s $(( s - d - 20 )) "${mode[@]}" "$@" >> "$out/pkb.log" 2>&1
  echo "pkb check $ids: exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/pkb.log"
}
worlds=${PK_TORCH_WORLDS-2,4,8}
after_time=5; [ -n "$worlds" ] && after_time=50     # what the selftest keeps after --time
time_s=${PK_PKB_TIME_S:-40}                         # kept for --time after the second launch
check "${PK_PKB_FIRST:-1-67,69-76,78-87}" $(( $(left) - ${PK_PKB_SECOND_S:-150} - time_s - after_time )) "$deadline"
check "${PK_PKB_ALL:-1-87}" $(( $(left) - time_s - after_time )) "$large" --no-prebuild
s=$(( $(left) - after_time ))
if [ "$dry" != 1 ] && [ "$s" -ge 20 ]; then
  timeout --signal=KILL "$s" python3 -m pksim_cli.main pkb check --pkb "$pkb" \
    --results "$out/pkb-time.jsonl" --problems "${PK_PKB_TIME_PROBLEMS:-1,16}" --world 8 \
    --trials 1 --deadline-s "$deadline" --time --warmup "${PK_PKB_WARMUP:-3}" \
    --iters "${PK_PKB_ITERS:-5}" --no-prebuild >> "$out/pkb-time.log" 2>&1
  echo "pkb check --time: exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/pkb-time.log"
else
  echo "pkb check --time: SKIPPED (dry run or $s s left)" | tee -a "$out/pkb-time.log"
fi
s=$(( $(left) - 5 ))
if [ "$dry" != 1 ] && [ -n "$worlds" ] && [ "$s" -ge 45 ]; then
  timeout --signal=KILL "$s" python3 -m pksim.torch.selftest --worlds "$worlds" \
    --cases 1 --fused-per-rank --out "$out/torch_check.jsonl" > "$out/torch_check.log" 2>&1
  echo "selftest exit $? at $(( $(date +%s) - t0 )) s" >> "$out/torch_check.log"
else
  echo "selftest: SKIPPED (dry run, no worlds or $s s left)" > "$out/torch_check.log"
fi
tail -n 12 "$out/pkb.log"; tail -n 4 "$out/pkb-time.log"; tail -n 6 "$out/torch_check.log"
