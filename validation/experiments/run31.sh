#!/usr/bin/env bash
# The first device call of 2026-12-03, session 12, from the repository root, carry .whl:
#   bash validation/experiments/run31.sh OUTDIR
# The session (validation/device_session.sh within 420 s) with the register two-shot's pointer
# sets filled in every slot and its peers rotated without a run-time index into the
# kernel's argument (kernels/collectives/all_reduce.cuh, collective.cuh ptr_set::fill), judged
# by the model with the copy engines' event waits (pksim.simulate.ce_waits_s).
set -u
out="${1:?usage: run31.sh OUTDIR}"
mkdir -p "$out"
PK_SESSION_S=420 bash validation/device_session.sh "$out" | tail -n 12
