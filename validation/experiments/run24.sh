#!/usr/bin/env bash
# The fourth device call of 2026-12-03, session 10, from the repository root, carry .whl:
#   bash validation/experiments/run24.sh OUTDIR
# The session (validation/device_session.sh within 300 s) with the suite's L2 flush written
# as the microbenchmarks write theirs (validation.runtime.flush_l2: the driver's memset
# instead of torch's zero_), so that the collectives are timed as the primitives they are
# judged against were; rows carry "flush".
set -u
out="${1:?usage: run24.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=300 bash validation/device_session.sh "$out" | tail -n 12
