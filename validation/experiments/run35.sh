#!/usr/bin/env bash
# The fourth device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run35.sh OUTDIR
# validation/experiments/fused_order.py: fused cases alone (256 MiB or 4 GiB write before each
# call) and in turn with their group, to see what makes calls in turn slower (run 34).
set -u
out="${1:?usage: run35.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vb \
  > "$out/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s"
timeout 200 python3 -m validation.experiments.fused_order build/vb/fused > "$out/fused_order.jsonl" \
  2> "$out/fused_order.err"
echo "fused_order exit $? at $(( $(date +%s) - t0 )) s"
tail -n 3 "$out/fused_order.err"
