#!/usr/bin/env bash
# GPU half of validation/experiments/parity.py: prepare the default suite's bundle on the GPU
# machine (simpy from the carried .whl/), then time its 4 KiB SM cases under each variant.
#   bash validation/experiments/parity.sh [--second]   ($OUT/parity.jsonl, $OUT/parity.log; with
#   --second the variants of its run 2 and no suite)
set -u
source validation/device_env.sh
export PYTHONUNBUFFERED=1
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vp \
  > "$OUT/prepare.log" 2>&1
echo "prepare exit $?"
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv > "$OUT/device.txt"
python3 -m validation.experiments.parity --cases build/vp/cases.json --out "$OUT/parity.jsonl" \
  "$@" 2>&1 | tee "$OUT/parity.log"
[ "${1:-}" = "--second" ] && exit 0
# then the whole suite with every case from an empty allocator cache (PKC_FRESH_POOL=1)
PKC_FRESH_POOL=1 timeout 200 python3 -m validation.run_collectives --cases build/vp/cases.json \
  --out "$OUT/suite-fresh.jsonl" --case-timeout 60 --deadline-s 190 > "$OUT/suite-fresh.log" 2>&1
echo "suite exit $? $(grep -c median_s "$OUT/suite-fresh.jsonl") timed"
