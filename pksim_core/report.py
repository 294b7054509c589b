"""From rows to what a person reads: summary rows, the nccl-tests sweep layout, and
the files of a study or a sweep (CSV/JSON of every row, and the plots)."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

from hwmodels.system import System
from hwmodels.units import Seconds, format_bytes
from pksim_core import plots
from pksim_core.gantt import gantt as gantt_chart
from pksim_core.plots import OutputDir
from pksim_core.prediction import Prediction
from pksim_core.runner import TaskOutcome, roofline_pct
from pksim_core.schedule import DTYPES
from pksim_core.study import Study
from pksim_core.study_programs import PROGRAM_OP
from pksim_core.trace import tracks
from pksim_core.vocabulary import with_aliases
from pksim_core.workloads.collectives import REDUCING

NCCL_TYPES = {"fp32": "float", "tf32": "float", "bf16": "bfloat16", "fp16": "half",
              "fp8": "f8e4m3", "fp4": "f4"}
ROOTED = ("broadcast", "reduce", "gather", "scatter")
NOT_SUPPORTED = "not supported yet"


def _num(value: float) -> float | None:
    return None if value is None or math.isnan(value) else value


# ---- study ----------------------------------------------------------------------------
def summary(rows: Sequence[TaskOutcome], impl: str = "pk") -> list[dict[str, Any]]:
    """One entry per (system, what-if, case): the best schedule against the baseline (a
    program's also its roofline, the share of it both reach, and the baseline's own gain
    over the unchanged system: ``program_entry``)."""
    out = []
    others = {(r.key(), r.impl): r for r in rows if r.case.is_program}
    for r in rows:
        if r.impl != impl:
            continue
        c = r.case
        out.append({"system": r.system, "variant": r.variant, "workload": c.workload,
                    "op": c.op, "shape": c.shape_text(), "world": c.world,
                    "status": r.status, "label": r.schedule, "time_s": _num(r.time_s),
                    "bound_resource": r.bound_resource, "busbw_GBps": _num(r.busbw_GBps),
                    "baseline_label": r.baseline_schedule,
                    "baseline_s": _num(r.baseline_s), "speedup": _num(r.speedup),
                    "gain": _num(r.gain), "binding_figure": r.binding_figure,
                    "binding_provenance": r.binding_provenance, "message": r.message,
                    "emittable": r.emittable, "not_emittable": r.not_emittable or None})
        if c.is_program:
            out[-1].update(program_entry(r, others.get((r.key(), "nccl"))))
    return out


def program_entry(row: TaskOutcome, baseline: TaskOutcome | None) -> dict[str, Any]:
    """A program's summary columns beyond an op's (seconds and percent)."""
    return {"roofline_s": _num(row.roofline_s),
            "pct_of_roofline": roofline_pct(row.roofline_s, row.time_s),
            "baseline_pct_of_roofline": roofline_pct(row.roofline_s, row.baseline_s),
            "baseline_gain": _num(baseline.gain) if baseline is not None and baseline.ok
            else None}


def program_table_rows(entries: Sequence[dict], what_if: bool = False) -> list[list]:
    """Terminal rows of the programs' tables: PROGRAM_HEADERS, or PROGRAM_WHATIF_HEADERS."""
    out = []
    width = len(PROGRAM_WHATIF_HEADERS if what_if else PROGRAM_HEADERS)
    for e in entries:
        head = ([e["variant"]] if what_if else []) + [e["workload"]]
        if not what_if:
            head.append(str(e["world"]))
        if e["status"] != "ok":
            out.append(head + [f"{e['status']}: {e['message'][:60]}"]
                       + [""] * (width - len(head) - 1))
            continue
        roof = [_fmt_s(e["baseline_s"]), _fmt_s(e["time_s"]), _fmt_s(e["roofline_s"]),
                e["bound_resource"]]
        if what_if:
            out.append(head + roof + [_fmt_pct(e["pct_of_roofline"]),
                                      _fmt_x(e["baseline_gain"]), _fmt_x(e["gain"]),
                                      _fmt_x(e["speedup"])])
        else:
            out.append(head + roof + [_fmt_pct(e["baseline_pct_of_roofline"]),
                                      _fmt_pct(e["pct_of_roofline"]), _fmt_x(e["speedup"])])
    return out


