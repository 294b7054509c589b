#!/usr/bin/env bash
# GPU half of validation/experiments/harness_gap.cu, from the repository root:
#   bash validation/experiments/harness_gap.sh BUNDLE OUT.jsonl
# BUNDLE: a `pksim validate --prepare` bundle (its libraries built on this machine, as
# validation/device_session.sh leaves build/vb). Times the one-shot, two-shot and ring
# all-reduces and the direct and ring all-gathers by registers and TMA at w8 on 4 KiB and
# 64 KiB, 4 and 16 blocks a rank, from C++, whole, with no phase and
# phase by phase; compare with the suite's rows of the same cases.
set -u
bundle="${1:?usage: harness_gap.sh BUNDLE OUT.jsonl}"
out="${2:?usage: harness_gap.sh BUNDLE OUT.jsonl}"
nvcc -O2 -std=c++17 -I kernels -I kernels/include -gencode=arch=compute_90a,code=sm_90a -o /tmp/harness_gap \
  validation/experiments/harness_gap.cu -ldl || exit 1
# libs OP: the bundle's libraries of OP at w8 by registers and TMA (the direct, two-shot and
# ring algorithms).
libs() {
  python3 - "$bundle" "$1" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1] + "/cases.json"))
libs = sorted({c["lib"] for c in cases
               if c.get("world") == 8 and c.get("op") == sys.argv[2]
               and c.get("algorithm") in ("direct", "two-shot", "ring")
               and c.get("mechanism") in ("register", "tma")})
print(" ".join(sys.argv[1] + "/" + lib for lib in libs))
PY
}
# Counts as the ABI takes them: an all-reduce's whole buffer, an all-gather's shard (8 x).
CUDA_MODULE_LOADING=EAGER timeout 100 /tmp/harness_gap 8 2048,32768 4,16 $(libs all-reduce) > "$out"
CUDA_MODULE_LOADING=EAGER timeout 60 /tmp/harness_gap 8 256,4096 4,16 $(libs all-gather) >> "$out"
