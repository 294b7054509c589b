#!/usr/bin/env bash
# The fourth device call of 2026-12-04, session 15, from the repository root, carry .whl:
#   bash validation/experiments/run46.sh OUTDIR
# block_moves' 256 MiB and 1 GiB sweeps again with its one-destination moves compiled knowing it
# (run 45: 2-9 % faster than with a run-time count, back to back at 64 MiB too), so that the fit
# does not mix the two codes (runs 17 and 19 measured them with the run-time count).
set -u
out="${1:?usage: run46.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/device.txt"
python3 validation/microbench/run.py --out "$out/bm256" --only block_moves --bench-args "--payload-mib 256" \
  --timeout-s 100 --budget-s 100 --bin-dir /tmp/bmbin | tail -n 3
echo "256 MiB at $(( $(date +%s) - t0 )) s"
python3 validation/microbench/run.py --out "$out/bm1024" --only block_moves --bench-args "--payload-mib 1024" \
  --timeout-s 200 --budget-s 200 --bin-dir /tmp/bmbin | tail -n 3
echo "1 GiB at $(( $(date +%s) - t0 )) s"
tar -C "$out" -czf "$out/r46.tgz" device.txt bm256/microbench.json bm1024/microbench.json && rm -rf "$out/bm256" "$out/bm1024" "$out/device.txt"