PROGRAM_HEADERS = ["program", "ranks", "baseline", "pksim", "roofline", "binds",
                   "baseline %roof", "pksim %roof", "speed-up"]
PROGRAM_WHATIF_HEADERS = ["what-if", "program", "baseline", "pksim", "roofline", "binds",
                          "pksim %roof", "baseline gain", "pksim gain", "speed-up"]


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def table_rows(entries: Sequence[dict], what_if: bool = False) -> list[list]:
    """Terminal rows: TABLE_HEADERS, or WHATIF_HEADERS when ``what_if``. A workload the
    simulator does not model yet is one line per (workload, world) with its shapes."""
    out: list[list[str]] = []
    collapsed: dict[tuple, list[dict]] = defaultdict(list)
    for e in entries:
        if e["status"] == NOT_SUPPORTED:
            collapsed[(e["variant"], e["workload"], e["world"])].append(e)
    shown: set[tuple] = set()
    width = len(WHATIF_HEADERS if what_if else TABLE_HEADERS)
    for e in entries:
        key = (e["variant"], e["workload"], e["world"])
        lead = [e["variant"]] if what_if else []
        head = lead + [e["workload"], e["shape"], str(e["world"])]
        if e["status"] == NOT_SUPPORTED:
            if key in shown:
                continue
            shown.add(key)
            group = collapsed[key]
            if len(group) > 1:
                head[-2] = f"{group[0]['shape']} .. ({len(group)} shapes)"
            out.append(head + [NOT_SUPPORTED] + [""] * (width - len(head) - 1))
        elif e["status"] != "ok":
            out.append(head + [f"{e['status']}: {e['message'][:60]}"]
                       + [""] * (width - len(head) - 1))
        elif what_if:
            out.append(head + [_label(e["label"]), _fmt_s(e["time_s"]),
                               e["bound_resource"], _rests_on(e), _fmt_x(e["gain"]),
                               _fmt_x(e["speedup"])])
        else:
            out.append(head + [_label(e["label"]), _fmt_s(e["time_s"]),
                               e["bound_resource"], _label(e["baseline_label"] or "-"),
                               _fmt_s(e["baseline_s"]), _fmt_x(e["speedup"])])
    return out


def _label(schedule: str) -> str:
    """A schedule label short enough for a table cell (the CSV keeps the full one)."""
    if schedule.startswith("none (library"):
        return "library, then NCCL"
    return schedule.removeprefix("nccl/")


TABLE_HEADERS = ["workload", "shape", "ranks", "best schedule", "time", "binds",
                 "baseline", "baseline time", "speed-up"]
WHATIF_HEADERS = ["what-if", "workload", "shape", "ranks", "best schedule", "time", "binds",
                  "rests on", "vs unchanged", "speed-up"]


def _rests_on(entry: dict) -> str:
    """The figure behind the binding resource and its provenance: 'link_bandwidth_GBps
    (assumed)'; '-' when no single figure binds (the NCCL baseline)."""
    key = entry.get("binding_figure") or ""
    if not key:
        return "-"
    return f"{key.rsplit('.', 1)[-1]} ({entry.get('binding_provenance') or '?'})"


def _fmt_s(seconds: float | None) -> Seconds:
    """A time cell: the table prints its column in one unit (``time (us)``)."""
    return Seconds(seconds)


def _fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _x_axis(row: TaskOutcome) -> tuple[float, str]:
    """The shape key a workload sweeps (for plots): its value and name."""
    shape = dict(row.case.shape)
    for key in ("m", "tokens", "bytes", "count", "n", "k"):
        if key in shape:
            return shape[key], "M (tokens)" if key == "m" else key
    key, value = next(iter(shape.items()))
    return value, key


