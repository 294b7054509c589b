#!/usr/bin/env bash
# The random-shape correctness matrix in one device call, from the repository root of a GPU
# machine with nvcc and python3 + torch (carry the simpy wheel in .whl/: validation/device/env.sh):
#
#   validation/device/random_matrix.sh [--seed S] [--cases N] [--fast] [--timed] [--budget S] OUTDIR
#
# Prepares the bundle here (python -m validation.prepare.random_matrix: every kernel built on
# this machine's cores, the cases drawn from the seed), runs the collectives and the fused cases
# (validation/run/collectives.py, validation/run/fused.py: one worker process, restarted after
# a crash or a hang, the running case recorded as failed), then compute-sanitizer memcheck on a
# slice (every fused library at three ragged shapes, world 3, 5 and 7), and writes the report
# (python -m validation.report.random_matrix). Everything ends in OUTDIR/random-matrix.tgz;
# report.md and summary.json are also left beside it. The whole call stays within --budget
# seconds (540); cases the deadline leaves out are reported as not run.
# --timed adds the timed slice (validation/prepare/random_timed.py: random shapes timed as the
# default suite times, predicted with this GPU's own calibration, named by nvidia-smi), run
# after the memcheck slice; the report's "Timed slice" lists every cliff.
set -u
seed=38
cases=
fast=
timed=
budget=540
while [ $# -gt 1 ]; do
  case "$1" in
    --seed) seed=$2; shift 2;;
    --cases) cases="--cases $2"; shift 2;;
    --fast) fast=--fast; shift;;
    --timed) timed=1; shift;;
    --budget) budget=$2; shift 2;;
    *) echo "random_matrix.sh: unknown option $1" >&2; exit 2;;
  esac
done
out="${1:?usage: validation/device/random_matrix.sh [--seed S] [--cases N] [--fast] [--timed] [--budget S] OUTDIR}"
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
mkdir -p "$out/rm" build
source validation/device/env.sh
export PYTHONUNBUFFERED=1
bundle=build/rm
{
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,clocks.max.sm --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -1
  git rev-parse HEAD 2>/dev/null
} > "$out/rm/device.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
timed_args=()
reserve=0
if [ -n "$timed" ]; then timed_args=(--timed "$gpu"); reserve=160; fi
python3 -m validation.prepare.random_matrix --out "$bundle" --seed "$seed" $cases $fast \
  ${timed_args[@]+"${timed_args[@]}"} > "$out/rm/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
tail -n 3 "$out/rm/prepare.log"
cp "$bundle/matrix.json" "$out/rm/" 2>/dev/null
# the collectives and the fused cases share what is left, less the memcheck slice and the report
rest=$(( $(left) - 75 - reserve ))
coll_s=$(( rest * 45 / 100 ))
timeout --signal=KILL $(( coll_s + 20 )) python3 -m validation.run.collectives \
  --cases "$bundle/coll/cases.json" --out "$out/rm/collectives.jsonl" --deadline-s "$coll_s" \
  --case-timeout 30 2> "$out/rm/collectives.log"
echo "collectives exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
fused_s=$(( $(left) - 70 - reserve ))
timeout --signal=KILL $(( fused_s + 20 )) python3 -m validation.run.fused --bundle "$bundle/fused" \
  --out "$out/rm/fused.jsonl" --deadline-s "$fused_s" --case-timeout 30 2> "$out/rm/fused.log"
echo "fused exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
rm -f "$out"/rm/*.ids "$out"/rm/*.current
nvcc -O2 -std=c++17 -I kernels -o /tmp/pk_sanitize_fused validation/device/sanitize_fused.cpp -ldl \
  >> "$out/rm/device.txt" 2>&1
libs=$(sed "s|^|$bundle/fused/|" "$bundle/fused/memcheck_libs.txt")
mc_s=$(( $(left) - 25 - reserve ))
[ "$mc_s" -ge 30 ] || mc_s=30
timeout --signal=KILL "$mc_s" compute-sanitizer --tool memcheck --error-exitcode 9 \
  /tmp/pk_sanitize_fused --shape 3,1003,264,72 --shape 5,341,136,200 --shape 7,707,520,392 $libs \
  > "$out/rm/memcheck.txt" 2>&1
echo "memcheck exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
timed_cases=()
if [ -n "$timed" ]; then
  tl=$(( $(left) - 25 ))
  tc_s=$(( tl * 30 / 100 ))
  timeout --signal=KILL $(( tc_s + 20 )) python3 -m validation.run.collectives \
    --cases "$bundle/coll/timed.json" --out "$out/rm/timed-collectives.jsonl" --deadline-s "$tc_s" \
    --case-timeout 30 2> "$out/rm/timed-collectives.log"
  echo "timed collectives exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
  tf_s=$(( $(left) - 45 ))
  timeout --signal=KILL $(( tf_s + 20 )) python3 -m validation.run.fused --bundle "$bundle/timed" \
    --out "$out/rm/timed-fused.jsonl" --deadline-s "$tf_s" --case-timeout 30 2> "$out/rm/timed-fused.log"
  echo "timed fused exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
  rm -f "$out"/rm/*.ids "$out"/rm/*.current
  cp "$bundle/coll/timed.json" "$out/rm/timed-collective-cases.json"
  cp "$bundle/timed/cases.json" "$out/rm/timed-fused-cases.json"
  timed_cases=(--timed-cases "$bundle/coll/timed.json" --timed-cases "$bundle/timed/cases.json"
               --results "$out/rm/timed-collectives.jsonl" --results "$out/rm/timed-fused.jsonl")
fi
python3 -m validation.report.random_matrix --cases "$bundle/coll/cases.json" --cases "$bundle/fused/cases.json" \
  --results "$out/rm/collectives.jsonl" --results "$out/rm/fused.jsonl" --memcheck "$out/rm/memcheck.txt" \
  --matrix "$bundle/matrix.json" --json "$out/rm/summary.json" ${timed_cases[@]+"${timed_cases[@]}"} \
  > "$out/rm/report.md" 2> "$out/rm/report.log"
echo "report exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/rm/times.txt"
cp "$out/rm/report.md" "$out/rm/summary.json" "$out/" 2>/dev/null
tar czf "$out/random-matrix.tgz" -C "$out" rm && rm -rf "$out/rm"
head -n 40 "$out/report.md"
[ -z "$timed" ] || sed -n '/^## Timed slice/,$p' "$out/report.md" | head -n 60
