#!/usr/bin/env bash
# ParallelKernelBench and pksim.torch in one device call, from the repository root:
#   validation/device/pkb_session.sh PKB OUTDIR [BUDGET_S]
# PKB: a ParallelKernelBench checkout (carried; no PKB code is part of pksim) holding the
# solutions `pksim pkb solve --pkb PKB` wrote (PKB/solutions_pksim). Within BUDGET_S seconds
# (530): the device's facts; `pksim pkb check` of every problem at world 8, five trials (every
# kernel built first), 68 and 77 (the largest) after the others; the check goes on resumably
# in a second launch if the first stopped at its share; then pksim.torch's selftest at worlds
# PK_TORCH_WORLDS (2,4,8), the fused ops launched per rank too, in what is left (at least 45 s).
# Writes OUTDIR/device.txt, pkb.jsonl, pkb.log, torch_check.jsonl (+ .notes.json), torch_check.log.
set -u
pkb="$1"; out="$2"; budget="${3:-530}"
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
mkdir -p "$out"
source validation/device/env.sh
export PYTHONUNBUFFERED=1 PKSIM_CACHE=${PKSIM_CACHE:-/tmp/pksim-cache}
export PKSIM_TORCH_DEADLINE_S=${PKSIM_TORCH_DEADLINE_S:-30}     # a kernel wait, then CommError
deadline=${PK_PKB_DEADLINE:-45}
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,uuid --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1
  echo "pksim ${PKSIM_COMMIT:-unknown}"
} > "$out/device.txt" 2>&1

check() {  # PROBLEMS SECONDS [OPTION]: one launch of the check, stopping resumably inside SECONDS
  local s=$2
  [ "$s" -ge $(( deadline + 30 )) ] || { echo "pkb check $1: SKIPPED, $s s left" | tee -a "$out/pkb.log"; return; }
  timeout --signal=KILL "$s" python3 -m pksim_cli.main pkb check --pkb "$pkb" \
    --results "$out/pkb.jsonl" --problems "$1" --world 8 --trials 5 --deadline-s "$deadline" \
    --budget-s $(( s - deadline - 20 )) ${3:-} >> "$out/pkb.log" 2>&1
  echo "pkb check $1: exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/pkb.log"
}
check 1-67,69-76,78-87 $(( $(left) - 150 ))
check 1-87 $(( $(left) - 60 )) --no-prebuild
s=$(( $(left) - 5 ))
if [ "$s" -ge 45 ]; then
  timeout --signal=KILL "$s" python3 -m pksim.torch.selftest --worlds "${PK_TORCH_WORLDS:-2,4,8}" \
    --cases 1 --fused-per-rank --out "$out/torch_check.jsonl" > "$out/torch_check.log" 2>&1
  echo "selftest exit $? at $(( $(date +%s) - t0 )) s" >> "$out/torch_check.log"
else
  echo "selftest: SKIPPED, $s s left" > "$out/torch_check.log"
fi
tail -n 12 "$out/pkb.log"; tail -n 6 "$out/torch_check.log"
