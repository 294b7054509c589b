#!/usr/bin/env bash
# The third device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run34.sh OUTDIR
# The fused suite of `pksim validate` with each group's candidates timed call by call in turn
# (validation/run_fused.py, interleave), twice, to see how far a group's ranking moves
# between two passes of one session and against runs 31 and 33 (timed case by case).
set -u
out="${1:?usage: run34.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$out/device.txt"
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vb \
  > "$out/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s"
for pass in 1 2; do
  timeout 150 python3 -m validation.run_fused --bundle build/vb/fused \
    --out "$out/fused-pass$pass.jsonl" > "$out/fused-pass$pass.log" 2>&1
  echo "fused pass $pass exit $? at $(( $(date +%s) - t0 )) s"
  tail -n 2 "$out/fused-pass$pass.log"
done
