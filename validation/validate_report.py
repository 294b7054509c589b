"""``pksim validate``, the reporting half: join a prepared bundle's predictions
(``cases.json``) with the GPU's measurements (``measured.jsonl``), and judge the model.

* error of a case = (predicted - measured) / measured, measured = median of the timed calls;
* ranking: for each (op, size, world), the candidate the simulator ranks first (fastest
  predicted among the measured ones, ties broken as the search breaks them: fewer SMs, then
  the label) against the measured-fastest of all measured candidates (also those the
  simulator cannot predict); regret = measured time of the simulator's pick / measured
  best - 1;
* targets: median |error| <= 10 %, max |error| <= 25 %, regret <= 5 % in every group;
* where a target is missed: the cases grouped by (op, algorithm, mechanism), worst first,
  with the resource that bound the prediction.

Writes report.json, report.md and scatter.png (log-log, y = x and the 10 % / 25 % bands).
Reads only files: no simulator, no GPU.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes, format_time
from validation.validate import MEASURED, load_bundle

TARGET_MEDIAN = 0.10
TARGET_MAX = 0.25
TARGET_REGRET = 0.05
OUTPUTS = ("report.json", "report.md", "scatter.png")
_MATCH = ("op", "algorithm", "mechanism", "world", "count", "dtype")


def load_measured(path: Path) -> dict[str, dict]:
    """The last row per case id of a measured.jsonl."""
    if not path.is_file():
        raise ConfigError(f"{path}: not found (run the cases on the GPU first: python -m "
                          f"validation.run_collectives --cases {path.parent}/cases.json "
                          f"--out {path})")
    rows: dict[str, dict] = {}
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows[row["id"]] = row
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path}: line {i} is not a result row (JSON with an id)") from None
    return rows


def join(cases: list[dict], measured: dict[str, dict], where: str) -> list[dict]:
    """One row per kernel case: its prediction, its measurement and their error."""
    out = []
    for c in cases:
        if not c.get("op"):
            continue
        m = measured.get(c["id"])
        if m is not None:
            for key in _MATCH:
                if key in m and m[key] != c[key]:
                    raise ConfigError(f"{where}: measured row {c['id']} has {key} = {m[key]!r}, "
                                      f"the case {c[key]!r} (was the bundle prepared again?)")
        row = {k: c.get(k) for k in ("id", "op", "algorithm", "mechanism", "world", "bytes",
                                      "dtype", "blocks_per_rank", "label", "predicted_s",
                                      "bound_resource", "not_predicted")}
        row["measured_s"] = m.get("median_s") if m and m.get("ok") else None
        row["measured"] = ("ok" if row["measured_s"] else
                           "not measured" if m is None or m.get("skipped") else "failed")
        if m is not None and not m.get("ok"):
            row["error_text"] = m.get("error") or m.get("detail") or "check failed"
        if m is not None and m.get("blocks_per_rank"):
            row["blocks_run"] = m["blocks_per_rank"]
        row["error"] = (row["predicted_s"] - row["measured_s"]) / row["measured_s"] \
            if row["predicted_s"] and row["measured_s"] else None
        out.append(row)
    return out


def _stats(errors: list[float]) -> dict[str, Any]:
    a = sorted(abs(e) for e in errors)
    if not a:
        return {"n": 0}
    return {"n": len(a), "median_abs_error": statistics.median(a),
            "mean_abs_error": statistics.fmean(a), "max_abs_error": a[-1],
            "median_error": statistics.median(errors),
            "within_10": sum(x <= 0.10 for x in a) / len(a),
            "within_25": sum(x <= 0.25 for x in a) / len(a)}


def _pick_key(r: dict) -> tuple:
    return (r["predicted_s"], r["blocks_per_rank"], r["label"] or "")


def ranking(rows: list[dict]) -> list[dict]:
    """Per (op, size, world): the simulator's pick against the measured best."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["bytes"], r["world"])].append(r)
    out = []
    for (op, nbytes, world), members in groups.items():
        g = {"op": op, "bytes": nbytes, "world": world, "candidates": len(members)}
        ok = [r for r in members if r["measured_s"]]
        pred = sorted((r for r in ok if r["predicted_s"]), key=_pick_key)
        g.update(measured=len(ok), predicted=len(pred))
        if not ok or not pred:
            g["status"] = "no measurement" if not ok else "no prediction"
            out.append(g)
            continue
        best = min(ok, key=lambda r: r["measured_s"])
        pick = pred[0]
        g.update(status="ranked", pick=pick["id"], pick_measured_s=pick["measured_s"],
                 pick_predicted_s=pick["predicted_s"], best=best["id"],
                 best_measured_s=best["measured_s"], best_predicted_s=best["predicted_s"],
                 hit=pick["id"] == best["id"], regret=pick["measured_s"] / best["measured_s"] - 1,
                 best_rank=(pred.index(best) + 1) if best in pred else None)
        out.append(g)
    return sorted(out, key=lambda g: (g["op"], g["bytes"], g["world"]))


