"""The people-facing files of ``pksim validate``: report.md and scatter.png, drawn from the
report dict of ``validation.validate_report.build_report`` (every number comes from it).
The fused GEMM + communication kernels have their own section (``validate_markdown_fused``)
and their own marks on the plot."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from hwmodels.units import format_bytes
from validation.validate_report import (TARGET_MAX, TARGET_MEDIAN, TARGET_REGRET, fmt_abs_pct,
                                        fmt_pct, fmt_time, miss_line)

OP_COLOURS = {"all-gather": "#1f77b4", "reduce-scatter": "#d62728", "all-reduce": "#2ca02c",
              "all-to-all": "#9467bd", "broadcast": "#ff7f0e"}
MECH_MARKERS = {"tma": "o", "register": "s", "copy-engine": "^"}
FUSED_COLOURS = {"gemm-rs": "#8c564b", "ag-gemm": "#e377c2", "gemm-ar": "#17becf"}
OVERLAP_MARKERS = {"none": "X", "intra-sm": "D", "inter-sm": "*"}


def _table(headers: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _met(flag: bool) -> str:
    return "met" if flag else "**missed**"


def _provenance(rep: dict) -> list[str]:
    s, p = rep["summary"], rep["prepare"]
    cal = p.get("calibration", {})
    lines = [f"# pksim validate: suite `{s['suite']}` on {s['device'] or 'an unknown device'}", "",
             f"- predicted on `{s['system']}`"
             + (f" ({p['system_file']})" if p.get("system_file") else "")
             + (f", prepared {p['date']}" if p.get("date") else "")
             + (f" by `{p['command']}`" if p.get("command") else ""),
             f"- measured {s['measured_date'] or '?'} on {s['device'] or '?'} (torch "
             f"{s['torch'] or '?'}, CUDA {s['cuda'] or '?'}): virtual ranks in one launch, CUDA "
             f"events, a collective's time its row's median_s (since run 16 the mean of the medians "
             f"of two halves of its calls), a fused kernel's the median of its calls, each call "
             f"after a 256 MiB write that flushes the L2;"
             f" results `{rep['measured_file']}`"]
    if s.get("copy_GBps"):
        lines.append(f"- device-to-device copy in the same run: {s['copy_GBps']:.0f} GB/s")
    benches = ", ".join(cal.get("benchmarks") or []) or "none recorded"
    fused = rep.get("fused", {}).get("summary", {}).get("cases", 0)
    lines += [f"- **calibration and validation are separate sets**: `{s['system']}` was fitted "
              f"to microbenchmarks of primitives only ({benches}; "
              f"`{cal.get('results') or 'no calibration results recorded'}`). None of the "
              f"{s['cases'] + fused} kernels below is a calibration input: they judge the model, "
              f"they did not tune it."]
    extra = rep.get("rows_not_in_suite") or {}
    if extra:
        lines.append("- measured rows of no case of this suite, left out: " + ", ".join(
            f"{n} {kind}" for kind, n in sorted(extra.items())))
    return lines + [""]


def _summary(s: dict, title: str = "## Summary", groups: str = "(op, size, world)") -> list[str]:
    t = s["targets"]
    lines = [title, ""]
    lines += _table(["", "value", "target", ""], [
        ["median \\|error\\|", fmt_abs_pct(t["median_abs_error"]["value"]),
         f"<= {TARGET_MEDIAN:.0%}", _met(t["median_abs_error"]["met"])],
        ["max \\|error\\|", fmt_abs_pct(t["max_abs_error"]["value"]) +
         (f" ({s['worst_case']})" if s["worst_case"] else ""), f"<= {TARGET_MAX:.0%}",
         _met(t["max_abs_error"]["met"])],
        ["predicted-best vs measured-best, worst group",
         fmt_pct(t["regret"]["value"]) + (f" ({s['worst_ranking_group']})"
                                          if s["worst_ranking_group"] else ""),
         f"<= {TARGET_REGRET:.0%} in every {groups}", _met(t["regret"]["met"])]])
    lines += ["", f"Cases: {s['cases']}; compared (predicted and measured): {s['compared']}; "
              f"not predicted: {s['not_predicted']}; measured: {s['measured_ok']}; failed: "
              f"{s['failed']}; not measured: {s['not_measured']}.",
              f"Error = (predicted - measured) / measured. Mean \\|error\\| "
              f"{fmt_abs_pct(s.get('mean_abs_error'))}, median signed error "
              f"{fmt_pct(s.get('median_error'))}, within 10 %: {fmt_abs_pct(s.get('within_10'))}, "
              f"within 25 %: {fmt_abs_pct(s.get('within_25'))} of the compared cases.",
              f"Ranking: in {s['ranking_hits']} of {s['groups_ranked']} {groups} groups "
              f"the simulator's first choice was the measured fastest; {s['groups_within_5']} "
              f"within 5 %; median regret {fmt_pct(s['median_regret'])}.", ""]
    if s.get("order_effect") is not None:
        e = s["order_effect"]
        lines[-1:] = [f"Order of the run: the SM cases of 64 KiB or less at odd and at even "
                      f"places of the measured file differ by {fmt_abs_pct(abs(e))} (median "
                      f"measured / predicted; the odd ones {'slower' if e > 0 else 'faster'}); "
                      f"runs that timed each case in one piece, until run 15, showed 2-8 %.", ""]
    return lines


def error_by_kernel(rep: dict, kind: str, titles: tuple[str, str], note: list[str],
                    breakdowns) -> list[str]:
    """The error table by (op, ``kind``, mechanism) (only the groups off target when a target
    is missed; ``titles`` = (missed, met)), then one table per (key, name, cell) breakdown."""
    s = rep["summary"]
    missed = not (s["targets"]["median_abs_error"]["met"] and s["targets"]["max_abs_error"]["met"])
    rows = [[k["op"], k[kind], k["mechanism"], k["n"], fmt_pct(k["median_error"]),
             fmt_abs_pct(k["median_abs_error"]), fmt_abs_pct(k["max_abs_error"]), k["over_25"],
             k["bound_resource"], f"{k['worst']}: {fmt_time(k['worst_predicted_s'])} predicted, "
             f"{fmt_time(k['worst_measured_s'])} measured"] for k in rep["kernels"]
            if not missed or k["max_abs_error"] > TARGET_MAX
            or k["median_abs_error"] > TARGET_MEDIAN]
    lines = [titles[0] if missed else titles[1], ""] + note
    lines += _table(["op", kind, "mechanism", "cases", "median error", "median \\|error\\|",
                     "max \\|error\\|", "> 25 %", "bound", "worst case"], rows) if rows else \
        [f"Every (op, {kind}, mechanism) is within the targets."]
    for key, name, cell in breakdowns:
        lines += ["", f"By {name}:", ""]
        lines += _table([name, "cases", "median error", "median \\|error\\|", "max \\|error\\|"], [
            [cell(g), g["n"], fmt_pct(g["median_error"]), fmt_abs_pct(g["median_abs_error"]),
             fmt_abs_pct(g["max_abs_error"])] for g in rep[key]])
    return lines + [""]


def _kernels(rep: dict) -> list[str]:
    return error_by_kernel(
        rep, "algorithm", ("## Where the model misses: by (op, algorithm, mechanism), worst first",
                           "## Error by (op, algorithm, mechanism)"),
        ["Bound: the resource that bound most of the group's predictions.", ""],
        (("by_size", "size", lambda g: format_bytes(g["bytes"])),
         ("by_world", "world", lambda g: g["world"])))


def _ranking(rep: dict) -> list[str]:
    lines = ["## Ranking: the simulator's pick against the measured best", "",
             "Per (op, size, world), among the candidates measured: the pick is the fastest "
             "predicted (ties: fewer blocks, as the search breaks them), the best the fastest "
             "measured (predicted or not); regret = measured time of the pick / measured best "
             "- 1; rank = where the simulator put the measured best (- where it could not "
             "predict it).",
             ""]
    rows = []
    for g in rep["ranking"]:
        if g["status"] != "ranked":
            rows.append([g["op"], format_bytes(g["bytes"]), g["world"],
                         f"{g['measured']}/{g['candidates']}", g["status"], "", "", "", ""])
            continue
        rows.append([g["op"], format_bytes(g["bytes"]), g["world"],
                     f"{g['measured']}/{g['candidates']}",
                     f"{g['pick']} ({fmt_time(g['pick_measured_s'])})",
                     f"{g['best']} ({fmt_time(g['best_measured_s'])})",
                     "yes" if g["hit"] else "no", fmt_pct(g["regret"]),
                     g["best_rank"] if g["best_rank"] else "-"])
    return lines + _table(["op", "size", "world", "measured / candidates",
                           "simulator's pick (measured)",
                           "measured best", "hit", "regret", "rank"], rows) + [""] + misses(rep["ranking"])


def misses(groups: list[dict]) -> list[str]:
    """The groups over the regret target, each with what the model got wrong
    (validate_report.diagnose)."""
    over = [g for g in groups if g.get("diagnosis")]
    if not over:
        return []
    return ["Groups over the regret target, and what the model gets wrong there:", ""] + [
        f"- {miss_line(g)}" for g in over] + [""]


def _exceptions(rep: dict, level: str = "##") -> list[str]:
    rows = rep["cases"]
    lines = []
    why: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["predicted_s"] is None:
            why[r.get("not_predicted") or "no prediction"].append(r["id"])
    if why:
        lines += [f"{level} Not predicted", ""]
        for reason, ids in sorted(why.items()):
            lines.append(f"- not predicted: {reason} ({len(ids)} cases, e.g. {ids[0]})")
        lines.append("")
    bad = [r for r in rows if r["measured"] != "ok"]
    if bad:
        lines += [f"{level} Failed or not measured", ""]
        lines += [f"- {r['id']}: {r['measured']}" + (f": {r['error_text']}" if r.get("error_text")
                                                     else "") for r in bad]
        lines.append("")
    return lines


def _cases(rep: dict) -> list[str]:
    rows = []
    for r in rep["cases"]:
        status = "ok" if r["error"] is not None else (
            f"not predicted: {r.get('not_predicted')}" if r["predicted_s"] is None
            and r["measured"] == "ok" else r["measured"])
        rows.append([f"{r['op']} {r['algorithm']}/{r['mechanism']}",
                     f"w{r['world']} {format_bytes(r['bytes'])} {r['blocks_per_rank']} blocks/rank",
                     fmt_time(r["predicted_s"]), fmt_time(r["measured_s"]), fmt_pct(r["error"]),
                     status])
    return ["## Every case", ""] + _table(
        ["kernel", "schedule", "predicted", "measured", "error", "status"], rows) + [""]


def markdown(rep: dict) -> str:
    from validation.validate_markdown_fused import fused_section
    plot = ["![predicted vs measured](scatter.png)", ""]
    parts = _provenance(rep)
    if rep["summary"]["cases"]:
        parts += (_summary(rep["summary"]) + plot + _kernels(rep) + _ranking(rep)
                  + _exceptions(rep))
        plot = []
    if rep.get("fused"):
        parts += fused_section(rep["fused"], plot)
    if rep["summary"]["cases"]:
        parts += _cases(rep)
    return "\n".join(parts)


def scatter(rep: dict, path: Path) -> None:
    """Predicted (y) against measured (x), log-log, y = x with the 10 % and 25 % bands."""
    import numpy as np
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
