#!/usr/bin/env bash
# The second device call of 2026-12-03, session 14, from the repository root, carry .whl:
#   bash validation/experiments/run40.sh OUTDIR
# Run 39 again (validation/experiments/run39.sh: the session with the fused suite timed from
# an idle GPU, the fused suite back to back and from idle again, nvidia-smi sampled), then
# everything in one archive, OUTDIR.tgz: run 39's files did not come back, the device tool
# returns 8 files at most.
set -u
out="${1:?usage: run40.sh OUTDIR}"
bash validation/experiments/run39.sh "$out"
rm -f "$out"/*.ids
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