def by_kernel(rows: list[dict]) -> list[dict]:
    """Error statistics per (op, algorithm, mechanism), worst max |error| first."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["error"] is not None:
            groups[(r["op"], r["algorithm"], r["mechanism"])].append(r)
    out = []
    for (op, alg, mech), members in groups.items():
        worst = max(members, key=lambda r: abs(r["error"]))
        bound = Counter(r["bound_resource"] for r in members).most_common(1)[0][0]
        out.append({"op": op, "algorithm": alg, "mechanism": mech,
                    **_stats([r["error"] for r in members]),
                    "over_25": sum(abs(r["error"]) > TARGET_MAX for r in members),
                    "bound_resource": bound, "worst": worst["id"],
                    "worst_predicted_s": worst["predicted_s"],
                    "worst_measured_s": worst["measured_s"], "worst_error": worst["error"]})
    return sorted(out, key=lambda g: -g["max_abs_error"])


def _by(rows: list[dict], key: str) -> list[dict]:
    groups: dict[Any, list[float]] = defaultdict(list)
    for r in rows:
        if r["error"] is not None:
            groups[r[key]].append(r["error"])
    return [{key: k, **_stats(v)} for k, v in sorted(groups.items())]


def summarise(meta: dict, rows: list[dict], measured: dict[str, dict]) -> dict:
    compared = [r for r in rows if r["error"] is not None]
    st = _stats([r["error"] for r in compared])
    ranks = ranking(rows)
    ranked = [g for g in ranks if g["status"] == "ranked"]
    worst = max(compared, key=lambda r: abs(r["error"]), default=None)
    worst_rank = max(ranked, key=lambda g: g["regret"], default=None)
    targets = {
        "median_abs_error": {"value": st.get("median_abs_error"), "target": TARGET_MEDIAN,
                             "met": bool(compared) and st["median_abs_error"] <= TARGET_MEDIAN},
        "max_abs_error": {"value": st.get("max_abs_error"), "target": TARGET_MAX,
                          "met": bool(compared) and st["max_abs_error"] <= TARGET_MAX},
        "regret": {"value": worst_rank["regret"] if worst_rank else None, "target": TARGET_REGRET,
                   "met": bool(ranked) and all(g["regret"] <= TARGET_REGRET for g in ranked)},
    }
    device = next((m for m in measured.values() if m.get("device")), {})
    copy = next((m for m in measured.values() if m.get("kind") == "copy_bw" and m.get("ok")), {})
    return {
        "suite": meta.get("suite"), "system": meta.get("system"),
        "device": device.get("device"), "measured_date": device.get("date"),
        "torch": device.get("torch"), "cuda": device.get("cuda"),
        "copy_GBps": copy.get("copy_GBps"),
        "cases": len(rows), "compared": len(compared),
        "not_predicted": sum(r["predicted_s"] is None for r in rows),
        "measured_ok": sum(r["measured"] == "ok" for r in rows),
        "failed": sum(r["measured"] == "failed" for r in rows),
        "not_measured": sum(r["measured"] == "not measured" for r in rows),
        **{k: v for k, v in st.items() if k != "n"},
        "worst_case": worst["id"] if worst else None,
        "groups": len(ranks), "groups_ranked": len(ranked),
        "ranking_hits": sum(g["hit"] for g in ranked),
        "median_regret": statistics.median([g["regret"] for g in ranked]) if ranked else None,
        "max_regret": worst_rank["regret"] if worst_rank else None,
        "worst_ranking_group": (f"{worst_rank['op']} {format_bytes(worst_rank['bytes'])} "
                                f"w{worst_rank['world']}") if worst_rank else None,
        "groups_within_5": sum(g["regret"] <= TARGET_REGRET for g in ranked),
        "targets": targets, "targets_met": all(t["met"] for t in targets.values()),
    }


def build_report(bundle: Path, measured_path: Path | None = None) -> dict:
    meta, cases = load_bundle(bundle)
    mpath = measured_path or bundle / MEASURED
    measured = load_measured(mpath)
    rows = join(cases, measured, str(mpath))
    summary = summarise(meta, rows, measured)
    return {"summary": summary, "prepare": meta, "measured_file": str(mpath),
            "kernels": by_kernel(rows), "by_size": _by(rows, "bytes"),
            "by_world": _by(rows, "world"), "ranking": ranking(rows), "cases": rows}


def check_outputs(out: Path, force: bool) -> None:
    """Refuse before any work if a report file exists (and not ``force``)."""
    clash = [n for n in OUTPUTS if (out / n).exists()]
    if clash and not force:
        raise ConfigError(f"{out / clash[0]}: already exists (use --force to overwrite the "
                          f"report, or -o to write it elsewhere)")


def write_report(report: dict, out: Path, force: bool = False) -> list[Path]:
    from validation.validate_markdown import markdown, scatter
    check_outputs(out, force)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "report.md").write_text(markdown(report))
    scatter(report, out / "scatter.png")
    return [out / n for n in OUTPUTS]


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def fmt_abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_time(x: float | None) -> str:
    return "-" if x is None else format_time(x)


__all__ = ["build_report", "write_report", "check_outputs", "summarise", "ranking", "join",
           "by_kernel", "load_measured", "OUTPUTS"]
