#!/usr/bin/env bash
# One call on a GPU machine that has nvcc, python3 with torch, numpy, scipy, click but not
# simpy: install the simpy wheel carried in .whl/ (python3 -m pip download --no-deps
# --only-binary=:all: -d .whl simpy, here), prepare the bundle there (the suite, the fused
# suite and the correctness matrix, built with that machine's cores), then run
# validation/device/validate.sh on it within what is left of a PK_SESSION_S budget (585 s).
#   validation/device/session.sh OUTDIR      (OUTDIR/v.tgz: gpu_validate.sh's archive)
set -u
out="${1:?usage: validation/device/session.sh OUTDIR}"
budget=${PK_SESSION_S:-585}
t0=$(date +%s)
mkdir -p "$out"
source validation/device/env.sh
python3 -c "from pksim.cli.main import main; main()" validate --prepare --matrix --force \
  -o build/vb > "$out/prepare.log" 2>&1
echo "prepare exit $? in $(( $(date +%s) - t0 )) s" | tee "$out/prep-time.txt"
tail -n 3 "$out/prepare.log"
PK_TOTAL_S=$(( budget - ($(date +%s) - t0) )) bash validation/device/validate.sh build/vb "$out/v"
