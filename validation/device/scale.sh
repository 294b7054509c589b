#!/usr/bin/env bash
# Issue #31's check at scale, one device call, from the repository root of a GPU machine with
# python3 + torch (simpy from a carried wheel) and, for memcheck, nvcc and compute-sanitizer:
#   validation/device/scale.sh BUNDLE OUTDIR
# BUNDLE: `pksim validate --prepare --suite scale -o BUNDLE` (the suite's cases and libraries)
# with BUNDLE/matrix from `python -m validation.prepare.collectives --scale --out
# BUNDLE/matrix` (the correctness matrix at worlds 16, 32, 72, 128 and memcheck_libs.txt).
# Writes OUTDIR.tgz, holding OUTDIR/:
#   device.txt          GPU (name, UUID), driver, date, torch, nvcc, compute-sanitizer
#   times.txt           every step: exit status, seconds, its limit
#   matrix.jsonl        the matrix, checked against torch (validation/run/collectives.py)
#   memcheck.txt        compute-sanitizer memcheck of one library per algorithm at worlds 2,
#                       8 and 16 (validation/device/sanitize_collectives.cpp)
#   measured.jsonl      the scale suite, timed and checked (judged by `pksim validate --report`)
# In that order (the timings before memcheck); caps (s): matrix PK_MATRIX_S (150), suite
# PK_SUITE_S (240), memcheck PK_MEMCHECK_S (120); a cap of 0 skips the step.
source validation/device/common.sh "$@"
t0=$(date +%s)
: > "$out/times.txt"
step() {  # NAME STATUS START CAP
  echo "$1 exit $2 in $(( $(date +%s) - $3 )) s (limit $4 s)" >> "$out/times.txt"
}
device_info > "$out/device.txt" 2>&1

cap=${PK_MATRIX_S:-150}; s=$(date +%s)
[ "$cap" -gt 0 ] && timeout --signal=KILL "$cap" $py -m validation.run.collectives --cases "$bundle/matrix/cases.json" \
  --out "$out/matrix.jsonl" --deadline-s $(( cap - 10 )) --case-timeout 90 2> "$out/matrix.log"
step matrix $? "$s" "$cap"

cap=${PK_SUITE_S:-240}; s=$(date +%s)
[ "$cap" -gt 0 ] && timeout --signal=KILL "$cap" $py -m validation.run.collectives --cases "$bundle/cases.json" \
  --out "$out/measured.jsonl" --deadline-s $(( cap - 10 )) --case-timeout 90 2> "$out/suite.log"
step suite $? "$s" "$cap"

cap=${PK_MEMCHECK_S:-120}; s=$(date +%s)
if [ "$cap" -gt 0 ] && command -v nvcc >/dev/null && command -v compute-sanitizer >/dev/null; then
  nvcc -O2 -std=c++17 -I kernels -o /tmp/pk_sanitize_collectives \
    validation/device/sanitize_collectives.cpp -ldl >> "$out/device.txt" 2>&1
  libs=$(sed "s|^|$bundle/matrix/|" "$bundle/matrix/memcheck_libs.txt")
  timeout --signal=KILL "$cap" compute-sanitizer --tool memcheck --error-exitcode 9 \
    /tmp/pk_sanitize_collectives $libs > "$out/memcheck.txt" 2>&1
  rc=$?
  echo "memcheck exit $rc" >> "$out/memcheck.txt"
  step memcheck "$rc" "$s" "$cap"
else
  echo "memcheck: no nvcc or compute-sanitizer" >> "$out/times.txt"
fi

coverage matrix "$bundle/matrix/cases.json" "$out/matrix.jsonl" >> "$out/times.txt"
coverage suite "$bundle/cases.json" "$out/measured.jsonl" >> "$out/times.txt"
echo "total $(( $(date +%s) - t0 )) s" >> "$out/times.txt"
cat "$out/times.txt"
grep "ERROR SUMMARY\|failures" "$out/memcheck.txt" 2>/dev/null | tail -2
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
