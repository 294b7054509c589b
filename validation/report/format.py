"""The report's formatting, shared by its collectives and fused markdown: percentages, times,
markdown tables, the targets' summary, the error table by kernel, the groups over the regret
target and the cases not predicted or not measured. Every number comes from the report dict
of validation/report/data.py."""
from __future__ import annotations

from collections import defaultdict

from validation.report.data import TARGET_MAX, TARGET_MEDIAN, TARGET_REGRET, miss_line
from validation.report.numbers import fmt_abs_pct, fmt_pct, fmt_time


def table(headers: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def met(flag: bool) -> str:
    return "met" if flag else "**missed**"


def summary(s: dict, title: str = "## Summary", groups: str = "(op, size, world)") -> list[str]:
    t = s["targets"]
    lines = [title, ""]
    lines += table(["", "value", "target", ""], [
        ["median \\|error\\|", fmt_abs_pct(t["median_abs_error"]["value"]),
         f"<= {TARGET_MEDIAN:.0%}", met(t["median_abs_error"]["met"])],
        ["max \\|error\\|", fmt_abs_pct(t["max_abs_error"]["value"]) +
         (f" ({s['worst_case']})" if s["worst_case"] else ""), f"<= {TARGET_MAX:.0%}",
         met(t["max_abs_error"]["met"])],
        ["predicted-best vs measured-best, worst group",
         fmt_pct(t["regret"]["value"]) + (f" ({s['worst_ranking_group']})"
                                          if s["worst_ranking_group"] else ""),
         f"<= {TARGET_REGRET:.0%} in every {groups}", met(t["regret"]["met"])]])
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
                      f"timed in one piece, the odd ones ran 2-8 % slower "
                      f"(docs/decisions/D27.md).", ""]
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
    lines += table(["op", kind, "mechanism", "cases", "median error", "median \\|error\\|",
                     "max \\|error\\|", "> 25 %", "bound", "worst case"], rows) if rows else \
        [f"Every (op, {kind}, mechanism) is within the targets."]
    for key, name, cell in breakdowns:
        lines += ["", f"By {name}:", ""]
        lines += table([name, "cases", "median error", "median \\|error\\|", "max \\|error\\|"], [
            [cell(g), g["n"], fmt_pct(g["median_error"]), fmt_abs_pct(g["median_abs_error"]),
             fmt_abs_pct(g["max_abs_error"])] for g in rep[key]])
    return lines + [""]


def misses(groups: list[dict]) -> list[str]:
    """The groups over the regret target, each with what the model got wrong
    (validation.report.data.diagnose)."""
    over = [g for g in groups if g.get("diagnosis")]
    if not over:
        return []
    return ["Groups over the regret target, and what the model gets wrong there:", ""] + [
        f"- {miss_line(g)}" for g in over] + [""]


def exceptions(rep: dict, level: str = "##") -> list[str]:
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
