"""The random-shape correctness matrix's report (validation/prepare/random_matrix.py,
validation/device/random_matrix.sh): cases run, passed and failed per kernel, and every failure
with its seed and shape, so that it can be re-run alone.

    python -m validation.report.random_matrix --cases C.json [--cases ...] --results R.jsonl
        [--results ...] [--memcheck memcheck.txt] [--matrix matrix.json] [--json summary.json]
        [--timed-cases T.json --timed-cases T2.json]

``--timed-cases``: the timed slice's collective and fused case files (validation/prepare/
random_timed.py; their results among ``--results``): their correctness counts with the
matrix's, and the section "Timed slice" judges their times (validation/report/random_timed.py:
every case above 1.5x its prediction, every fused pick more than 10 % slower than its "none").

Prints markdown; a case with no result row is "not run" (the run's deadline left it out, or the
worker died before it: the runners record a crashed case as failed).
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from validation.report import random_timed

SHAPE_KEYS = ("world", "dtype", "count", "splits", "root", "peers", "blocks_per_rank", "m", "n", "k",
              "comm_blocks", "tile_order")


def _lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def kernel_of(case: dict) -> str:
    """The kernel a case runs, as the report groups them."""
    v = case.get("variant")
    if case.get("kind") in ("fused", "none"):
        return " ".join(v) if v else f"{case['op']} {case.get('overlap', 'none')}"
    op, alg, mech, rop, epi, peers = v
    extra = "".join(f" {x}" for x in (rop if rop != "sum" else "", epi if epi != "none" else "",
                                       f"peers {peers}" if peers else "") if x)
    return f"{op} {alg} {mech}{extra}"


def shape_of(case: dict) -> str:
    """The case's shape in one line (what re-running it needs besides its seed): world and
    M, N, K always, the other fields where they differ from the default."""
    parts = []
    for key in SHAPE_KEYS:
        val = case.get(key)
        if val is None or key not in ("world", "m", "n", "k") and val in ("", 0, -1):
            continue
        if key == "splits" and len(val) > 16:
            val = f"{','.join(map(str, val[:16]))},... ({len(val)} sizes)"
        elif key == "splits":
            val = ",".join(map(str, val))
        parts.append(f"{key} {val}")
    return ", ".join(parts)


def build(cases: list[dict], rows: list[dict], memcheck: str | None, matrix: dict | None) -> dict:
    by_id = {r["id"]: r for r in rows}
    kernels: dict[str, dict] = defaultdict(lambda: {"cases": 0, "ok": 0, "failed": 0, "not_run": 0})
    failures, not_run = [], 0
    for c in cases:
        k = kernels[kernel_of(c)]
        k["cases"] += 1
        r = by_id.get(c["id"])
        if r is None:
            k["not_run"] += 1
            not_run += 1
        elif r.get("ok"):
            k["ok"] += 1
        else:
            k["failed"] += 1
            failures.append({"id": c["id"], "kernel": kernel_of(c), "seed": c.get("seed"),
                             "matrix_seed": c.get("matrix_seed"), "shape": shape_of(c),
                             "bad": r.get("bad"), "max_err_over_tol": r.get("max_err_over_tol"),
                             "error": (r.get("error") or "")[:300]})
    device = next((r.get("device") for r in rows if r.get("device")), None)
    date = next((r.get("date") for r in rows if r.get("date")), None)
    out = {"seed": (matrix or {}).get("seed"), "device": device, "date": date,
           "cases": len(cases), "run": len(cases) - not_run,
           "ok": sum(k["ok"] for k in kernels.values()), "failed": len(failures),
           "not_run": not_run, "kernels": dict(sorted(kernels.items())), "failures": failures,
           "requirements": (matrix or {}).get("requirements", {})}
    if memcheck is not None:
        summary = re.findall(r"ERROR SUMMARY: (\d+) error", memcheck)
        out["memcheck"] = {"runs_ok": len(re.findall(r": ok$", memcheck, re.M)),
                           "runs_failed": len(re.findall(r": FAILED$", memcheck, re.M)),
                           "errors": int(summary[-1]) if summary else None}
    return out


def markdown(s: dict) -> str:
    lines = [f"# Random-shape correctness matrix, seed {s['seed']}", "",
             f"Device {s['device'] or 'unknown'}, {s['date'] or 'date unknown'}: "
             f"{s['cases']} cases drawn, {s['run']} run, **{s['ok']} correct, {s['failed']} wrong "
             f"or failed**, {s['not_run']} not run.", ""]
    if "memcheck" in s:
        m = s["memcheck"]
        lines += [f"compute-sanitizer memcheck slice: {m['runs_ok']} runs ok, {m['runs_failed']} "
                  f"failed, {m['errors'] if m['errors'] is not None else 'no'} errors reported.", ""]
    lines += ["| kernel | cases | correct | failed | not run |", "|:---|---:|---:|---:|---:|"]
    for name, k in s["kernels"].items():
        lines.append(f"| {name} | {k['cases']} | {k['ok']} | {k['failed']} | {k['not_run']} |")
    lines += ["", "## Failures", ""]
    if not s["failures"]:
        lines.append("None.")
    for f in s["failures"]:
        detail = f"bad {f['bad']}, max error / tolerance {f['max_err_over_tol']:.3g}" \
            if f.get("bad") is not None and f.get("max_err_over_tol") is not None else ""
        lines.append(f"- `{f['id']}` ({f['kernel']}): seed {f['seed']}, {f['shape']}"
                     f"{'; ' + detail if detail else ''}{'; ' + f['error'] if f['error'] else ''}")
    if s["requirements"]:
        lines += ["", "## What the draws keep (the kernels' documented requirements)", ""]
        lines += [f"- {k}: {v}" for k, v in s["requirements"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", action="append", type=Path, required=True)
    ap.add_argument("--results", action="append", type=Path, default=[])
    ap.add_argument("--memcheck", type=Path)
    ap.add_argument("--matrix", type=Path)
    ap.add_argument("--json", type=Path, help="also write the summary as JSON")
    ap.add_argument("--timed-cases", action="append", type=Path, default=[])
    ns = ap.parse_args(argv)
    cases = [c for p in ns.cases for c in json.loads(p.read_text())]
    timed = [c for p in ns.timed_cases if p.exists() for c in json.loads(p.read_text())]
    rows = [r for p in ns.results if p.exists() for r in _lines(p)]
    memcheck = ns.memcheck.read_text(errors="replace") if ns.memcheck and ns.memcheck.exists() else None
    matrix = json.loads(ns.matrix.read_text()) if ns.matrix and ns.matrix.exists() else None
    s = build(cases + timed, rows, memcheck, matrix)
    text = markdown(s)
    if timed:
        s["timed"] = random_timed.build([c for c in timed if c.get("kind") not in ("fused", "none")],
                                        [c for c in timed if c.get("kind") in ("fused", "none")],
                                        rows, (matrix or {}).get("timed"))
        text += "\n" + random_timed.markdown(s["timed"])
    if ns.json:
        ns.json.write_text(json.dumps(s, indent=1))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
