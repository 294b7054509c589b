"""report.md of ``pksim validate``, drawn from the report dict of
``validation.report.data.build_report`` (every number comes from it): provenance, the
collectives' summary, error by kernel, ranking and every case; the fused GEMM + communication
kernels have their own section (validation/report/markdown_fused.py)."""
from __future__ import annotations

from hwmodels.units import format_bytes
from validation.report.data import CLIFF_RATIO, CLIFF_VS_NONE
from validation.report.format import error_by_kernel, exceptions, misses, summary, table
from validation.report.numbers import fmt_pct, fmt_time
from validation.report.markdown_fused import fused_section


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
             f"events, a collective's time its row's median_s (the mean of the medians of two "
             f"halves of its calls, docs/decisions/D27.md), a fused kernel's the median of its "
             f"calls, each call after a 256 MiB write that flushes the L2;"
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
    return lines + table(["op", "size", "world", "measured / candidates",
                           "simulator's pick (measured)",
                           "measured best", "hit", "regret", "rank"], rows) + [""] + misses(rep["ranking"])


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
    return ["## Every case", ""] + table(
        ["kernel", "schedule", "predicted", "measured", "error", "status"], rows) + [""]


def _cliffs(rep: dict) -> list[str]:
    c = rep.get("cliffs")
    if c is None:
        return []
    lines = ["## Cliffs (defects)", "",
             f"Cases measured more than {CLIFF_RATIO:g}x their prediction, and fused picks measured "
             f"more than {CLIFF_VS_NONE * 100:.0f} % slower than their group's \"none\", with the "
             "resource the model thought bound them.", ""]
    cal = c.get("calibration")
    if cal and not cal["own"]:
        lines += [f"**Not this GPU's own calibration**: predicted with `{cal['system']}` ("
                  + (f"calibrated on {cal['calibrated_on']}" if cal["calibrated_on"]
                     else "not calibrated")
                  + f"), measured on {cal['measured_on'] or 'an unknown device'}: the ratios "
                  "below judge another GPU's figures; prepare the bundle with a system "
                  "calibrated on this GPU.", ""]
    if c["slow_vs_prediction"]:
        lines += table(["case", "predicted", "measured", "measured / predicted", "bound"],
                       [[x["id"], fmt_time(x["predicted_s"]), fmt_time(x["measured_s"]),
                         f"{x['measured_over_predicted']:.2f}", x["bound_resource"] or "?"]
                        for x in c["slow_vs_prediction"]]) + [""]
    else:
        lines += [f"No case measured more than {CLIFF_RATIO:g}x its prediction.", ""]
    if c["picks_slower_than_none"]:
        lines += table(["group", "pick", "pick measured", "none measured", "slower than none",
                        "bound"],
                       [[x["group"], x["pick"], fmt_time(x["pick_measured_s"]),
                         fmt_time(x["none_measured_s"]), fmt_pct(x["slower_than_none"]),
                         x["bound_resource"] or "?"] for x in c["picks_slower_than_none"]]) + [""]
    else:
        lines += [f"No fused pick measured more than {CLIFF_VS_NONE * 100:.0f} % slower than "
                  "its \"none\".", ""]
    return lines


def markdown(rep: dict) -> str:
    plot = ["![predicted vs measured](scatter.png)", ""]
    parts = _provenance(rep)
    if rep["summary"]["cases"]:
        parts += (summary(rep["summary"]) + plot + _kernels(rep) + _ranking(rep)
                  + exceptions(rep))
        plot = []
    if rep.get("fused"):
        parts += fused_section(rep["fused"], plot)
    parts += _cliffs(rep)
    if rep["summary"]["cases"]:
        parts += _cases(rep)
    return "\n".join(parts)
