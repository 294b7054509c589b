#!/usr/bin/env bash
# GPU half of validation/experiments/interleave.py; writes $OUT/r.tgz (flush.txt: the L2-flush
# write timed alone; il.jsonl: the cases).
set -u
export CUDA_MODULE_LOADING=EAGER PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p $OUT/r
python3 - > $OUT/r/flush.txt 2>&1 <<'PY'
import torch, statistics
f = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for n in (1, 2):
    ts = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f.zero_(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    print("zero_ 256MiB us median", statistics.median(ts), "min", min(ts))
PY
python3 -m validation.run_collectives --cases build/exp-il/cases.json --out $OUT/r/il.jsonl --deadline-s 400 --case-timeout 60 2> $OUT/r/il.log
echo "exit $?" >> $OUT/r/il.log
tail -3 $OUT/r/il.log
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