def _points(rows: Sequence[TaskOutcome], study: Study, variant: str = "base") -> list[dict]:
    """Plot points, in the study's workload order; a workload over the whole domain
    ("domain") is one panel whatever each system's size."""
    specs = {w.name: w for w in study.workloads}
    order = list(specs)
    out = []
    rows = [r for r in rows if not r.case.is_program]
    for r in sorted(rows, key=lambda r: (order.index(r.case.workload), r.case.world)):
        if not r.ok or r.variant != variant:
            continue
        x, label = _x_axis(r)
        whole = specs[r.case.workload].world == ("domain",)
        panel = r.case.workload if whole else f"{r.case.workload}, {r.case.world} ranks"
        bar = f"{r.system} x{r.case.world}" if whole else r.system
        out.append({"panel": panel, "bar": f"{bar} {r.impl}",
                    "workload": r.case.workload, "world": r.case.world, "system": r.system,
                    "impl": r.impl, "x": x, "x_label": label, "shape": r.case.shape_text(),
                    "time_s": r.time_s, "speedup": _num(r.speedup),
                    "busbw_GBps": r.busbw_GBps, "size_bytes": r.nbytes,
                    "label": r.schedule, "bound_resource": r.bound_resource})
    return out


def _breakdown_items(rows: Sequence[TaskOutcome]) -> list[dict]:
    """For each (workload, world), its largest case: busy time per resource class."""
    largest: dict[tuple, TaskOutcome] = {}
    rows = [r for r in rows if not r.case.is_program]
    for r in rows:
        if r.ok and r.variant == "base":
            key = (r.case.workload, r.case.world)
            if key not in largest or r.nbytes > largest[key].nbytes:
                largest[key] = r
    chosen = {(k, r.case) for k, r in largest.items()}
    items = []
    for r in rows:
        if r.ok and r.variant == "base" and ((r.case.workload, r.case.world), r.case) in chosen:
            items.append({"group": f"{r.case.workload} {r.case.shape_text()} x{r.case.world}",
                          "bar": f"{r.system} {r.impl}", "system": r.system, "impl": r.impl,
                          "label": r.schedule, "time_s": r.time_s,
                          "busy_s": dict(r.breakdown)})
    return items


def roofs(systems: dict[str, System]) -> dict[str, dict[str, float]]:
    return {name: {"nvlink_GBps": s.gpu.nvlink.bandwidth_Bps / 1e9,
                   "alpha_s": s.gpu.sync.kernel_launch_s + s.gpu.nvlink.latency_s}
            for name, s in systems.items()}


# The columns of results.csv and summary.csv (what an empty or partial file still has).
# Every file pksim writes follows docs/outputs.md: times in seconds (``*_s``), sizes in
# bytes (``*_bytes``), the schedule's label under ``label``; renamed keys keep their old
# name after the new ones for one release (pksim_core.vocabulary).
RESULT_COLUMNS = ["system", "variant", "workload", "op", "shape", "dtype", "world", "domains",
                  "impl", "status", "message", "time_s", "label", "bound_s",
                  "bound_resource", "alpha_beta_s", "size_bytes", "algbw_GBps", "busbw_GBps",
                  "link_util", "baseline_s", "baseline_label", "speedup", "gain",
                  "wall_s", "binding_figure", "binding_provenance", "assumed",
                  "schedule", "nbytes", "baseline_schedule", "seconds"]
SUMMARY_COLUMNS = ["system", "variant", "workload", "op", "shape", "world", "status",
                   "label", "time_s", "bound_resource", "busbw_GBps", "baseline_label",
                   "baseline_s", "speedup", "gain", "binding_figure", "binding_provenance",
                   "message", "schedule", "baseline_schedule"]
SUMMARY_RENAMED = ("schedule", "baseline_schedule")       # the aliases summary.csv keeps


