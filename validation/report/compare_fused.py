"""Predicted against measured for the fused GEMM + communication kernels.

    python -m validation.report.compare_fused validation/data/report/h200-fused-2026-12-04-run47.jsonl \
        [--system h200-virtual-calibrated] [--json]

Re-predicts every timed record of ``validation/run/fused.py`` (kinds ``fused`` and
``none``) with the current simulator on the calibrated virtual system: a fused record as
its schedule (op, shape, world, overlap, algorithm, mechanism, comm blocks), a ``none``
record as the schedule's baseline (``Prediction.baseline_s``: the library GEMMs, then the
collective). Prints, per overlap, predicted / measured (median, min, max) and the median and
max |error|; then the ranking per (op, m x n x k, world): within each overlap and over all
records of the case, the candidate the model ranks first against the one measured fastest,
and the regret (measured time of the model's pick / the measured best - 1). None of these
kernels is a calibration input.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from hwmodels.catalog import load_system
from hwmodels.errors import PksimError
from pksim_core.simulate import predict
from validation.measurement import seconds
from validation.prepare.predict import schedule_of


def compare(path: Path, system_name: str) -> list[dict]:
    system = load_system(system_name)
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        measured = seconds(rec, "median_s")
        if rec.get("kind") not in ("fused", "none") or not measured:
            continue
        sched = schedule_of(rec)
        pred = predict(system, sched)
        t = pred.baseline_s if sched.overlap == "none" else pred.time_s
        out.append({"id": rec["id"], "op": rec["op"], "shape": f"{rec['m']}x{rec['n']}x{rec['k']}",
                    "overlap": sched.overlap, "world": rec["world"],
                    "measured_s": measured, "predicted_s": t, "ratio": t / measured})
    return out


def rankings(rows: list[dict]) -> list[dict]:
    """Per (op, shape, world) and per overlap ("all": every record of the case, 'none'
    included), the model's pick against the measured best."""
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        cases.setdefault((r["op"], r["shape"], r["world"]), []).append(r)
    out = []
    for (op, shape, world), recs in sorted(cases.items()):
        for overlap in ("inter-sm", "intra-sm", "all"):
            cands = recs if overlap == "all" else [r for r in recs if r["overlap"] == overlap]
            if len(cands) < 2 and overlap != "all":
                continue
            best = min(cands, key=lambda r: r["measured_s"])
            pick = min(cands, key=lambda r: r["predicted_s"])
            out.append({"op": op, "shape": shape, "world": world, "overlap": overlap,
                        "candidates": len(cands), "measured_best": best["id"],
                        "predicted_best": pick["id"],
                        "regret": pick["measured_s"] / best["measured_s"] - 1})
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
    ranks = rankings(rows)
    if ns.json:
        json.dump({"records": rows, "rankings": ranks}, sys.stdout, indent=1)
        return 0
    print("| overlap | records | median predicted/measured | min | max | median abs error | "
          "max abs error |")
    print("|---|---|---|---|---|---|---|")
    for overlap in ("none", "intra-sm", "inter-sm"):
        r = [x["ratio"] for x in rows if x["overlap"] == overlap]
        if r:
            err = [abs(x - 1) for x in r]
            print(f"| {overlap} | {len(r)} | {statistics.median(r):.2f} | {min(r):.2f} | "
                  f"{max(r):.2f} | {100 * statistics.median(err):.0f} % | "
                  f"{100 * max(err):.0f} % |")
    print()
    print("| ranking within | cases | model's pick is the measured best | median regret | "
          "max regret |")
    print("|---|---|---|---|---|")
    for overlap in ("inter-sm", "intra-sm", "all"):
        g = [x for x in ranks if x["overlap"] == overlap]
        if g:
            hits = sum(x["predicted_best"] == x["measured_best"] for x in g)
            reg = [x["regret"] for x in g]
            print(f"| {overlap} | {len(g)} | {hits} | {100 * statistics.median(reg):.1f} % | "
                  f"{100 * max(reg):.1f} % |")
    print()
    print("| op | m x n x k | world | within | candidates | measured best | model's pick | "
          "regret |")
    print("|---|---|---|---|---|---|---|---|")
    for x in ranks:
        pick = "same" if x["predicted_best"] == x["measured_best"] else x["predicted_best"]
        print(f"| {x['op']} | {x['shape']} | {x['world']} | {x['overlap']} | "
              f"{x['candidates']} | {x['measured_best']} | {pick} | "
              f"{100 * x['regret']:.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
