#!/usr/bin/env bash
# The device call of 2026-12-03, session 10, from the repository root, carry .whl:
#   bash validation/experiments/run21.sh OUTDIR
# 1. validation/device_session.sh within 330 s: the suite (libraries rebuilt: the entry now
#    takes an empty phase range), fused, the microbenchmarks with the new signal_chain (a peer
#    copy and the generated kernels' hand-off between phases, as a primitive) and fused_pull
#    (the inter-SM fused kernels' communication routine alone);
# 2. harness_gap.sh on its bundle: the generated kernels whole, with no phase and phase by
#    phase, and an empty kernel of the same grid (where do the small collectives' extra
#    microseconds go?).
# Few files under OUTDIR: the device refuses to bring back many.
set -u
out="${1:?usage: run21.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
PK_SESSION_S=330 bash validation/device_session.sh "$out" | tail -n 12
bash validation/experiments/harness_gap.sh build/vb "$out/harness_gap.jsonl"
echo "harness_gap exit $? at $(( $(date +%s) - t0 )) s"
