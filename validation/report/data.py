"""``pksim validate``, the reporting half (the data: join and statistics): join a prepared bundle's predictions
(``cases.json``, ``fused/cases.json``) with the GPU's measurements (``measured.jsonl``,
``fused-measured.jsonl``, or the files given), and judge the model, separately for the
collectives and for the fused GEMM + communication kernels.

* error of a case = (predicted - measured) / measured, measured = validation/run/collectives.py's
  median_s (the mean of the medians of two halves of the calls: docs/decisions/D27.md) or
  validation/run/fused.py's median;
* ranking: for each group (collectives: op, size, world; fused: op, m x n x k, world, whose
  candidates include "none", the unfused baseline), the candidate the simulator ranks first
  (fastest predicted among the measured ones, ties broken as the search breaks them: fewer
  SMs, then the label) against the measured-fastest of all measured candidates (also those
  the simulator cannot predict); regret = measured time of the simulator's pick / measured
  best - 1;
* targets, per part: median |error| <= 10 %, max |error| <= 25 %, regret <= 5 % in every group;
* where a target is missed: the cases grouped by (op, algorithm, mechanism) (fused: op,
  overlap, mechanism), worst first, with the resource that bound the prediction;
* fused against none: per fused case, the measured speed-up over its group's "none" (none's
  time / the fused time) beside the predicted one;
* cliffs (defects, issue #38): every case measured more than ``CLIFF_RATIO`` times its
  prediction, and every fused group whose pick ran slower than its "none" by more than
  ``CLIFF_VS_NONE``, each with the resource the model thought bound it.

Measurement rows are matched to cases by id (a row whose fields differ from its case's is an
error: the bundle was prepared again); rows of no case (run_fused's correctness-only, argument
and deadline cases, say) are counted and left out. Writes report.json, report.md and
scatter.png (validation/report/write.py: log-log, y = x and the 10 % / 25 % bands, fused
points marked). Reads only files: no simulator, no GPU.
"""
from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes
from pksim_core.vocabulary import renamed
from validation.layout import FUSED_DIR, FUSED_MEASURED, MEASURED, load_bundle
from validation.measurement import Measurement
from validation.report.numbers import fmt_pct

TARGET_MEDIAN = 0.10
TARGET_MAX = 0.25
TARGET_REGRET = 0.05
CLIFF_RATIO = 1.5            # measured / predicted above this: a cliff
CLIFF_VS_NONE = 0.10         # a fused pick this much slower than its "none": a cliff
OUTPUTS = ("report.json", "report.md", "scatter.png")
_MATCH = ("op", "algorithm", "mechanism", "world", "count", "dtype")
_FIELDS = ("id", "op", "algorithm", "mechanism", "world", "bytes", "dtype", "blocks_per_rank",
           "label", "predicted_s", "bound_resource", "not_predicted")
_FUSED_MATCH = ("kind", "op", "overlap", "algorithm", "mechanism", "world", "m", "n", "k",
                "comm_blocks", "tile_order")
_FUSED_FIELDS = ("id", "kind", "op", "overlap", "algorithm", "mechanism", "world", "m", "n", "k",
                 "comm_blocks", "tile_order", "label", "predicted_s", "predicted_baseline_s",
                 "bound_resource", "not_predicted")
GROUP = ("op", "bytes", "world")
FUSED_GROUP = ("op", "m", "n", "k", "world")
KERNEL = ("op", "algorithm", "mechanism")
FUSED_KERNEL = ("op", "overlap", "mechanism")


def read_text(path: Path) -> str:
    """A result file's text; gzip-compressed when its name ends in .gz (the suite's results
    are kept that way in validation/data: the device copies the working tree, 64 MiB at
    most)."""
    if path.suffix != ".gz":
        return path.read_text()
    try:
        return gzip.decompress(path.read_bytes()).decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a gzip-compressed text file ({exc})") from None


def load_measured(path: Path) -> dict[str, dict]:
    """The last row per case id of a measured.jsonl (run_collectives or run_fused), or of
    a measured.jsonl.gz."""
    if not path.is_file():
        raise ConfigError(f"{path}: not found (run the cases on the GPU first: python -m "
                          f"validation.run.collectives --cases {path.parent}/cases.json "
                          f"--out {path})")
    rows: dict[str, dict] = {}
    for i, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows[row["id"]] = row
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path}: line {i} is not a result row (JSON with an id)") from None
    return rows


