#!/usr/bin/env bash
# One device call (issue #43, docs/decisions/D83.md): the crossed sums alone, block_moves
# --cross-parts at parts no suite uses (2.5, 12 and 48 MiB a group, worlds 2, 4, 8), from the
# repository root of a GPU machine with nvcc (carry the simpy wheel, validation/device/env.sh).
#   validation/device/crossed.sh OUTDIR      -> OUTDIR/crossed.tgz (cross/microbench.json)
# Then, here: pksim calibrate --from-json ... --from-json OUTDIR/cross/microbench.json
set -u
out="${1:?usage: validation/device/crossed.sh OUTDIR}"
mkdir -p "$out"
source validation/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/gpu.csv"
python3 validation/microbench/run.py --out "$out/cross" --kernels kernels --only block_moves \
  --bench-args "--cross-parts 2560,12288,49152" --budget-s 240 --timeout-s 200 \
  > "$out/cross.log" 2>&1
echo "crossed exit $?" | tee -a "$out/cross.log"
rm -rf "$out/cross/bin"
tar czf "$out/crossed.tgz" -C "$out" $(cd "$out" && ls) && \
  find "$out" -mindepth 1 ! -name crossed.tgz -delete
