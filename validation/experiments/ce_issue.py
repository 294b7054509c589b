"""Experiment: where the time of a small copy-engine collective goes. For every copy-engine
case of a validation bundle up to 1 MiB (bf16, the first block count of each), three times:

  host_s     the CPU time of one call (the cudaMemcpyAsync calls, reduction-kernel launches
             and event records/waits of kernels/collectives/entry.cuh, run_copy_engine), the
             GPU idle before it;
  gpu_s      the GPU time alone: the call issued behind a spin of CE_LEAD_CYCLES (about
             2 ms), so every call is queued before the start event fires (time_calls without
             the flush; run on 2026-12-02 with the same spin written out here);
  flush_s    as `pksim validate` times it (validation.runtime.time_calls: a 256 MiB L2 flush
             write, then the call between two events), for comparison with the suite.

    python -m validation.experiments.ce_issue BUNDLE/cases.json OUT.jsonl   # GPU machine

Result of 2026-12-02: validation/data/h200-ce-issue-2026-12-02.jsonl (docs/VALIDATION.md).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from validation import reference
from validation.runtime import CE_LEAD_CYCLES, Collective, Library, VirtualRanks, time_calls

MAX_BYTES = 1 << 20


def pick(cases: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in cases:
        if (c.get("mechanism") != "copy-engine" or c.get("dtype") != "bf16"
                or c.get("bytes", 0) > MAX_BYTES):
            continue
        key = (c["op"], c["algorithm"], c["world"], c["bytes"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def measure(coll: Collective, iters: int = 20) -> dict:
    import torch
    host = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        coll.launch()
        host.append(time.perf_counter() - t0)
        coll.wait()
    gpu = time_calls(coll, iters, flush_bytes=0, lead_cycles=CE_LEAD_CYCLES)
    flush = time_calls(coll, iters)
    return {"host_s": statistics.median(host), "gpu_s": statistics.median(gpu),
            "flush_s": statistics.median(flush), "host_all_s": host, "gpu_all_s": gpu}


def main(argv: list[str]) -> int:
    cases_path, out_path = Path(argv[0]), Path(argv[1])
    base = cases_path.parent
    libs, ranks = {}, {}
    with out_path.open("w") as f:
        for c in pick(json.loads(cases_path.read_text())):
            lib = libs.get(c["lib"]) or libs.setdefault(c["lib"], Library(str(base / c["lib"])))
            w = int(c["world"])
            r = ranks.get(w) or ranks.setdefault(w, VirtualRanks(w))
            coll = Collective(lib, r, int(c["count"]), "bf16", root=int(c.get("root", 0)),
                              blocks_per_rank=int(c.get("blocks_per_rank", 0)))
            try:
                reference.fill_inputs(coll.inputs(), 1)
                coll.run()
                row = {"id": c["id"], "op": c["op"], "algorithm": c["algorithm"], "world": w,
                       "bytes": c["bytes"], "count": c["count"], **measure(coll)}
            finally:
                coll.free()
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(row["id"], " ".join(f"{k} {row[k] * 1e6:.1f}" for k in ("host_s", "gpu_s", "flush_s")),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