def study_files(study: Study) -> list[str]:
    names = ["results.csv", "results.json", "summary.csv"]
    stems = [k for k in study.plots if k not in PROGRAM_PLOTS or study.programs]
    stems = [k for k in stems if k not in ("sensitivity", "program-gain") or study.vary]
    return names + plots.plot_files(stems)


PROGRAM_PLOTS = ("program-roofline", "program-gain")


def write_study(out: OutputDir, study: Study, rows: Sequence[TaskOutcome], systems: dict[str, System],
                timelines: Sequence[tuple[str, Prediction, System]] = (), with_plots: bool = True,
                meta: dict | None = None) -> None:
    """results.csv/json (every row), summary.csv (pk against the baseline), the plots."""
    records = [r.to_dict() for r in rows]
    out.write_json("results.json", {"study": study.name, "title": study.title,
                                    **(meta or {}), "rows": records})
    flat = [{**{k: v for k, v in d.items() if k not in ("busy_s", "breakdown", "schedule_json")},
             "shape": " ".join(f"{k}={v}" for k, v in d["shape"].items()),
             "assumed": ";".join(d["assumed"]),
             **{f"busy_{k}_s": v for k, v in d["busy_s"].items()}} for d in records]
    meta = meta or {}
    comment = ""
    if meta.get("interrupted"):
        comment = (f"partial: {meta.get('finished')} of {meta.get('tasks')} rows (interrupted); "
                   f"pksim whatif --resume -o {out.path} completes it")
    out.write_csv("results.csv", flat, None if flat else RESULT_COLUMNS, comment)
    out.write_csv("summary.csv", [with_aliases(e, SUMMARY_RENAMED) for e in summary(rows)],
                  None if rows else SUMMARY_COLUMNS, comment)
    if not with_plots or comment:          # plots are drawn from complete studies only
        return
    title = study.title or study.name
    points = _points(rows, study)
    grouped = [p for p in points]
    if "time" in study.plots and points:
        out.save(plots.by_group(grouped, "time_s", "time (us)", f"{title}: predicted time",
                                scale=1e6), "time", _aliased(grouped))
    speed = [p for p in points if p["impl"] == "pk" and p["speedup"] is not None]
    if "speedup" in study.plots and speed:
        out.save(plots.by_group(speed, "speedup", f"speed-up over {study.baseline}",
                                f"{title}: best schedule against the baseline",
                                impls=("pk",), hline=1.0, logy=False), "speedup", _aliased(speed))
    items = _breakdown_items(rows)
    if "breakdown" in study.plots and items:
        data = _aliased([{**{k: v for k, v in i.items() if k != "busy_s"},
                          **{f"busy_{k}_s": v for k, v in i["busy_s"].items()}} for i in items])
        out.save(plots.breakdown(items, f"{title}: busy time per resource"), "breakdown", data)
    coll = [p for p in points if p["size_bytes"] and p["busbw_GBps"]]
    if "roofline" in study.plots and coll:
        used = {p["system"] for p in coll}
        out.save(plots.roofline(coll, roofs({k: v for k, v in systems.items() if k in used}),
                                f"{title}: bus bandwidth"), "roofline", _aliased(coll))
    if "timeline" in study.plots and timelines:
        events = gantt_events(timelines)
        p = timelines[0][1]
        case = f"{p.schedule.op} {format_bytes(p.nbytes)} x{p.schedule.world} on {p.system}"
        out.save(gantt_chart(events, f"{title}\ntimeline of {case}: best schedule and baseline"),
                 "timeline", gantt_data(events))
    gains = _gains(rows)
    if "sensitivity" in study.plots and study.vary and gains:
        out.save(plots.sensitivity(_sensitivity_cases(gains), f"{title}: what if"),
                 "sensitivity", _aliased(gains))
    _program_plots(out, study, rows)


