"""The Hopper GEMM against torch.matmul, side by side, from one validation/device/gemm.sh run:
per shape torch's TFLOP/s and every variant's as a share of the torch figure of the same
process, the best variant per shape, and the sustained 8192^3 runs with the SM clock and the
power nvidia-smi sampled during each.

    python -m validation.report.gemm RUN.jsonl[.gz] [...] [--smi smi.csv[.gz]]

Prints markdown. Records come from validation/run/gemm.py (one file per process); the clock
samples are matched to a record through its wall-clock interval (t0, t1 and its local form:
the device's offset from UTC is read off the first record that has both). The host's
microseconds per call of each implementation (records of kind "host") close the report.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

from validation.report.format import table

# Samples this long after a sustained run's start are left out: the clocks settle meanwhile.
SETTLE_S = 0.3
SMI_TIME = "%Y/%m/%d %H:%M:%S.%f"
LOCAL_TIME = "%Y/%m/%d %H:%M:%S"


def read_text(path: Path) -> str:
    raw = path.read_bytes()
    return gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()


def read_runs(paths: list[Path]) -> list[list[dict]]:
    """One list of records per file (each file is one process: its own torch figures)."""
    return [[json.loads(line) for line in read_text(p).splitlines() if line.strip()]
            for p in paths]


def utc_offset_s(runs: list[list[dict]]) -> float:
    """Local time minus UTC on the device, from a record's t0 and its local form (whole
    quarter hours)."""
    for recs in runs:
        for r in recs:
            if "t0" in r and "local" in r:
                naive = datetime.strptime(r["local"], LOCAL_TIME)
                utc = datetime.fromtimestamp(int(r["t0"]), timezone.utc).replace(tzinfo=None)
                return round((naive - utc).total_seconds() / 900) * 900
    return 0.0


def read_smi(path: Path, offset_s: float) -> list[tuple[float, float, float]]:
    """(epoch seconds, SM clock MHz, power W) of every sample of nvidia-smi's csv output
    (timestamp, clocks.sm, clocks.mem, power.draw, ...); lines it cannot read are skipped."""
    out = []
    for line in read_text(path).splitlines():
        cells = [c.strip() for c in line.split(",")]
        try:
            naive = datetime.strptime(cells[0], SMI_TIME)
            sm = float(cells[1].split()[0])
            power = float(cells[3].split()[0])
        except (ValueError, IndexError):
            continue
        epoch = (naive - datetime(1970, 1, 1)).total_seconds() - offset_s
        out.append((epoch, sm, power))
    return out


def during(samples: list[tuple[float, float, float]], t0: float, t1: float) -> dict | None:
    """Median SM clock and power of the samples inside [t0 + SETTLE_S, t1]."""
    inside = [s for s in samples if t0 + SETTLE_S <= s[0] <= t1]
    if not inside:
        return None
    return {"samples": len(inside), "sm_mhz": statistics.median(s[1] for s in inside),
            "power_w": statistics.median(s[2] for s in inside)}


def variant_label(r: dict) -> str:
    name = r.get("variant_name", f"v{r['variant']}")
    extra = (f", {r['sms']} SMs" if r.get("sms") else "") + \
        (f", band {r['group_m']}" if r.get("group_m") else "")
    return f"{r['variant']} {name}{extra}"


def shape_table(runs: list[list[dict]]) -> list[str]:
    """Per shape: torch's TFLOP/s in each process, then the best full-grid variant (share of
    its own process's torch figure) and the default's (variant 0, first process that has it)."""
    shapes: dict = {}
    for n, recs in enumerate(runs):
        for r in recs:
            if r.get("kind") == "time" and "tflops" in r:
                shapes.setdefault((r["M"], r["N"], r["K"]), []).append((n, r))
    rows = []
    for (M, N, K), rs in shapes.items():
        torch_of = {n: r for n, r in rs if r["impl"] == "torch.matmul"}
        ours = [(n, r) for n, r in rs if r["impl"] == "pk_gemm" and n in torch_of]
        full = [(n, r) for n, r in ours if not r.get("sms") and not r.get("group_m")]
        if not full:
            continue
        best_n, best = max(full, key=lambda nr: nr[1]["ratio_to_torch"])
        default = next(((n, r) for n, r in full if r["variant"] == 0), None)
        rows.append([f"{M} x {N} x {K}",
                     " / ".join(f"{torch_of[n]['tflops']:.0f}" for n in sorted(torch_of)),
                     f"{default[1]['tflops']:.0f} ({100 * default[1]['ratio_to_torch']:.0f} %)"
                     if default else "-",
                     f"{variant_label(best)}: {best['tflops']:.0f} "
                     f"({100 * best['ratio_to_torch']:.0f} %)"])
    return table(["M x N x K", "torch.matmul (each process)", "ours, variant 0 (% of torch)",
                  "best variant (TFLOP/s, % of its process's torch)"], rows)


def variant_table(runs: list[list[dict]]) -> list[str]:
    """Every timed configuration's share of torch (its own process), one row per shape."""
    labels: list[str] = []
    cells: dict = {}
    for recs in runs:
        for r in recs:
            if r.get("kind") == "time" and r.get("impl") == "pk_gemm":
                lab = variant_label(r)
                if lab not in labels:
                    labels.append(lab)
                cells[((r["M"], r["N"], r["K"]), lab)] = \
                    f"{100 * r['ratio_to_torch']:.0f}" if "ratio_to_torch" in r else "error"
    shapes = list(dict.fromkeys(k[0] for k in cells))
    return table(["configuration"] + [f"{M}x{N}x{K}" for M, N, K in shapes],
                 [[lab] + [cells.get((s, lab), "") for s in shapes] for lab in labels])


