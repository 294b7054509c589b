"""The random matrix's timed slice, judged (validation/prepare/random_timed.py): every case
measured more than 1.5x its prediction and every fused group whose pick (the predicted
fastest) ran more than 10 % slower than its "none", each with the resource the model thought
bound it (validation.report.data.cliffs, the same judgement as ``pksim validate --report``),
and whether the predictions were the measured GPU's own calibration (D81). Also the error of
the predictions (median and max |error|) of each part. Reads only files.
"""
from __future__ import annotations

import statistics
from typing import Any

from validation.report.data import (CLIFF_RATIO, CLIFF_VS_NONE, _stats, cliffs, join,
                                    own_calibration)
from validation.report.markdown import _cliffs
from validation.report.numbers import fmt_abs_pct


def build(coll_cases: list[dict], fused_cases: list[dict], rows: list[dict],
          info: dict | None) -> dict[str, Any]:
    """The slice's summary: counts, error statistics per part, and the cliffs."""
    measured = {r["id"]: r for r in rows}
    crows = join(coll_cases, measured, "timed collectives")
    frows = join(fused_cases, measured, "timed fused", fused=True)
    device = next((r.get("device") for r in rows if r.get("device")), None)
    meta = {"system": (info or {}).get("system"), "calibration": (info or {}).get("calibration")}
    cal = own_calibration(meta, device)
    c = cliffs(crows, frows, cal)
    for x in c["slow_vs_prediction"]:
        # beside the flag: the median of all the case's calls and how often it was timed, so
        # that one disturbed half of D27's two (or a re-timed case) shows as such
        m = measured.get(x["id"]) or {}
        if m.get("times_s"):
            x["all_calls_over_predicted"] = statistics.median(m["times_s"]) / x["predicted_s"]
        x["timed"] = m.get("timed")
    part = {}
    for name, rs in (("collectives", crows), ("fused", frows)):
        errs = [r["error"] for r in rs if r["error"] is not None]
        ratios = [r["measured_s"] / r["predicted_s"] for r in rs if r["error"] is not None]
        part[name] = {"cases": len(rs), "timed": sum(r["measured"] == "ok" for r in rs),
                      "failed": sum(r["measured"] == "failed" for r in rs),
                      "compared": len(errs), "max_measured_over_predicted": max(ratios, default=None),
                      **{k: v for k, v in _stats(errs).items() if k != "n"}}
    return {"system": meta["system"], "device": device, "own_calibration": cal["own"],
            "parts": part, "cliffs": c,
            "slow_vs_prediction": len(c["slow_vs_prediction"]),
            "picks_slower_than_none": len(c["picks_slower_than_none"]),
            "timing": (info or {}).get("timing")}


def markdown(t: dict) -> str:
    lines = ["## Timed slice", ""]
    own = "its own calibration" if t["own_calibration"] else "**not its own calibration**"
    lines.append(f"Predicted with `{t['system']}` ({own}), measured on {t['device'] or 'an unknown device'}.")
    if t.get("timing"):
        lines.append(f"Timing: collectives {t['timing']['collectives']}; fused {t['timing']['fused']}.")
    lines.append("")
    lines += ["| part | cases | timed | failed | median abs. error | max abs. error | max measured / predicted |",
              "|:---|---:|---:|---:|---:|---:|---:|"]
    for name, p in t["parts"].items():
        mx = p["max_measured_over_predicted"]
        lines.append(f"| {name} | {p['cases']} | {p['timed']} | {p['failed']} | "
                     f"{fmt_abs_pct(p.get('median_abs_error'))} | {fmt_abs_pct(p.get('max_abs_error'))} | "
                     f"{'-' if mx is None else f'{mx:.2f}'} |")
    lines += ["", f"**Cliffs: {t['slow_vs_prediction']} cases above {CLIFF_RATIO:g}x their "
              f"prediction, {t['picks_slower_than_none']} fused picks more than "
              f"{CLIFF_VS_NONE * 100:.0f} % slower than their \"none\".**", ""]
    lines += _cliffs({"cliffs": t["cliffs"]})[2:]
    seen = [x for x in t["cliffs"]["slow_vs_prediction"] if x.get("all_calls_over_predicted")]
    if seen:
        lines += ["Beside each flag, the median of all its calls over the prediction and the times "
                  "it was timed (D27: again while its median was over 1.5x its fastest call):", ""]
        lines += [f"- `{x['id']}`: {x['all_calls_over_predicted']:.2f}x over all calls, timed "
                  f"{x.get('timed') or 1}x" for x in seen] + [""]
    return "\n".join(lines) + "\n"
