#!/usr/bin/env bash
# The second device call of 2026-12-03, session 13, from the repository root, carry .whl:
#   bash validation/experiments/run33.sh OUTDIR
# The session (validation/device_session.sh within 420 s), its microbenchmarks now with
# gemm_store_add, for the model with the epilogue's store-adds under the main loops
# (pksim.overlap: epilogue_stall_s, tensor.epilogue_overlap, hbm.tile_reduce_efficiency,
# fitted on run 32); kernels unchanged since run 31.
set -u
out="${1:?usage: run33.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=420 bash validation/device_session.sh "$out" | tail -n 12