def sustained_table(runs: list[list[dict]], samples) -> list[str]:
    rows = []
    for n, recs in enumerate(runs):
        torch_ms = next((r["ms"] for r in recs if r.get("kind") == "sustain"
                         and r["impl"] == "torch.matmul" and "ms" in r), None)
        for r in recs:
            if r.get("kind") != "sustain" or "ms" not in r:
                continue
            clk = during(samples, r["t0"], r["t1"]) if samples else None
            who = "torch.matmul" if r["impl"] == "torch.matmul" else variant_label(r)
            share = "" if r["impl"] == "torch.matmul" or not torch_ms else \
                f"{100 * torch_ms / r['ms']:.0f} %"
            rows.append([n + 1, who, r["calls"], f"{r['tflops']:.0f}", share,
                         f"{clk['sm_mhz']:.0f}" if clk else "-",
                         f"{clk['power_w']:.0f}" if clk else "-", clk["samples"] if clk else 0])
    return table(["process", "implementation", "calls", "TFLOP/s", "% of torch", "SM MHz (median)",
                  "power W (median)", "samples"], rows)


def host_table(runs: list[list[dict]]) -> list[str]:
    """The host's time per call (run/gemm.py's host_cost), one row per implementation and
    process, with the library each process loaded."""
    rows = []
    for n, recs in enumerate(runs):
        lib = next((r.get("library", "") for r in recs if r.get("kind") == "env"), "")
        for r in recs:
            if r.get("kind") != "host":
                continue
            who = "torch.matmul" if r["impl"] == "torch.matmul" else variant_label(r)
            rows.append([n + 1, Path(lib).name if lib else "-", who,
                         f"{r['us_per_call']:.1f}" if "us_per_call" in r else "error"])
    return table(["process", "library", "implementation", "host us per call"], rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--smi", type=Path, default=None)
    args = ap.parse_args(argv)
    runs = read_runs(args.runs)
    samples = read_smi(args.smi, utc_offset_s(runs)) if args.smi else []
    lines = ["## Side by side", ""] + shape_table(runs)
    lines += ["", "## Every configuration (% of torch)", ""]
    lines += variant_table(runs) + ["", "## Sustained 8192^3 (back to back, no flush)", ""]
    lines += sustained_table(runs, samples)
    lines += ["", "## Host time per call", ""] + host_table(runs)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
