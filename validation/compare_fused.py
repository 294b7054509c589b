"""Predicted against measured for the fused GEMM + communication kernels.

    python -m validation.compare_fused validation/data/h200-fused-2026-12-02.jsonl \
        [--system h200-virtual-calibrated] [--json]

Re-predicts every timed record of ``validation/run_fused.py`` (kinds ``fused`` and
``none``) with the current simulator on the calibrated virtual system: a fused record as
its schedule (op, shape, world, overlap, algorithm, mechanism, comm blocks), a ``none``
record as the schedule's baseline (``Prediction.baseline_s``: the library GEMMs, then the
collective). Prints predicted / measured per record and its median, min and max per
overlap. None of these kernels is a calibration input.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from hwmodels.catalog import load_system
from hwmodels.errors import PksimError
from pksim.schedule import Schedule
from pksim.simulate import predict


def schedule_of(rec: dict) -> Schedule:
    overlap = rec.get("overlap", "none") if rec["kind"] == "fused" else "none"
    kw = dict(op=rec["op"], shape=(("k", rec["k"]), ("m", rec["m"]), ("n", rec["n"])),
              world=rec["world"], overlap=overlap)
    if overlap == "inter-sm":
        kw["comm_sms"] = rec["comm_blocks"]
    for key in ("algorithm", "mechanism"):
        if rec.get(key):
            kw[key] = rec[key]
    return Schedule(**kw)


def compare(path: Path, system_name: str) -> list[dict]:
    system = load_system(system_name)
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") not in ("fused", "none") or not rec.get("ms"):
            continue
        sched = schedule_of(rec)
        pred = predict(system, sched)
        t = pred.baseline_s if sched.overlap == "none" else pred.time_s
        out.append({"id": rec["id"], "overlap": sched.overlap, "world": rec["world"],
                    "measured_s": rec["ms"] * 1e-3, "predicted_s": t,
                    "ratio": t / (rec["ms"] * 1e-3)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--system", default="h200-virtual-calibrated")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    try:
        rows = compare(ns.results, ns.system)
    except (OSError, PksimError, KeyError, json.JSONDecodeError) as exc:
        print(f"compare_fused: error: {ns.results}: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        json.dump(rows, sys.stdout, indent=1)
        return 0
    print("| overlap | records | median predicted/measured | min | max | median abs error |")
    print("|---|---|---|---|---|---|")
    for overlap in ("none", "intra-sm", "inter-sm"):
        r = [x["ratio"] for x in rows if x["overlap"] == overlap]
        if r:
            err = statistics.median(abs(x - 1) for x in r)
            print(f"| {overlap} | {len(r)} | {statistics.median(r):.2f} | {min(r):.2f} | "
                  f"{max(r):.2f} | {100 * err:.0f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
