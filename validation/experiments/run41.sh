#!/usr/bin/env bash
# The third device call of 2026-12-03, session 14, from the repository root, carry .whl:
#   bash validation/experiments/run41.sh OUTDIR
# The session alone (validation/device_session.sh within 420 s), fused suite timed from an
# idle GPU: run 40's collectives were disturbed by its nvidia-smi sampling (five 4-64 KiB
# cases with medians of 26-46 us against 5-10 us), so nothing samples the GPU here.
set -u
out="${1:?usage: run41.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=420 bash validation/device_session.sh "$out" | tail -n 12
