"""A program's two runs as a Chrome / Perfetto trace and as Gantt rows, in pksim_core.trace's
conventions: one process per run (the baseline, pksim's best), one thread per lane (the
baseline's stream; pksim's compute and communication lanes) and one for the host's launches
and reads; an event per task, named after its ops, its kernel or schedule in ``args``."""
from __future__ import annotations

from typing import Any

from pksim_core.programs.predict import ProgramPrediction, Run

RUNS = (("baseline", "baseline (PyTorch + NCCL)"), ("best", "pksim's best"))


def gantt_rows(p: ProgramPrediction) -> list[dict[str, Any]]:
    """Rows for ``pksim_core.gantt.gantt``: run, track, kind, name, group, start_s, end_s."""
    rows = []
    for key, title in RUNS:
        run: Run = getattr(p, key)
        for task in run.tasks:
            lanes = ["host"] if task["kind"] == "host" else task["lanes"]
            for lane in lanes:
                rows.append({"run": title, "track": lane, "kind": task["kind"],
                             "name": task["name"], "group": task["label"] or task["kind"],
                             "start_s": task["start_s"], "end_s": task["end_s"]})
    return rows


def chrome_trace(p: ProgramPrediction) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    threads: dict[tuple[int, str], int] = {}
    for pid, (key, title) in enumerate(RUNS, start=1):
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": title}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                     "args": {"sort_index": pid}})
        run: Run = getattr(p, key)
        for task in run.tasks:
            lanes = ["host"] if task["kind"] == "host" else task["lanes"]
            for lane in lanes:
                tid = threads.setdefault((pid, lane), len(threads) + 1)
                events.append({"name": task["name"], "cat": task["kind"], "ph": "X",
                               "pid": pid, "tid": tid, "ts": task["start_s"] * 1e6,
                               "dur": max((task["end_s"] - task["start_s"]) * 1e6, 1e-3),
                               "args": {"label": task["label"], "ops": task["ops"],
                                        "issued_s": task["issued_s"]}})
    for (pid, lane), tid in threads.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"name": lane}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"system": p.system, "program": p.program, "world": p.world,
                          "baseline_s": p.baseline_s, "best_s": p.best_s,
                          "roofline_s": p.roofline_s, "roofline_resource": p.roofline_resource,
                          # the old keys, in microseconds, for one release
                          "baseline_us": p.baseline_s * 1e6, "best_us": p.best_s * 1e6,
                          "roofline_us": p.roofline_s * 1e6}}
