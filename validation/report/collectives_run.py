"""Markdown tables from a run of validation/run/collectives.py (virtual ranks):

    python -m validation.report.collectives_run RESULTS.jsonl [--ipc IPC.jsonl] [--memcheck MEMCHECK.txt]

* correctness: per (op, algorithm) x mechanism, cases passed / run, over world sizes, dtypes
  and sizes;
* bandwidth at 1 GiB: for all-gather, reduce-scatter and all-reduce per world size, the best
  configuration and the one the simulator picked, as a fraction of the measured device-to-
  device copy bandwidth for the bytes the collective must move (validation/runtime/reference.py
  ``min_traffic_bytes``);
* predicted (h200-virtual) over measured for every timed case with a prediction.
Every figure printed comes from the files given.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

MECHS = ("tma", "register", "copy-engine")


def load(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def correctness(rows: list[dict]) -> str:
    cells: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in rows:
        if r.get("kind") == "copy_bw" or "op" not in r:
            continue
        c = cells[(r["op"], r["algorithm"])][r["mechanism"]]
        c[0] += bool(r.get("ok"))
        c[1] += 1
    out = ["| op | algorithm | " + " | ".join(MECHS) + " |", "|---|---|" + "---|" * len(MECHS)]
    for (op, alg), by in sorted(cells.items()):
        out.append(f"| {op} | {alg} | " + " | ".join(
            f"{by[m][0]}/{by[m][1]}" if by[m][1] else "-" for m in MECHS) + " |")
    return "\n".join(out)


def copy_rate(rows: list[dict]) -> dict[str, float]:
    return {r["id"]: r["copy_GBps"] for r in rows if r.get("kind") == "copy_bw" and r.get("ok")}


def bandwidth(rows: list[dict]) -> str:
    timed = [r for r in rows if r.get("median_s") and r.get("op") and "1GiB" in r["id"]
             and r["op"] in ("all-gather", "reduce-scatter", "all-reduce") and r.get("ok")]
    out = ["| op | world | best (algorithm/mechanism, blocks per rank) | time | of copy bw | "
           "simulator's pick | time | of copy bw |", "|---|---|---|---|---|---|---|---|"]
    for op in ("all-gather", "reduce-scatter", "all-reduce"):
        for w in (2, 4, 8):
            mine = [r for r in timed if r["op"] == op and r["world"] == w]
            if not mine:
                continue
            best = max(mine, key=lambda r: r.get("copy_efficiency", 0))
            picks = [r for r in mine if r.get("predicted_s")]
            pick = min(picks, key=lambda r: r["predicted_s"]) if picks else None
            cell = (f"{pick['algorithm']}/{pick['mechanism']}, {pick['blocks_per_rank']} | "
                    f"{pick['median_s'] * 1e3:.2f} ms | {pick['copy_efficiency']:.0%}") if pick else "- | - | -"
            out.append(f"| {op} | {w} | {best['algorithm']}/{best['mechanism']}, "
                       f"{best['blocks_per_rank']} | {best['median_s'] * 1e3:.2f} ms | "
                       f"{best['copy_efficiency']:.0%} | {cell} |")
    return "\n".join(out)


def predictions(rows: list[dict]) -> str:
    timed = [r for r in rows if r.get("median_s") and r.get("predicted_s") and not r.get("sweep")]
    groups: dict[str, list[float]] = defaultdict(list)
    for r in timed:
        size = "1 GiB" if "1GiB" in r["id"] else "1 MiB"
        groups[f"{size} {r['mechanism']}"].append(r["predicted_s"] / r["median_s"])
    out = ["| size, mechanism | cases | median predicted/measured | min | max |",
           "|---|---|---|---|---|"]
    for k in sorted(groups):
        v = groups[k]
        out.append(f"| {k} | {len(v)} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--ipc", type=Path)
    ap.add_argument("--memcheck", type=Path)
    ns = ap.parse_args(argv)
    rows = load(ns.results)
    coll = [r for r in rows if r.get("kind") != "copy_bw"]
    print(f"cases: {sum(bool(r.get('ok')) for r in coll)}/{len(coll)} passed; copy bandwidth "
          + ", ".join(f"{k}: {v:.0f} GB/s" for k, v in copy_rate(rows).items()))
    print("\n" + correctness(rows) + "\n\n" + bandwidth(rows) + "\n\n" + predictions(rows))
    if ns.ipc:
        ipc = load(ns.ipc)
        print(f"\nIPC: {sum(bool(r['ok']) for r in ipc)}/{len(ipc)} passed: "
              + ", ".join(r["id"] for r in ipc))
    if ns.memcheck:
        text = ns.memcheck.read_text()
        runs = sum(1 for x in text.splitlines() if x.endswith(": ok") or x.endswith(": FAILED"))
        summary = [x for x in text.splitlines() if "ERROR SUMMARY" in x]
        print(f"\nmemcheck: {runs} runs; {summary[-1].strip('= ') if summary else 'no summary'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
