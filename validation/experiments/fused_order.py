"""Experiment: why a fused case timed call by call in turn with other candidates (run 34,
`[fused.timing] interleave`) runs ~7 % slower than timed on its own (run 33).

For the candidates of two groups (ag-gemm and gemm-rs, 8192 x 8192 x 2048 at w4) every case is
set up and checked once (validation/run_fused.py's steps), then timed, 20 calls after 3
warm-ups, CUDA events around the call alone:
  alone        its own calls back to back, each after the usual 256 MiB write (run 33's way);
  alone_4g     the same, each call after a 4 GiB write instead: every call then follows
               gigabytes of other addresses, as in turn, but no other kernel;
  in_turn      the group's candidates call by call in turn, each after the 256 MiB write
               (run 34's way, run_fused._interleaved_timings).
If alone_4g is as slow as in_turn, what the other calls cost is their addresses (translation),
not their kernels (clocks, power). JSON lines on stdout.

    python3 -m validation.experiments.fused_order BUNDLE/fused    # GPU machine, torch only
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from validation import run_fused
from validation.gemm_bench import time_op
from validation.runtime import FLUSH_BYTES

GROUPS = ("ag-gemm", "gemm-rs")
SHAPE = "-w4-8192x8192x2048"


def main(bundle: str) -> int:
    import torch
    from validation.runtime import ensure_eager_loading
    ensure_eager_loading()
    cases = run_fused.load_cases(Path(bundle) / "cases.json")
    libs: dict = {}
    ranks: dict = {}
    small = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    big = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    for op in GROUPS:
        group = [c for c in cases if c["id"].startswith(op + "-") and c["id"].endswith(SHAPE)
                 and c.get("time")]
        runs = []
        for c in group:
            steps = (run_fused.none_case_steps(c, libs, ranks) if c["kind"] == "none"
                     else run_fused.fused_case_steps(c, libs))
            fn, iters, warmup = next(steps)
            runs.append((c["id"], fn, steps))
        rows = {cid: {"id": cid} for cid, _, _ in runs}
        for cid, fn, _ in runs:
            rows[cid]["alone_ms"] = statistics.median(time_op(torch, fn, small, 20))
            rows[cid]["alone_4g_ms"] = statistics.median(time_op(torch, fn, big, 20))
        turn = run_fused._interleaved_timings(torch, [(fn, 20, 3) for _, fn, _ in runs])
        for (cid, _, _), t in zip(runs, turn):
            rows[cid]["in_turn_ms"] = t["ms"]
        for cid, fn, _ in runs:
            rows[cid]["alone_again_ms"] = statistics.median(time_op(torch, fn, small, 20))
        for cid, _, steps in runs:
            steps.close()                  # frees the case's buffers
            print(json.dumps({"bench": "fused_order", **rows[cid]}), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
