#!/usr/bin/env bash
# The sixth device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run37.sh OUTDIR
# fused_order.py again (run 35: calls get slower as the session goes on) with nvidia-smi
# sampling the SM clock, power, temperature and throttle reasons every 100 ms beside it.
set -u
out="${1:?usage: run37.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vb \
  > "$out/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 100 > "$out/smi.csv" 2> "$out/smi.err" &
smi=$!
sleep 1
date -u +%H:%M:%S.%N > "$out/start.txt"
timeout 200 python3 -m validation.experiments.fused_order build/vb/fused > "$out/fused_order.jsonl" \
  2> "$out/fused_order.err"
echo "fused_order exit $? at $(( $(date +%s) - t0 )) s"
date -u +%H:%M:%S.%N > "$out/end.txt"
sleep 1
kill $smi
wc -l "$out/smi.csv"; head -3 "$out/smi.csv"; cat "$out/smi.err" | head -3
