#!/usr/bin/env bash
# The second device call of 2026-12-03, session 10, from the repository root, carry .whl:
#   bash validation/experiments/run22.sh OUTDIR
# Is the two-shot all-reduce's extra time at small sizes its move's or its kernel's?
# 1. block_moves, with block_moves_cross now also at the two-shot's own part sizes (512 B and
#    8 KiB: 4 KiB and 64 KiB on 8 ranks), behind a kernel's write as well as a memset, and by
#    registers with 4 sources a round as the two-shot loads them;
# 2. the suite's libraries (pksim validate --prepare) and harness_gap.sh on them: the
#    generated kernels whole (the ring ones now device-synchronised correctly), with no phase
#    and phase by phase, behind the same two writes.
set -u
out="${1:?usage: run22.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device_env.sh
bash validation/experiments/block_moves.sh "$out" bm
echo "block_moves exit $? at $(( $(date +%s) - t0 )) s"
python3 -c "from pksim.cli.main import main; main()" validate --prepare --force -o build/vb \
  > "$out/prepare.log" 2>&1
echo "prepare exit $? at $(( $(date +%s) - t0 )) s"
bash validation/experiments/harness_gap.sh build/vb "$out/harness_gap.jsonl"
echo "harness_gap exit $? at $(( $(date +%s) - t0 )) s"
