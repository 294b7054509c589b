#!/usr/bin/env bash
# One device call, from the repository root of a GPU machine that has nvcc and python3 with
# torch, numpy, scipy, click but not simpy (carry .whl/: python3 -m pip download --no-deps
# --only-binary=:all: -d .whl simpy). What runs is chosen by options; everything it writes
# ends in one archive, OUTDIR/session.tgz.
#
#   validation/device/session.sh [options] OUTDIR
#     --steps LIST        comma-separated, of: microbench (the calibration's microbenchmarks),
#                         suite (the validation suite's collectives), fused (its fused kernels),
#                         memcheck (compute-sanitizer on the fused libraries), matrix (the
#                         collectives' correctness matrix, memcheck and IPC run), random (the
#                         fast slice of the random-shape matrix: validation/device/random_matrix.sh
#                         --fast, last, in what is left of the budget)
#                         [default: microbench,suite,fused,memcheck,matrix,random]
#     --suite NAME|FILE   the validation suite to prepare [default]
#     --only NAMES        the microbenchmarks to run (validation/microbench/run.py --only)
#     --bench-args ARGS   arguments for them (run.py --bench-args, e.g. "--payload-mib 256")
#     --mb-cap S          the microbenchmarks' time cap [110]
#     --budget S          the whole call [585]
#
# Calibration inputs: --steps microbench (OUTDIR/session.tgz holds v/mb/microbench.json; refit
# with `pksim calibrate --from-json`). A validation session: the default. With any step but
# microbench the bundle is prepared here first (`pksim validate --prepare`, with --matrix for
# the matrix step, the machine's cores building the libraries), then validation/device/validate.sh
# runs the steps within what is left of the budget.
set -u
steps=microbench,suite,fused,memcheck,matrix,random
suite=default
budget=585
while [ $# -gt 1 ]; do
  case "$1" in
    --steps) steps=$2;;
    --suite) suite=$2;;
    --only) export PK_MB_ONLY=$2;;
    --bench-args) export PK_MB_ARGS=$2;;
    --mb-cap) export PK_MB_CAP=$2;;
    --budget) budget=$2;;
    *) echo "session.sh: unknown option $1" >&2; exit 2;;
  esac
  shift 2
done
out="${1:?usage: validation/device/session.sh [options] OUTDIR}"
t0=$(date +%s)
mkdir -p "$out" build
source validation/device/env.sh
bundle=build/vb
if [ "$steps" = microbench ]; then
  mkdir -p "$bundle" && echo "[]" > "$bundle/cases.json"
else
  matrix=; case ",$steps," in *,matrix,*) matrix=--matrix;; esac
  python3 -c "from pksim_cli.main import main; main()" validate --prepare $matrix --force \
    --suite "$suite" -o "$bundle" > "$out/prepare.log" 2>&1
  echo "prepare exit $? in $(( $(date +%s) - t0 )) s" | tee "$out/prep-time.txt"
  tail -n 3 "$out/prepare.log"
fi
random_s=0
case ",$steps," in *,random,*) random_s=120;; esac
PK_STEPS=$steps PK_TOTAL_S=$(( budget - random_s - ($(date +%s) - t0) )) \
  bash validation/device/validate.sh "$bundle" "$out/v"
if [ "$random_s" -gt 0 ]; then
  left=$(( budget - ($(date +%s) - t0) - 10 ))
  if [ "$left" -ge 90 ]; then
    bash validation/device/random_matrix.sh --fast --budget "$left" "$out/random" > "$out/random.log" 2>&1
    head -n 5 "$out/random/report.md"
  else
    echo "random: SKIPPED, $left s left (needs 90)" | tee "$out/random.log"
  fi
fi
# one archive: validate.sh's (v.tgz) and the preparation's logs
tar czf "$out/session.tgz" -C "$out" $(cd "$out" && ls) && \
  find "$out" -mindepth 1 ! -name session.tgz -delete
