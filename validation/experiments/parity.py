"""Experiment: does a case's place in the run order change its time?

In runs 11-15 of 2026-12-03 the collectives of 4-64 KiB that the worker ran at odd places
of the suite were 2-8 % slower (median, measured over predicted) than those at even places.
This runs the 4 KiB SM cases of a prepared bundle in the worker's way
(validation.run_collectives.run_case, one process) under several harness variants and
writes one row per timed case:

    python3 -m validation.experiments.parity --cases DIR/cases.json --out OUT.jsonl

variants: ``plain`` (as the suite), ``shift`` (the first case run once more before the
rest, so every case moves to the other parity), ``empty_cache`` (torch.cuda.empty_cache()
before each case), ``twice`` (each case timed twice in a row; both rows kept).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

VARIANTS = ("plain", "shift", "empty_cache", "twice")
# run 2 (after the first result: the time of the same case alternates from one timing to the
# next, whatever the allocator cache): ``fresh_flush`` takes the flush buffer from the
# allocator for each timing (the harness until then), ``kept_flush`` keeps one
# (runtime.flush_buffer), ``halves`` keeps one and times each case in two halves of the calls
# (runtime.time_in_halves, the harness since). The others time a case in one piece after a
# flush buffer of its own, as the harness did until run 15.
VARIANTS2 = ("fresh_flush", "kept_flush", "halves")


def parity_effect(rows: list[dict]) -> float:
    """Median of measured / predicted at odd places over the same at even places, minus 1."""
    odd = [r["median_s"] / r["predicted_s"] for r in rows if r["place"] % 2]
    even = [r["median_s"] / r["predicted_s"] for r in rows if not r["place"] % 2]
    return statistics.median(odd) / statistics.median(even) - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--second", action="store_true", help="the variants of run 2")
    args = ap.parse_args(argv)
    import torch

    from validation import run_collectives
    from validation.run_collectives import load_cases, run_case
    from validation.runtime import Collective, ensure_eager_loading
    ensure_eager_loading()
    seen: dict = {}

    class Recorded(Collective):      # the buffers' addresses of the case just run
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen.update(inp=list(self.inb.ptrs), out=list(self.outb.ptrs),
                        flags=list(self.flagb.ptrs), err=int(self.err.data_ptr()))
    run_collectives.Collective = Recorded
    cases = [c for c in load_cases(args.cases)
             if c.get("bytes") == args.bytes and c.get("mechanism") in ("tma", "register")
             and c.get("time")]
    libs: dict = {}
    ranks: dict = {}
    copy_bw: dict = {}
    from validation import runtime
    kept_flush, in_halves = runtime.flush_buffer, runtime.time_in_halves

    def fresh_flush(device, nbytes):
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        seen["flush"] = int(t.data_ptr())
        return t

    def kept(device, nbytes):
        t = kept_flush(device, nbytes)
        seen["flush"] = int(t.data_ptr())
        return t

    def one_piece(coll, iters, warmup=2, lead_cycles=0):
        times = runtime.time_calls(coll, iters, warmup, lead_cycles=lead_cycles)
        return times, statistics.median(times)
    with args.out.open("w") as out:
        for variant in (VARIANTS2 if args.second else VARIANTS):
            runtime.flush_buffer = kept if variant in ("kept_flush", "halves") else fresh_flush
            runtime.time_in_halves = in_halves if variant == "halves" else one_piece
            order = ([cases[0]] if variant == "shift" else []) + cases
            place = 0
            rows = []
            for k, case in enumerate(order):
                for rep in range(2 if variant == "twice" else 1):
                    if variant == "empty_cache":
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                    res = run_case(case, libs, ranks, copy_bw)
                    row = {"variant": variant, "place": place, "rep": rep, "id": case["id"],
                           "median_s": res.get("median_s"), "predicted_s": case["predicted_s"],
                           "ok": res.get("ok"), **seen}
                    place += 1
                    if variant == "shift" and k == 0:
                        continue
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
            good = [r for r in rows if r["ok"] and r["median_s"]]
            print(f"{variant}: {len(good)} cases, odd places over even: "
                  f"{100 * parity_effect(good):+.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