def load_fused_cases(bundle: Path) -> list[dict]:
    """The fused cases of a bundle (``fused/cases.json``), or none."""
    path = Path(bundle) / FUSED_DIR / "cases.json"
    if not path.is_file():
        return []
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def measured_paths(bundle: Path, given: list[Path] | tuple[Path, ...] | None) -> list[Path]:
    """The files to read: those given, else the bundle's measured.jsonl and
    fused-measured.jsonl that exist (at least one)."""
    if given:
        return list(given)
    found = [Path(bundle) / n for n in (MEASURED, FUSED_MEASURED) if (Path(bundle) / n).is_file()]
    if not found:
        load_measured(Path(bundle) / MEASURED)      # raises, saying how to measure
    return found


def _measured_s(m: dict | None) -> float | None:
    """The median time of a row that passed (seconds; older fused rows: ms)."""
    return Measurement.from_row(m).measured_s if m else None


def join(cases: list[dict], measured: dict[str, dict], where: str,
         fused: bool = False) -> list[dict]:
    """One row per kernel case: its prediction, its measurement and their error."""
    match, fields = (_FUSED_MATCH, _FUSED_FIELDS) if fused else (_MATCH, _FIELDS)
    out = []
    for c in cases:
        if not c.get("op"):
            continue
        m = measured.get(c["id"])
        if m is not None:
            for key in match:
                if key in m and key in c and m[key] != c[key]:
                    raise ConfigError(f"{where}: measured row {c['id']} has {key} = {m[key]!r}, "
                                      f"the case {c[key]!r} (was the bundle prepared again?)")
        row = {k: c.get(k) for k in fields}
        if fused:
            row["overlap"] = c.get("overlap", "none")
            row["mechanism"] = c.get("mechanism") or "-"
            row["algorithm"] = c.get("algorithm") or "-"
            row["blocks_per_rank"] = c.get("comm_blocks", 0)
            if c["kind"] == "none":
                row["label"] = f"none ({c.get('collective')})"
        row["measured_s"] = _measured_s(m)
        row["measured"] = ("ok" if row["measured_s"] else
                           "not measured" if m is None or m.get("skipped") else
                           "not timed" if m.get("ok") else "failed")
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
    return (r["predicted_s"], r["blocks_per_rank"], r.get("tile_order", -1), r["label"] or "",
            r["id"])


def diagnose(g: dict) -> str:
    """Why a ranked group misses the regret target, in the model's terms: which of the two
    (pick, best) the model got wrong, by how much, and the resource that bound its
    prediction. The pick runs ``regret`` behind the best, but was predicted ahead: its error
    is below the best's by at least that much. The one with the larger error in its own
    direction (the pick predicted fast, the best predicted slow) is named first."""
    pe, be = g["pick_error"], g.get("best_error")
    best = ("the best has no prediction" if be is None else
            f"the best {be * 100:+.1f} % ({g['best_bound'] or '?'}-bound)")
    pick_wrong = be is None or -pe >= be
    which, bound = ("pick", g["pick_bound"]) if pick_wrong else ("best", g["best_bound"])
    return (f"the pick is predicted {pe * 100:+.1f} % ({g['pick_bound'] or '?'}-bound), "
            f"{best}: mostly the {which}'s {bound or '?'} "
            f"({'too fast' if pick_wrong else 'too slow'} in the model)")


def miss_line(g: dict) -> str:
    """A group over the regret target in one line: its name, regret and diagnosis."""
    return f"{group_name(g)}: regret {fmt_pct(g['regret'])}; {g['diagnosis']}"


