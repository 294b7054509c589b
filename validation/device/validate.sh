#!/usr/bin/env bash
# One GPU session of `pksim validate`, from the repository root:
#   validation/device/validate.sh BUNDLE OUTDIR
# BUNDLE: `pksim validate --prepare -o BUNDLE` (the collectives: libraries + cases.json; the
# fused kernels in BUNDLE/fused: libraries, cases.json, memcheck_libs.txt, sanitize_fused),
# with the correctness matrix of validation/prepare/collectives.py in BUNDLE/matrix (cases.json,
# ipc_cases.json, library paths relative to it). Writes OUTDIR.tgz, holding OUTDIR/:
#   times.txt            every step: exit status, seconds, its limit; steps skipped for time
#   summary.txt          per part, cases with a result and those that did not run; memcheck
#   mb/microbench.json   the primitives the model is fitted to (block_moves, launch_latency
#                        incl. the host calls, hbm_copy, signal_chain,
#                        fused_pull, gemm_store_add): calibration inputs;
#   measured.jsonl       the suite's collectives, timed and checked: judged, never fitted;
#   fused-measured.jsonl the suite's fused GEMM + communication kernels (run_fused's rows);
#   fused-memcheck.txt   compute-sanitizer memcheck of one fused library per (op, overlap),
#                        world 2, 200 x 264 x 72 (validation/device/sanitize_fused.cpp);
#   matrix/              correctness matrix, compute-sanitizer memcheck of the collectives,
#                        two-process IPC run (validation/device/collectives.sh).
# Report (no GPU): pksim validate --report BUNDLE --measured OUTDIR/measured.jsonl
#   --measured OUTDIR/fused-measured.jsonl -o REPORT_DIR
#
# Steps: PK_STEPS (comma-separated; default every step: microbench,suite,fused,memcheck,matrix);
# the microbenchmarks run PK_MB_ONLY (run.py --only; default the six above) with PK_MB_ARGS
# (run.py --bench-args) under PK_MB_CAP seconds (110).
#
# Time. The whole script stays within PK_TOTAL_S (540) seconds: each step runs under its own
# cap (timeout -s KILL) and never past what is left of the budget less PK_RESERVE_S (25, for
# the archive); a step with less than its minimum left is skipped, and times.txt says so.
# Caps / minimums (s): microbench 110 / 40, collective suite 180 / 30, fused suite 100 / 20,
# fused memcheck 60 / 20, matrix 190 / 60. Seen on an H200 (2026-12-03): microbench
# 47, collective suite 106, fused suite 50 (each call timed from an idle GPU), fused memcheck
# under 1, matrix 47 (memcheck and IPC included): 257 s.
source validation/device/common.sh "$@"
budget=${PK_TOTAL_S:-540}
reserve=${PK_RESERVE_S:-25}
t0=$(date +%s)
: > "$out/times.txt"
: > "$out/summary.txt"

note() { echo "$*" >> "$out/times.txt"; }
want() {  # STEP: whether PK_STEPS (default: every step) asks for it
  case ",${PK_STEPS:-microbench,suite,fused,memcheck,matrix}," in
    *",$1,"*) return 0;;
    *) note "$1: not asked for (PK_STEPS=$PK_STEPS)"; return 1;;
  esac
}
step() {  # NAME CAP MIN: sets L (the step's limit, s) and S (its start), or skips the step
  name=$1
  S=$(date +%s)
  local left=$(( budget - reserve - (S - t0) ))
  L=$(( left < $2 ? left : $2 ))
  if [ "$L" -lt "$3" ]; then
    note "$1 SKIPPED at $(( S - t0 )) s: $left s left of the $budget s budget, needs $3 s"
    return 1
  fi
}
ended() {  # EXIT_STATUS
  local why=""
  [ "$1" = 137 ] && why=", KILLED at its limit"
  note "$name exit $1 in $(( $(date +%s) - S )) s (limit $L s; $(( $(date +%s) - t0 )) s in)$why"
}

device_info > "$out/device.txt" 2>&1

if want microbench && step microbench "${PK_MB_CAP:-110}" 40; then
  timeout --signal=KILL "$L" $py validation/microbench/run.py --out "$out/mb" \
    --only "${PK_MB_ONLY:-block_moves,launch_latency,hbm_copy,signal_chain,fused_pull,gemm_store_add}" \
    ${PK_MB_ARGS:+--bench-args "$PK_MB_ARGS"} --budget-s $(( L - 10 )) > "$out/mb.log" 2>&1
  ended $?
fi

if ! want suite; then
  :
