"""The tables of docs/VALIDATION.md "runs 39-42" from the committed fused measurements:

* per pass, how far a case's median lies above its fastest call (median and max over the 90
  cases), and how far two passes' medians lie apart (median and max of |ratio - 1|);
* per store-add case of run 41, what the outputs' clear costs in the measured call (the call
  minus the same kernel timed without the clear, ``ms_no_zeroing``) beside the model's
  ``pksim.overlap.output_clear_s`` on h200-virtual-calibrated.

    python -m validation.experiments.fused_timing_stats      # no GPU; prints Markdown
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
PASSES = {
    "run 39, idle": "h200-fused-idle-2026-12-03-run39.jsonl",
    "run 40 pass 1, idle": "h200-fused-idle-2026-12-03-run40-pass1.jsonl",
    "run 40 pass 2, idle": "h200-fused-idle-2026-12-03-run40-pass2.jsonl",
    "run 41, idle": "h200-fused-2026-12-03-run41.jsonl",
    "run 39, back to back": "h200-fused-b2b-2026-12-03-run39.jsonl",
    "run 40, back to back": "h200-fused-b2b-2026-12-03-run40.jsonl",
    "run 31, back to back": "h200-fused-2026-12-03-run31.jsonl",
    "run 33, back to back": "h200-fused-2026-12-03-run33.jsonl",
}
PAIRS = [("run 39, idle", "run 40 pass 1, idle"), ("run 40 pass 1, idle", "run 40 pass 2, idle"),
         ("run 40 pass 1, idle", "run 41, idle"), ("run 39, idle", "run 41, idle"),
         ("run 39, back to back", "run 40, back to back"),
         ("run 31, back to back", "run 33, back to back")]


def timed(name: str) -> dict[str, dict]:
    rows = (json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip())
    return {r["id"]: r for r in rows if "ms" in r}


def pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def spread_tables(runs: dict[str, dict[str, dict]]) -> list[str]:
    lines = ["| pass | median / fastest - 1: median | max |", "|---|---|---|"]
    for name, rows in runs.items():
        r = [row["ms"] / row["ms_min"] - 1 for row in rows.values()]
        lines.append(f"| {name} | {pct(statistics.median(r))} | {pct(max(r))} |")
    lines += ["", "| passes | \\|ratio - 1\\|: median | max |", "|---|---|---|"]
    for a, b in PAIRS:
        ids = runs[a].keys() & runs[b].keys()
        r = [abs(runs[a][i]["ms"] / runs[b][i]["ms"] - 1) for i in ids]
        lines.append(f"| {a} / {b} | {pct(statistics.median(r))} | {pct(max(r))} |")
    return lines


def clear_table(rows: dict[str, dict]) -> list[str]:
    from hwmodels.catalog import load_system
    from pksim.overlap import _Setup, output_clear_s
    from pksim.schedule import Schedule
    system = load_system("h200-virtual-calibrated")
    lines = ["| case | outputs | call - call without clear, us | model, us |", "|---|---|---|---|"]
    for r in rows.values():
        if r.get("overlap") != "intra-sm" or not r.get("ms_no_zeroing"):
            continue
        w, m, n, k = r["world"], r["m"], r["n"], r["k"]
        s = Schedule(op=r["op"], shape=tuple(sorted(dict(m=m, n=n, k=k).items())), world=w,
                     overlap="intra-sm", algorithm="direct", mechanism="tma", comm_sms=16)
        rows_out = m if r["op"] == "gemm-ar" else m // w
        mib = w * rows_out * n * 2 / 2 ** 20
        model = output_clear_s(system, _Setup(system, s).topo, s)
        lines.append(f"| {r['op']} w{w} {m}x{n}x{k} | {mib:g} MiB | "
                     f"{(r['ms'] - r['ms_no_zeroing']) * 1e3:.1f} | {model * 1e6:.1f} |")
    return lines


def main() -> int:
    runs = {name: timed(f) for name, f in PASSES.items()}
    print("\n".join(spread_tables(runs) + [""] + clear_table(runs["run 41, idle"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