def ranking(rows: list[dict], fields: tuple[str, ...] = GROUP) -> list[dict]:
    """Per group (op, size, world; fused: op, m, n, k, world): the simulator's pick against
    the measured best."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[f] for f in fields)].append(r)
    out = []
    for key, members in groups.items():
        g = dict(zip(fields, key)) | {"candidates": len(members)}
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
                 best_rank=(pred.index(best) + 1) if best in pred else None,
                 pick_error=pick["error"], pick_bound=pick.get("bound_resource"),
                 best_error=best.get("error"), best_bound=best.get("bound_resource"))
        if g["regret"] > TARGET_REGRET:
            g["diagnosis"] = diagnose(g)
        out.append(g)
    return sorted(out, key=lambda g: tuple(g[f] for f in fields))


def by_kernel(rows: list[dict], fields: tuple[str, ...] = KERNEL) -> list[dict]:
    """Error statistics per (op, algorithm, mechanism) (or ``fields``), worst max |error|
    first."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["error"] is not None:
            groups[tuple(r[f] for f in fields)].append(r)
    out = []
    for key, members in groups.items():
        worst = max(members, key=lambda r: abs(r["error"]))
        bound = Counter(r["bound_resource"] for r in members).most_common(1)[0][0]
        out.append({**dict(zip(fields, key)),
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


def group_name(g: dict) -> str:
    """'all-reduce 4KiB w8' or 'gemm-rs 8192x8192x2048 w8'."""
    size = format_bytes(g["bytes"]) if "bytes" in g else f"{g['m']}x{g['n']}x{g['k']}"
    return f"{g['op']} {size} w{g['world']}"


def vs_none(rows: list[dict]) -> list[dict]:
    """Per fused case with a "none" in its group: measured speed-up over none (none's time /
    the fused time; > 1: fusion pays) beside the predicted one, and whether they agree on
    which side of 1 the case falls."""
    nones = {(r["op"], r["m"], r["n"], r["k"], r["world"]): r for r in rows
             if r["overlap"] == "none"}
    out = []
    for r in rows:
        base = nones.get((r["op"], r["m"], r["n"], r["k"], r["world"]))
        if r["overlap"] == "none" or base is None:
            continue
        meas = base["measured_s"] / r["measured_s"] if base["measured_s"] and \
            r["measured_s"] else None
        pred = base["predicted_s"] / r["predicted_s"] if base["predicted_s"] and \
            r["predicted_s"] else None
        out.append({"id": r["id"], "op": r["op"], "m": r["m"], "n": r["n"], "k": r["k"],
                    "world": r["world"], "overlap": r["overlap"], "mechanism": r["mechanism"],
                    "comm_blocks": r["comm_blocks"], "tile_order": r["tile_order"],
                    "none_measured_s": base["measured_s"], "none_predicted_s": base["predicted_s"],
                    "measured_s": r["measured_s"], "predicted_s": r["predicted_s"],
                    "measured_speedup": meas, "predicted_speedup": pred,
                    "agree": None if meas is None or pred is None else (meas > 1) == (pred > 1)})
    return out


def own_calibration(meta: dict, device: str | None) -> dict:
    """Whether the predictions are the measured GPU's own: the bundle's system was calibrated
    (``calibrated.device``, written by pksim calibrate) on a device of the measured name.
    Issue #38 judges cliffs only against that GPU's own calibration; with another's (an
    H200-calibrated bundle measured on an H100) or none, the report says so."""
    cal = (meta.get("calibration") or {}).get("calibrated") or {}
    on = cal.get("device")
    return {"system": meta.get("system"), "calibrated_on": on, "measured_on": device,
            "own": bool(on) and bool(device) and on == device}


def cliffs(rows: list[dict], fused_rows: list[dict],
           calibration: dict | None = None) -> dict[str, Any]:
    """The defects a user meets as cliffs: cases measured more than CLIFF_RATIO times their
    prediction (collectives and fused), and fused groups whose pick (ranking) ran more than
    CLIFF_VS_NONE slower than the group's "none"; each names the resource that bound the
    prediction. ``calibration`` (own_calibration) is carried along: whether the predictions
    judged are the measured GPU's own."""
    slow = [{"id": r["id"], "predicted_s": r["predicted_s"], "measured_s": r["measured_s"],
             "measured_over_predicted": r["measured_s"] / r["predicted_s"],
             "bound_resource": r.get("bound_resource")}
            for r in rows + fused_rows if r["error"] is not None
            and r["measured_s"] > CLIFF_RATIO * r["predicted_s"]]
    by_id = {r["id"]: r for r in fused_rows}
    nones = {tuple(r[f] for f in FUSED_GROUP): r for r in fused_rows
             if r["overlap"] == "none" and r["measured_s"]}
    behind = []
    for g in ranking(fused_rows, FUSED_GROUP):
        none = nones.get(tuple(g[f] for f in FUSED_GROUP))
        if g["status"] != "ranked" or none is None or g["pick"] == none["id"]:
            continue
        if g["pick_measured_s"] > (1 + CLIFF_VS_NONE) * none["measured_s"]:
            pick = by_id[g["pick"]]
            behind.append({"group": group_name(g), "pick": g["pick"],
                           "pick_measured_s": g["pick_measured_s"],
                           "pick_predicted_s": g["pick_predicted_s"],
                           "none_measured_s": none["measured_s"],
                           "none_predicted_s": none["predicted_s"],
                           "slower_than_none": g["pick_measured_s"] / none["measured_s"] - 1,
                           "bound_resource": pick.get("bound_resource")})
    return {"slow_vs_prediction": sorted(slow, key=lambda c: -c["measured_over_predicted"]),
            "picks_slower_than_none": behind, "calibration": calibration}


def summarise(meta: dict, rows: list[dict], measured: dict[str, dict],
              fields: tuple[str, ...] = GROUP) -> dict:
    compared = [r for r in rows if r["error"] is not None]
    st = _stats([r["error"] for r in compared])
    ranks = ranking(rows, fields)
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
        "not_measured": sum(r["measured"] in ("not measured", "not timed") for r in rows),
        **{k: v for k, v in st.items() if k != "n"},
        "worst_case": worst["id"] if worst else None,
        "groups": len(ranks), "groups_ranked": len(ranked),
        "ranking_hits": sum(g["hit"] for g in ranked),
        "median_regret": statistics.median([g["regret"] for g in ranked]) if ranked else None,
        "max_regret": worst_rank["regret"] if worst_rank else None,
        "worst_ranking_group": group_name(worst_rank) if worst_rank else None,
        "groups_within_5": sum(g["regret"] <= TARGET_REGRET for g in ranked),
        "misses": [miss_line(g) for g in ranked if g.get("diagnosis")],
        "targets": targets, "targets_met": all(t["met"] for t in targets.values()),
    }


def order_effect(rows: list[dict], order: list[str], largest: int = 64 << 10) -> float | None:
    """How much longer the SM cases of at most ``largest`` bytes took at odd places of the run
    (``order``: the measured ids as the worker ran them) than at even ones: the median of
    measured / predicted at odd places over the same at even places, minus 1; None with fewer
    than 10 of either. Before the suite timed in halves every run showed 2-8 % (every other
    timing ran slower, validation/experiments/parity.py at commit 7cc519e;
    docs/decisions/D27.md); a case timed in two halves sees both."""
    place = {i: k for k, i in enumerate(order)}
    ratios: tuple[list[float], list[float]] = ([], [])
    for r in rows:
        if (r["error"] is not None and r.get("mechanism") in ("tma", "register")
                and (r.get("bytes") or 0) <= largest and r["id"] in place):
            ratios[place[r["id"]] % 2].append(r["measured_s"] / r["predicted_s"])
    if min(len(ratios[0]), len(ratios[1])) < 10:
        return None
    return statistics.median(ratios[1]) / statistics.median(ratios[0]) - 1


def build_report(bundle: Path, measured: Path | list[Path] | tuple[Path, ...] | None = None
                 ) -> dict:
    """The report of a bundle against its measurements (``measured``: one or more result
    files of run_collectives / run_fused; default: the bundle's own, see measured_paths)."""
    bundle = Path(bundle)
    meta, cases = load_bundle(bundle)
    fused_cases = load_fused_cases(bundle)
    paths = measured_paths(bundle, [measured] if isinstance(measured, Path) else measured)
    rows_by_id: dict[str, dict] = {}
    for path in paths:
        rows_by_id.update(load_measured(path))
    where = ", ".join(map(str, paths))
    rows = join(cases, rows_by_id, where)
    frows = join(fused_cases, rows_by_id, where, fused=True)
    summary = summarise(meta, rows, rows_by_id)
    summary["order_effect"] = order_effect(rows, list(rows_by_id))
    known = {c["id"] for c in cases} | {c["id"] for c in fused_cases}
    extra = Counter(r.get("kind", "collective") for i, r in rows_by_id.items() if i not in known)
    rep = {"summary": summary, "prepare": meta, "measured_file": where,
           "measured_files": [str(p) for p in paths], "rows_not_in_suite": dict(extra),
           "kernels": by_kernel(rows), "by_size": _by(rows, "bytes"),
           "by_world": _by(rows, "world"), "ranking": ranking(rows), "cases": rows}
    if fused_cases:
        fsum = summarise(meta, frows, rows_by_id, FUSED_GROUP)
        vs = vs_none(frows)
        both = [v for v in vs if v["agree"] is not None]
        fsum.update(vs_none_compared=len(both), vs_none_agree=sum(v["agree"] for v in both),
                    fused_faster_measured=sum(v["measured_speedup"] > 1 for v in both),
                    fused_faster_predicted=sum(v["predicted_speedup"] > 1 for v in both))
        summary["fused"] = fsum
        rep["fused"] = {"summary": fsum, "kernels": by_kernel(frows, FUSED_KERNEL),
                        "by_overlap": _by(frows, "overlap"), "by_world": _by(frows, "world"),
                        "ranking": ranking(frows, FUSED_GROUP), "vs_none": vs, "cases": frows}
    rep["cliffs"] = cliffs(rows, frows, own_calibration(meta, summary["device"]))
    summary["cliffs"] = {k: len(rep["cliffs"][k])
                         for k in ("slow_vs_prediction", "picks_slower_than_none")}
    summary["cliffs"]["own_calibration"] = rep["cliffs"]["calibration"]["own"]
    for part in ("cases", "ranking", "by_size"):        # sizes as docs/outputs.md names them
        rep[part] = [renamed(r, ("bytes",)) for r in rep[part]]
    return rep


__all__ = ["build_report", "summarise", "ranking", "join", "cliffs", "own_calibration",
           "by_kernel", "vs_none", "group_name", "load_measured", "load_fused_cases",
           "measured_paths", "OUTPUTS"]
