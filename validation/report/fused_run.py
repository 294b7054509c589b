"""Markdown tables of a fused runner's results file (validation/run/fused.py): passed / run per
variant, correctness per case, then fused against none per timed shape. Reads rows in seconds
and older ones in milliseconds (validation/measurement.py).

    python -m validation.report.fused_run RESULTS.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from validation.measurement import seconds


def summary(rows: list[dict]) -> str:
    """Markdown: passed / run per variant over every checked case (timed ones included)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("kind") == "fused":
            name = f"{r['op']} {r['overlap']}/{r['mechanism']}"
        elif r.get("kind") == "none":
            name = f"{r['op']} none ({r.get('collective')})"
        else:
            name = {"arg_check": "bad arguments refused", "timeout": "deadline path"}.get(
                r.get("kind"), str(r.get("kind")))
        groups.setdefault(name, []).append(r)
    lines = ["| variant | passed | worlds | largest rel. error | largest abs. error |",
             "|---|---|---|---|---|"]
    for name, rs in groups.items():
        worlds = sorted({r["world"] for r in rs if "world" in r})
        rel = [r["rel_err"] for r in rs if r.get("rel_err") is not None]
        err = [r["max_abs_err"] for r in rs if r.get("max_abs_err") is not None]
        lines.append(f"| {name} | {sum(bool(r.get('ok')) for r in rs)}/{len(rs)} | "
                     f"{', '.join(map(str, worlds)) or '-'} | "
                     f"{f'{max(rel):.2e}' if rel else '-'} | {f'{max(err):.3g}' if err else '-'} |")
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    """Markdown: the summary, correctness per case, then fused against none per timed shape."""
    lines = [summary(rows), "",
             "| variant | world | m x n x k | comm blocks | ok | bad | max abs err | rel err |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("kind") not in ("fused", "none") or r.get("time"):
            continue
        name = (f"{r['op']} {r['overlap']}/{r['mechanism']}" if r["kind"] == "fused"
                else f"{r['op']} none ({r.get('collective')})")
        lines.append(f"| {name} | {r['world']} | {r['m']}x{r['n']}x{r['k']} | "
                     f"{r.get('comm_blocks', '')} | {'yes' if r.get('ok') else 'NO'} | "
                     f"{r.get('bad', '-')} | {r.get('max_abs_err', float('nan')):.3g} | "
                     f"{r.get('rel_err', float('nan')):.2e} |")
    lines += ["", "| op | world | m x n x k | none: pk GEMM + collective | torch.matmul + "
              "collective | variant | fused | speed-up over none | tflops | ok |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    timed = [r for r in rows if r.get("time")]
    nones = {(r["op"], r["world"], r["m"], r["n"], r["k"]): r for r in timed
             if r.get("kind") == "none"}
    for r in timed:
        if r.get("kind") != "fused":
            continue
        key = (r["op"], r["world"], r["m"], r["n"], r["k"])
        base = nones.get(key, {})
        var = f"{r['overlap']}/{r['mechanism']}"
        if r["overlap"] == "inter-sm":
            var += f", {r.get('comm_blocks')} comm/rank" + (", seq" if r.get("tile_order") == 1 else "")
        ms, base_ms, torch_ms = (1e3 * t if t else None for t in (
            seconds(r, "median_s"), seconds(base, "median_s"), seconds(base, "torch_none_s")))
        sp = f"{base_ms / ms:.2f}x" if ms and base_ms else "-"
        lines.append(f"| {r['op']} | {r['world']} | {r['m']}x{r['n']}x{r['k']} | "
                     f"{base_ms or float('nan'):.3f} ms | "
                     f"{torch_ms or float('nan'):.3f} ms | {var} | "
                     f"{ms if ms is None else f'{ms:.3f} ms'} | {sp} | "
                     f"{r.get('tflops', float('nan')):.0f} | {'yes' if r.get('ok') else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a results file of validation/run/fused.py")
    args = ap.parse_args(argv)
    print(report([json.loads(x) for x in args.results.read_text().splitlines() if x.strip()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
