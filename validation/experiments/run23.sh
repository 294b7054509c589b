#!/usr/bin/env bash
# The third device call of 2026-12-03, session 10, from the repository root, carry .whl:
#   bash validation/experiments/run23.sh OUTDIR
# The session (validation/device_session.sh within 300 s) with the bf16 two-shot all-reduce
# by registers loading all 8 sources at once (no stack): the suite judges it, the matrix
# checks it at every size.
set -u
out="${1:?usage: run23.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=300 bash validation/device_session.sh "$out" | tail -n 12
