#!/usr/bin/env bash
# The device call of 2026-12-03 after run 19, from the repository root, carry .whl:
#   bash validation/experiments/run20.sh OUTDIR
# 1. validation/device_session.sh (the suite, each case on a stream of its own since
#    run_collectives' PKC_STREAM change; fused; matrix and microbench as time allows) within
#    330 s; 2. the stream experiment: the suite's SM cases of 4 KiB - 1 MiB at world 4 and 8
#    run again on torch's default stream (PKC_STREAM=default) and on their own stream, one
#    after the other, in one worker each: does the default stream add the ~0.8 us by which
#    run 19's suite rows exceed the same kernels timed from C++ (harness_gap.cu)?
# Few files under OUTDIR: the device refuses to bring back many.
set -u
out="${1:?usage: run20.sh OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
PK_SESSION_S=330 bash validation/device_session.sh "$out" | tail -n 12
export PYTHONPATH=/tmp/site:$PWD CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
python3 - build/vb/cases.json /tmp/stream_cases.json <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))
keep = [c for c in cases if c.get("op") and c.get("mechanism") in ("register", "tma")
        and c.get("world") in (4, 8) and c.get("count", 0) * 2 <= (1 << 20)]
for c in keep:
    c["lib"] = "vb/" + c["lib"] if not c["lib"].startswith("/") else c["lib"]
json.dump(keep, open(sys.argv[2], "w"))
print(len(keep), "cases")
PY
cp /tmp/stream_cases.json build/stream_cases.json
for mode in default own; do
  PKC_STREAM=$mode timeout 100 python3 -m validation.run_collectives --cases build/stream_cases.json \
    --out /tmp/stream-$mode.jsonl --deadline-s 90 --case-timeout 30 2> /tmp/stream-$mode.log
  echo "stream $mode exit $? at $(( $(date +%s) - t0 )) s: $(grep -c '"ok": true' /tmp/stream-$mode.jsonl) ok"
done
cat /tmp/stream-default.jsonl /tmp/stream-own.jsonl | gzip -n -9 > "$out/stream.jsonl.gz"