def _program_plots(out: OutputDir, study: Study, rows: Sequence[TaskOutcome]) -> None:
    """% of roofline per program and variant, and (with --vary) each change's gain."""
    points = [{"system": e["system"], "variant": e["variant"], "program": e["workload"],
               "world": e["world"], "baseline_s": e["baseline_s"], "best_s": e["time_s"],
               "roofline_s": e["roofline_s"], "roofline_resource": e["bound_resource"],
               "baseline_pct_of_roofline": e["baseline_pct_of_roofline"],
               "best_pct_of_roofline": e["pct_of_roofline"],
               "speedup": e["speedup"], "gain": e["gain"], "baseline_gain": e["baseline_gain"]}
              for e in summary(rows) if e["op"] == PROGRAM_OP and e["status"] == "ok"]
    title = study.title or study.name
    if "program-roofline" in study.plots and points:
        out.save(plots.program_roofline(points, f"{title}: % of roofline, baseline and "
                                                f"pksim's best"), "program-roofline",
                 _aliased(points))
    changed = [p for p in points if p["variant"] != "base"]
    if "program-gain" in study.plots and study.vary and changed:
        out.save(plots.program_gain(changed, f"{title}: what each change buys the programs"),
                 "program-gain", _aliased(changed))


def _gains(rows: Sequence[TaskOutcome]) -> list[dict]:
    """pk rows with their gain over the unchanged system and whether the best schedule
    changed."""
    base = {(r.system_ref, r.case): r.schedule for r in rows
            if r.ok and r.impl == "pk" and r.variant == "base" and not r.case.is_program}
    rows = [r for r in rows if not r.case.is_program]
    return [{"system": r.system, "variant": r.variant, "workload": r.case.workload,
             "world": r.case.world, "x": _x_axis(r)[0],
             "case": f"{r.case.workload} {r.case.shape_text()} x{r.case.world}",
             "gain": _num(r.gain), "time_s": r.time_s, "label": r.schedule,
             "bound_resource": r.bound_resource,
             "changed": r.schedule != base.get((r.system_ref, r.case), r.schedule)}
            for r in rows if r.ok and r.impl == "pk"]


def _sensitivity_cases(gains: list[dict]) -> list[dict]:
    """Per system, the smallest and largest case of each (workload, world), six at most."""
    keep: dict[str, list[str]] = defaultdict(list)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for g in gains:
        groups[(g["system"], g["workload"], g["world"])].append(g)
    for (system, _, _), members in groups.items():
        ends = sorted(members, key=lambda g: g["x"])
        for g in (ends[0], ends[-1]):
            if g["case"] not in keep[system] and len(keep[system]) < 6:
                keep[system].append(g["case"])
    return [g for g in gains if g["case"] in keep[g["system"]]]


# Old names the plots' data keep for one release (pksim_core.vocabulary.RENAMED).
PLOT_RENAMED = ("size_B", "schedule", "size", "baseline_pct", "best_pct")


GANTT_RENAMED = {"schedule": "label", "bytes": "moved_bytes"}


def _aliased(points: Sequence[dict], old_keys=PLOT_RENAMED) -> list[dict]:
    return [with_aliases(p, old_keys) for p in points]


def gantt_data(events: Sequence[dict]) -> list[dict]:
    """A Gantt chart's data file: its events, with the old names for one release."""
    return _aliased(events, GANTT_RENAMED)


def gantt_events(timelines: Sequence[tuple[str, Prediction, System]]) -> list[dict]:
    events = []
    for label, p, system in timelines:
        for t in tracks(system, p):
            events.append({**t, "run": label, "label": p.schedule.label()})
    return events