elif [ "$($py -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$bundle/cases.json")" = 0 ]; then
  note "collective suite: none in this bundle"
elif step "collective suite" 180 30; then
  timeout --signal=KILL "$L" $py -m validation.run.collectives --cases "$bundle/cases.json" \
    --out "$out/measured.jsonl" --deadline-s $(( L - 15 )) --case-timeout 60 2> "$out/suite.log"
  ended $?
  coverage "collective suite" "$bundle/cases.json" "$out/measured.jsonl" >> "$out/summary.txt"
else
  coverage "collective suite" "$bundle/cases.json" "$out/measured.jsonl" >> "$out/summary.txt"
fi

if ! want fused && ! want memcheck; then
  :
elif [ ! -f "$bundle/fused/cases.json" ]; then
  note "fused suite: none in this bundle"
else
  if want fused && step "fused suite" 100 20; then
    timeout --signal=KILL "$L" $py -m validation.run.fused --bundle "$bundle/fused" \
      --out "$out/fused-measured.jsonl" --deadline-s $(( L - 15 )) --case-timeout 40 \
      2> "$out/fused.log"
    ended $?
  fi
  want fused && coverage "fused suite" "$bundle/fused/cases.json" "$out/fused-measured.jsonl" \
    >> "$out/summary.txt"
  rm -f "$out"/*.ids "$out"/*.current

  if ! want memcheck; then
    :
  elif step "fused memcheck" 60 20; then
    san="$bundle/fused/sanitize_fused"
    if [ ! -x "$san" ] && command -v nvcc >/dev/null; then
      nvcc -O2 -std=c++17 -I kernels -o /tmp/pk_sanitize_fused validation/device/sanitize_fused.cpp \
        -ldl >> "$out/device.txt" 2>&1 && san=/tmp/pk_sanitize_fused
    fi
    libs=$(sed "s|^|$bundle/fused/|" "$bundle/fused/memcheck_libs.txt")
    nlibs=$(wc -l < "$bundle/fused/memcheck_libs.txt")
    timeout --signal=KILL "$L" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$san" $libs > "$out/fused-memcheck.txt" 2>&1
    rc=$?
    ended $rc
    echo "memcheck exit $rc" >> "$out/fused-memcheck.txt"
    echo "fused memcheck (exit $rc): $(grep -c ': ok$' "$out/fused-memcheck.txt") of" \
      "$(( 2 * nlibs )) runs ok, $(grep -c ': FAILED$' "$out/fused-memcheck.txt") failed;" \
      "$(grep 'ERROR SUMMARY' "$out/fused-memcheck.txt" | tail -n 1 | sed 's/=* *//')" \
      >> "$out/summary.txt"
  else
    echo "fused memcheck: not run (no time left)" >> "$out/summary.txt"
  fi
fi

if ! want matrix; then
  :
elif [ ! -d "$bundle/matrix" ]; then
  note "matrix: no BUNDLE/matrix (python -m validation.prepare.collectives --out BUNDLE/matrix)"
elif step matrix 190 60; then
  [ -e "$bundle/matrix/lib" ] || ln -s ../lib "$bundle/matrix/lib"   # the matrix shares the libraries
  if command -v nvcc >/dev/null; then
    nvcc -O2 -std=c++17 -I kernels -o "$bundle/matrix/sanitize_collectives" \
      validation/device/sanitize_collectives.cpp -ldl >> "$out/device.txt" 2>&1
  fi
  mdl=$(( L - 100 ))
  [ "$mdl" -lt 20 ] && mdl=20
  PK_MATRIX_DEADLINE=$mdl PK_SANITIZE_TIMEOUT=50 PK_IPC_TIMEOUT=40 \
    timeout --signal=KILL "$L" bash validation/device/collectives.sh "$bundle/matrix" "$out/matrix" \
    > "$out/matrix.log" 2>&1
  ended $?
  # the matrix runs to its own deadline (what is left after memcheck and IPC): say how far
  coverage "matrix" "$bundle/matrix/cases.json" "$out/matrix/collectives.jsonl" >> "$out/summary.txt"
  grep -h "exit\|ERROR SUMMARY" "$out/matrix/memcheck.txt" 2>/dev/null | tail -n 2 \
    | sed 's/^/collectives memcheck: /' >> "$out/summary.txt"
fi

note "total $(( $(date +%s) - t0 )) s of the $budget s budget"
cat "$out/times.txt" "$out/summary.txt"
tail -n 3 "$out/suite.log" "$out/fused.log" 2>/dev/null
# the device tool returns a limited number of files: everything in one archive
tar czf "$out.tgz" --exclude=bin --exclude="*.ids" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
