#!/usr/bin/env bash
# The fourth device call of 2026-12-03, session 11, from the repository root, carry .whl:
#   bash validation/experiments/run28.sh OUTDIR
# The session (validation/device_session.sh within 420 s) with the ring all-gather and ring
# all-reduce no longer signalling after their last phase (nobody in the launch waits for it),
# and block_moves (its microbenchmark step) with the moves at 1 and 4 MiB also behind a read
# of the 256 MiB instead of a write: what the write's dirty lines cost a cold move.
set -u
out="${1:?usage: run28.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=420 bash validation/device_session.sh "$out" | tail -n 12