# ---- sweep ------------------------------------------------------------------------------
def sweep_rows(rows: Sequence[TaskOutcome], impls: Sequence[str]) -> list[dict[str, Any]]:
    """The nccl-tests layout: size, count, type, redop, root, then time / algbw / busbw
    per impl (side by side), one row per (system, size)."""
    table: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        c = r.case
        key = (r.system, c.shape, c.world)
        nbytes = c.nbytes if c.is_collective else 0
        entry = table.setdefault(key, {
            "system": r.system, "op": c.op, "world": c.world,
            "size_bytes": nbytes, "count": int(nbytes / _elem(c.dtype)) if nbytes else None,
            "type": NCCL_TYPES.get(c.dtype, c.dtype),
            "redop": "sum" if c.op in REDUCING else "none",
            "root": c.root if c.op in ROOTED else -1, "shape": c.shape_text()})
        entry[f"{r.impl}_time_s"] = _num(r.time_s)
        entry[f"{r.impl}_algbw_GBps"] = _num(r.algbw_GBps)
        entry[f"{r.impl}_busbw_GBps"] = _num(r.busbw_GBps)
        entry[f"{r.impl}_label"] = r.schedule if r.ok else r.status
    order = list(dict.fromkeys(r.system for r in rows))
    out = list(table.values())
    for e in out:
        if e.get("pk_time_s") and e.get("nccl_time_s"):
            e["speedup"] = e["nccl_time_s"] / e["pk_time_s"]
    return sorted(out, key=lambda e: (order.index(e["system"]), e["size_bytes"], e["shape"]))


def sweep_columns(impls: Sequence[str]) -> list[str]:
    cols = ["system", "op", "world", "size_bytes", "count", "type", "redop", "root"]
    for impl in impls:
        cols += [f"{impl}_time_s", f"{impl}_algbw_GBps", f"{impl}_busbw_GBps",
                 f"{impl}_label"]
    cols += ["speedup"] if {"pk", "nccl"} <= set(impls) else []
    return cols + [old for old in _aliases(impls)]


def _aliases(impls: Sequence[str]) -> list[str]:
    """The old names a sweep's rows keep for one release (pksim_core.vocabulary)."""
    return ["size_B"] + [f"{impl}_schedule" for impl in impls]


def _elem(dtype: str) -> float:
    return DTYPES[dtype]


def sweep_files() -> list[str]:
    return ["sweep.csv", "sweep.json"] + plots.plot_files(["busbw", "time", "roofline"])


def write_sweep(out: OutputDir, rows: Sequence[TaskOutcome], impls: Sequence[str], op: str,
                with_plots: bool = True, systems: dict[str, System] | None = None,
                partial: str = "", resume: dict | None = None) -> list[dict]:
    """sweep.csv/json and the plots; ``partial`` (an interrupted sweep: what it has)
    heads the CSV as a comment, is kept in the JSON, and no plot is drawn. sweep.json
    also keeps every task's row (``results``) and what the sweep was (``resume``), which
    ``--resume`` reads."""
    table = sweep_rows(rows, impls)
    files = [with_aliases(e, _aliases(impls)) for e in table]
    out.write_csv("sweep.csv", files, sweep_columns(impls), partial)
    out.write_json("sweep.json", {"op": op, "partial": partial or None, "resume": resume,
                                  "results": [r.to_dict() for r in rows],
                                  "columns": sweep_columns(impls), "rows": files,
                                  "units": {"size_bytes": "bytes", "time_s": "seconds",
                                            "algbw_GBps": "1e9 bytes/s",
                                            "busbw_GBps": "1e9 bytes/s"}})
    points = [{"system": r.system, "impl": r.impl, "size_bytes": r.nbytes, "label": r.schedule,
               "time_s": r.time_s, "algbw_GBps": r.algbw_GBps,
               "busbw_GBps": r.busbw_GBps} for r in rows if r.ok]
    if with_plots and points and not partial:
        out.save(plots.against_size(points, "busbw_GBps", f"{op}: bus bandwidth",
                                    "busbw (GB/s)"), "busbw", _aliased(points))
        out.save(plots.against_size(points, "time_s", f"{op}: time", "time (us)", logy=True,
                                    scale=1e6), "time", _aliased(points))
        bandwidth = [p for p in points if p["busbw_GBps"]]
        if systems and bandwidth:
            out.save(plots.roofline(bandwidth, roofs(systems), f"{op}: bus bandwidth"),
                     "roofline", _aliased(bandwidth))
    return table
