"""The fused section of report.md (``pksim validate``): the fused GEMM + communication kernels'
targets, error by (op, overlap, mechanism), ranking per (op, m x n x k, world) and fused
against none, drawn from ``report["fused"]`` of ``validation.report.data.build_report``."""
from __future__ import annotations

from validation.report.format import error_by_kernel, exceptions, misses, summary, table
from validation.report.numbers import fmt_pct, fmt_time

GROUPS = "(op, m x n x k, world)"


def _variant(r: dict) -> str:
    if r["overlap"] == "none":
        return "none"
    v = f"{r['overlap']}/{r['mechanism']}"
    if r["overlap"] == "inter-sm":
        v += f", {r['comm_blocks']} comm/rank" + (", seq" if r.get("tile_order") == 1 else "")
    return v


def _shape(r: dict) -> str:
    return f"{r['m']}x{r['n']}x{r['k']}"


def _speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _intro(f: dict) -> list[str]:
    s = f["summary"]
    lines = ["## Fused GEMM + communication kernels", "",
             "Each group is one op at one local shape (m x n x k per rank, as ParallelKittens "
             "states them) and world; its candidates are every fused variant (overlap, "
             "mechanism, communication blocks per rank, tile order) and **none**: our GEMM on "
             "each rank one after another, then the generated collective "
             "(`validation/run/fused.py`), predicted as the schedule's unfused baseline. "
             "Targets are judged here apart from the collectives'.", ""]
    lines += summary(s, "### Summary: fused", GROUPS)
    if s.get("vs_none_compared"):
        lines += [f"Fused against none: measured, {s['fused_faster_measured']} of "
                  f"{s['vs_none_compared']} fused cases ran faster than their group's none; "
                  f"predicted, {s['fused_faster_predicted']}; the simulator and the "
                  f"measurement agree on which side of none a case falls in "
                  f"{s['vs_none_agree']} of {s['vs_none_compared']}.", ""]
    return lines


def _kernels(f: dict) -> list[str]:
    return error_by_kernel(
        f, "overlap", ("### Where the model misses (fused): by (op, overlap, mechanism), worst first",
                       "### Error by (op, overlap, mechanism) (fused)"), [],
        (("by_overlap", "overlap", lambda g: g["overlap"]),
         ("by_world", "world", lambda g: g["world"])))


def _ranking(f: dict) -> list[str]:
    lines = ["### Ranking (fused): the simulator's pick against the measured best", "",
             "Per (op, m x n x k, world), among the candidates measured, none included: pick = "
             "fastest predicted, best = fastest measured, regret = measured time of the pick / "
             "measured best - 1, rank = where the simulator put the measured best.", ""]
    rows = []
    for g in f["ranking"]:
        head = [g["op"], _shape(g), g["world"], f"{g['measured']}/{g['candidates']}"]
        if g["status"] != "ranked":
            rows.append(head + [g["status"], "", "", "", ""])
            continue
        rows.append(head + [f"{g['pick']} ({fmt_time(g['pick_measured_s'])})",
                            f"{g['best']} ({fmt_time(g['best_measured_s'])})",
                            "yes" if g["hit"] else "no", fmt_pct(g["regret"]),
                            g["best_rank"] if g["best_rank"] else "-"])
    return lines + table(["op", "m x n x k", "world", "measured / candidates",
                           "simulator's pick (measured)", "measured best", "hit", "regret",
                           "rank"], rows) + [""] + misses(f["ranking"])


def _vs_none(f: dict) -> list[str]:
    lines = ["### Fused against none", "",
             "Speed-up = none's time / the fused kernel's time (> 1: the fused kernel is "
             "faster), measured and predicted; agree: both on the same side of 1.", ""]
    rows = [[v["op"], v["world"], _shape(v), _variant(v), fmt_time(v["none_measured_s"]),
             fmt_time(v["none_predicted_s"]), fmt_time(v["measured_s"]),
             fmt_time(v["predicted_s"]), _speedup(v["measured_speedup"]),
             _speedup(v["predicted_speedup"]),
             "-" if v["agree"] is None else "yes" if v["agree"] else "no"] for v in f["vs_none"]]
    return lines + table(["op", "world", "m x n x k", "variant", "none measured",
                           "none predicted", "fused measured", "fused predicted",
                           "measured speed-up", "predicted speed-up", "agree"], rows) + [""]


def _cases(f: dict) -> list[str]:
    rows = []
    for r in f["cases"]:
        status = "ok" if r["error"] is not None else (
            f"not predicted: {r.get('not_predicted')}" if r["predicted_s"] is None
            and r["measured"] == "ok" else r["measured"])
        rows.append([r["op"], _variant(r), f"w{r['world']} {_shape(r)}",
                     fmt_time(r["predicted_s"]), fmt_time(r["measured_s"]), fmt_pct(r["error"]),
                     status])
    return ["### Every fused case", ""] + table(
        ["op", "variant", "shape", "predicted", "measured", "error", "status"], rows) + [""]


def fused_section(f: dict, plot: list[str]) -> list[str]:
    """The fused part of report.md (``plot``: the scatter line, when no collective part
    placed it already)."""
    return (_intro(f) + plot + _kernels(f) + _ranking(f) + _vs_none(f)
            + exceptions(f, "###") + _cases(f))


__all__ = ["fused_section"]
