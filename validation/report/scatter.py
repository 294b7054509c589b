"""scatter.png of ``pksim validate``: predicted (y) against measured (x), log-log, y = x with
the 10 % and 25 % bands; collectives coloured by op and marked by mechanism, fused kernels by
op and overlap. matplotlib is imported lazily."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from validation.report.data import TARGET_MAX, TARGET_MEDIAN
from validation.report.numbers import fmt_abs_pct

OP_COLOURS = {"all-gather": "#1f77b4", "reduce-scatter": "#d62728", "all-reduce": "#2ca02c",
              "all-to-all": "#9467bd", "broadcast": "#ff7f0e"}
MECH_MARKERS = {"tma": "o", "register": "s", "copy-engine": "^"}
FUSED_COLOURS = {"gemm-rs": "#8c564b", "ag-gemm": "#e377c2", "gemm-ar": "#17becf"}
OVERLAP_MARKERS = {"none": "X", "intra-sm": "D", "inter-sm": "*"}


def scatter(rep: dict, path: Path) -> None:
    """Predicted (y) against measured (x), log-log, y = x with the 10 % and 25 % bands."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pts = [r for r in rep["cases"] if r["error"] is not None]
    fpts = [r for r in rep.get("fused", {}).get("cases", []) if r["error"] is not None]
    fig = Figure(figsize=(7.5, 7), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    values = [v for r in pts + fpts for v in (r["predicted_s"], r["measured_s"])]
    lo, hi = (min(values) / 2, max(values) * 2) if values else (1e-6, 1.0)
    x = np.geomspace(lo, hi, 64)
    ax.fill_between(x, x * (1 - TARGET_MAX), x * (1 + TARGET_MAX), color="#dddddd", lw=0,
                    label="±25 %")
    ax.fill_between(x, x * (1 - TARGET_MEDIAN), x * (1 + TARGET_MEDIAN), color="#bbbbbb", lw=0,
                    label="±10 %")
    ax.plot(x, x, color="black", lw=1, label="predicted = measured")
    for r in pts:
        ax.scatter(r["measured_s"], r["predicted_s"], s=14, alpha=0.75,
                   color=OP_COLOURS.get(r["op"], "#7f7f7f"),
                   marker=MECH_MARKERS.get(r["mechanism"], "x"), linewidths=0)
    for r in fpts:
        ax.scatter(r["measured_s"], r["predicted_s"], s=42, alpha=0.85,
                   color=FUSED_COLOURS.get(r["op"], "#7f7f7f"),
                   marker=OVERLAP_MARKERS.get(r["overlap"], "x"), edgecolors="black",
                   linewidths=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("predicted time (s)")
    s = rep["summary"]
    f = rep.get("fused", {}).get("summary")
    lines = [f"{s['suite']} on {s['device'] or (f or {}).get('device') or '?'}, predicted on "
             f"{s['system']}"]
    if s["compared"]:
        lines.append(f"collectives: {s['compared']} cases, median |error| "
                     f"{fmt_abs_pct(s.get('median_abs_error'))}, max "
                     f"{fmt_abs_pct(s.get('max_abs_error'))}")
    if f and f["compared"]:
        lines.append(f"fused (edged marks): {f['compared']} cases, median |error| "
                     f"{fmt_abs_pct(f.get('median_abs_error'))}, max "
                     f"{fmt_abs_pct(f.get('max_abs_error'))}")
    ax.set_title("\n".join(lines), fontsize=9)
    handles = [Line2D([], [], color=c, marker="o", ls="", label=op)
               for op, c in OP_COLOURS.items() if any(r["op"] == op for r in pts)]
    handles += [Line2D([], [], color="#555555", marker=m, ls="", label=mech)
                for mech, m in MECH_MARKERS.items() if any(r["mechanism"] == mech for r in pts)]
    handles += [Line2D([], [], color=c, marker="D", ls="", markeredgecolor="black", label=op)
                for op, c in FUSED_COLOURS.items() if any(r["op"] == op for r in fpts)]
    handles += [Line2D([], [], color="#555555", marker=m, ls="", markeredgecolor="black",
                       label=f"fused: {ov}")
                for ov, m in OVERLAP_MARKERS.items() if any(r["overlap"] == ov for r in fpts)]
    base, labels = ax.get_legend_handles_labels()
    ax.legend(handles=base + handles, fontsize=8, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
