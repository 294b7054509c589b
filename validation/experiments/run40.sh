#!/usr/bin/env bash
# The second device call of 2026-12-03, session 14 (run 39 again: its archive did not come back, the device tool returns 8 files at most), from the repository root, carry .whl:
#   bash validation/experiments/run40.sh OUTDIR
# The session (validation/device_session.sh within 400 s) with the fused suite timed from an
# idle GPU ([fused.timing] idle = 4: before each call the host sleeps 4 x the previous call),
# then the fused suite twice more on the same bundle: back to back (idle 0, as runs 2-33) and
# idle again, with nvidia-smi sampling the SM clock, power and throttle reasons every 200 ms
# through the whole call (OUTDIR/smi.csv; OUTDIR/marks.txt: when each part started).
set -u
out="${1:?usage: run40.sh OUTDIR}"
mkdir -p "$out"
t0=$(date +%s)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 200 > "$out/smi.csv" 2> "$out/smi.err" &
smi=$!
mark() { echo "$(date -u +%H:%M:%S) $*" >> "$out/marks.txt"; }
mark "session"
PK_SESSION_S=400 bash validation/device_session.sh "$out" | tail -n 14
source validation/device_env.sh
export PYTHONUNBUFFERED=1
# the same bundle, its cases without "idle" (back to back), libraries shared
b=build/vb/fused
b0=build/vb/fused-b2b
mkdir -p "$b0"
for f in "$b"/*; do [ "$(basename "$f")" = cases.json ] || ln -sfn "$PWD/$f" "$b0/"; done
python3 - "$b/cases.json" "$b0/cases.json" <<'EOF'
import json, sys
cases = json.load(open(sys.argv[1]))
for c in cases:
    c.pop("idle", None)
json.dump(cases, open(sys.argv[2], "w"))
EOF
left=$(( 585 - ($(date +%s) - t0) ))
mark "fused back to back (left ${left} s)"
if [ "$left" -gt 60 ]; then
  timeout --signal=KILL $(( left / 2 - 10 )) python3 -m validation.run_fused --bundle "$b0" \
    --out "$out/fused-b2b.jsonl" --deadline-s $(( left / 2 - 25 )) --case-timeout 40 \
    2> "$out/fused-b2b.log"
  echo "fused back to back exit $? at $(( $(date +%s) - t0 )) s"
fi
left=$(( 585 - ($(date +%s) - t0) ))
mark "fused idle again (left ${left} s)"
if [ "$left" -gt 40 ]; then
  timeout --signal=KILL $(( left - 15 )) python3 -m validation.run_fused --bundle "$b" \
    --out "$out/fused-idle2.jsonl" --deadline-s $(( left - 30 )) --case-timeout 40 \
    2> "$out/fused-idle2.log"
  echo "fused idle again exit $? at $(( $(date +%s) - t0 )) s"
fi
mark "end"
kill $smi
wc -l "$out"/fused-*.jsonl "$out/smi.csv"
gzip -n -9 "$out/smi.csv"
# one file back: everything in one archive
rm -f "$out"/*.ids
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
