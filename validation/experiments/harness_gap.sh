#!/usr/bin/env bash
# GPU half of validation/experiments/harness_gap.cu, from the repository root:
#   bash validation/experiments/harness_gap.sh BUNDLE OUT.jsonl
# BUNDLE: a `pksim validate --prepare` bundle (its libraries built on this machine, as
# validation/device_session.sh leaves build/vb). Times the one-shot and two-shot all-reduces
# by registers and TMA at w8 on 4 KiB, 64 KiB and 1 MiB (2048, 32768, 524288 bf16), 4 and 16
# blocks a rank, from C++; compare with the suite's rows of the same cases.
set -u
bundle="${1:?usage: harness_gap.sh BUNDLE OUT.jsonl}"
out="${2:?usage: harness_gap.sh BUNDLE OUT.jsonl}"
nvcc -O2 -std=c++17 -I kernels -gencode=arch=compute_90a,code=sm_90a -o /tmp/harness_gap \
  validation/experiments/harness_gap.cu -ldl || exit 1
libs=$(python3 - "$bundle" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1] + "/cases.json"))
libs = sorted({c["lib"] for c in cases
               if c.get("op") == "all-reduce" and c.get("world") == 8
               and c.get("algorithm") in ("direct", "two-shot")
               and c.get("mechanism") in ("register", "tma")})
print(" ".join(sys.argv[1] + "/" + lib for lib in libs))
PY
)
CUDA_MODULE_LOADING=EAGER timeout 120 /tmp/harness_gap 8 2048,32768,524288 4,16 $libs > "$out"
