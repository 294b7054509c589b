"""Measured against predicted for the communication kernels of issue 30 (a run of
``validation/suites/comm.toml``: validation.prepare.comm, then validation/run/collectives.py).

    python -m validation.report.comm RESULTS.jsonl[.gz] [--md OUT.md] [--json OUT.json]

The targets are the validation issue's: the median |error| of the timed cases at most 10 %,
and in every group (one op with its compile-time options, one world, one size: its
algorithms x mechanisms x blocks per rank) the model's pick within 5 % of the measured best.
Error = predicted / measured - 1.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

from hwmodels.units import format_bytes, format_time

MEDIAN_TARGET = 0.10
RANKING_TARGET = 0.05


def load_rows(path: Path) -> list[dict]:
    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def summarise(rows: list[dict]) -> dict:
    """Checks passed, the error statistics of the timed cases (all, and per op family), and
    the ranking of every group."""
    cases = [r for r in rows if r.get("kind") != "copy_bw"]
    failed = [r["id"] for r in cases if not r.get("ok")]
    timed = [r for r in cases if r.get("time") and r.get("ok") and r.get("median_s")
             and r.get("predicted_s")]
    for r in timed:
        r["error"] = r["predicted_s"] / r["median_s"] - 1
    errors = [abs(r["error"]) for r in timed]
    families: dict[str, list[float]] = defaultdict(list)
    for r in timed:
        families[r["family"]].append(abs(r["error"]))
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in timed:
        groups[r["group"]].append(r)
    ranking = []
    for name, members in sorted(groups.items()):
        pick = min(members, key=lambda r: (r["predicted_s"], r["id"]))
        best = min(members, key=lambda r: r["median_s"])
        regret = pick["median_s"] / best["median_s"] - 1
        ranking.append({"group": name, "candidates": len(members), "pick": pick["id"],
                        "best": best["id"], "regret": regret,
                        "within": regret <= RANKING_TARGET})
    return {
        "cases": len(cases), "checked_ok": len(cases) - len(failed), "failed": failed,
        "timed": len(timed),
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "families": {f: {"timed": len(v), "median_abs_error": statistics.median(v),
                         "max_abs_error": max(v)} for f, v in sorted(families.items())},
        "groups": len(ranking), "groups_within": sum(g["within"] for g in ranking),
        "ranking": ranking,
        "meets_median": bool(errors) and statistics.median(errors) <= MEDIAN_TARGET,
    }


def markdown(summary: dict, rows: list[dict]) -> str:
    """The per-group table: the measured best, the model's pick and its error."""
    by_id = {r["id"]: r for r in rows}
    s = summary
    lines = [f"Checked against torch: {s['checked_ok']}/{s['cases']} correct. "
             f"Timed: {s['timed']} cases, median |error| "
             f"{100 * (s['median_abs_error'] or 0):.1f} % (max {100 * (s['max_abs_error'] or 0):.1f} %); "
             f"the model's pick within 5 % of the measured best in {s['groups_within']}/{s['groups']} "
             f"groups.", "",
             "| group | candidates | measured best | its prediction | model's pick (measured) | regret |",
             "|---|---|---|---|---|---|"]
    for g in s["ranking"]:
        best, pick = by_id[g["best"]], by_id[g["pick"]]
        lines.append(f"| {g['group']} | {g['candidates']} | {_short(best)} {format_time(best['median_s'])} | "
                     f"{format_time(best['predicted_s'])} ({100 * best['error']:+.0f} %) | "
                     f"{_short(pick)} ({format_time(pick['median_s'])}) | {100 * g['regret']:.1f} % |")
    lines += ["", "| op family | timed | median \\|error\\| | max \\|error\\| |", "|---|---|---|---|"]
    for fam, f in s["families"].items():
        lines.append(f"| {fam} | {f['timed']} | {100 * f['median_abs_error']:.1f} % | "
                     f"{100 * f['max_abs_error']:.1f} % |")
    return "\n".join(lines) + "\n"


def _short(r: dict) -> str:
    return f"{r['algorithm']}/{r['mechanism']}/b{r['blocks_per_rank']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args(argv)
    rows = load_rows(ns.results)
    summary = summarise(rows)
    text = markdown(summary, rows)
    if ns.md:
        ns.md.write_text(text)
    if ns.json:
        ns.json.write_text(json.dumps(summary, indent=1))
    print(text)
    if summary["failed"]:
        print(f"failed: {', '.join(summary['failed'][:20])}")
    print(f"sizes: {', '.join(sorted({format_bytes(r.get('schedule_bytes', 0)) for r in rows if r.get('time')}))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
