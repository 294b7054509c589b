"""The timeline of one prediction as a Chrome / Perfetto trace (and Gantt rows).

Tracks: per simulated rank its lanes (a lane is one pipeline chunk's walk through the
steps) and its SM group (the communication SMs, copy engines or NCCL channels that
issue its transfers); per link class (``nvl_out``, ``up1``, ``nvls``, ...) the times
some transfer crosses it. With the symmetric reduction only one rank per class of
equivalent ranks is simulated; those are the ranks shown (``--full`` shows all).

Each timeline event of the simulator names its rank, lane, phase and step; the link
classes a step uses come from the assembled model (``pksim_core.collective_model.build``).

Fused compute + communication ops (``pksim_core.fusion``) record their own tracks: per
simulated rank its compute SMs (a span per chunk of GEMM tiles, with the tile and wave
count, or attention block) and its communication SMs (or the compute SMs'
communication warps, intra-SM), and per link class the times a transfer crosses it.
The ``none`` baseline shows the library kernel, then NCCL's collective.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from hwmodels.system import System
from pksim_core.prediction import Prediction
from pksim_core.collective_model import build
from pksim_core.vocabulary import MOVED, renamed, with_aliases
from pksim_core.workloads.fused_ops import FUSED_OPS

_TRACK = re.compile(r"rank (\d+) / lane (\d+)")
_RANK = re.compile(r"rank (\d+) / (.*)")
_NAME = re.compile(r"(.*) step (\d+)$")
# Resource classes inside a GPU: shown on the SM-group track, not as links.
_LOCAL = {"issue", "ce", "hbm", "l2", "sm"}


def _sm_group(p: Prediction) -> str:
    s = p.schedule
    if s.impl == "nccl":
        return f"NCCL channels ({s.comm_sms})"
    if s.mechanism == "copy-engine":
        return "copy engines"
    return f"comm SMs ({s.comm_sms}, {s.mechanism})"


def _step_classes(system: System, p: Prediction) -> dict[tuple[int, int], set[str]]:
    """(step index, issuing rank) -> resource classes its flows cross."""
    model = build(system, p.schedule, reduced=p.reduced)
    out: dict[tuple[int, int], set[str]] = defaultdict(set)
    for s, (_step, classes, _sync) in enumerate(model.step_classes()):
        for fc in classes:
            out[(s, fc.issuer)].update(n.cls for n, _ in fc.usage)
    return out


def _merge(events: list[dict], touching: bool = True) -> list[dict]:
    """Union of overlapping (and, if ``touching``, back-to-back) intervals on one track
    (names and bytes combined)."""
    merged: list[dict] = []
    for e in sorted(events, key=lambda e: (e["start_s"], e["end_s"])):
        last = merged[-1] if merged else None
        if last is not None and (e["start_s"] < last["end_s"] or
                                 (touching and e["start_s"] == last["end_s"])):
            last["end_s"] = max(last["end_s"], e["end_s"])
            last["moved_bytes"] += e["moved_bytes"]
            if e["name"] not in last["names"]:
                last["names"].append(e["name"])
            if e["group"] not in last["groups"]:
                last["groups"].append(e["group"])
        else:
            merged.append({**e, "names": [e["name"]], "groups": [e["group"]]})
    for m in merged:
        names, groups = m.pop("names"), m.pop("groups")
        m["name"] = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        m["group"] = "+".join(groups)
    return merged


def tracks(system: System, p: Prediction) -> list[dict]:
    """Gantt rows: track, kind, rank, name, group (phase), start_s, end_s, moved_bytes."""
    if not p.timeline:
        return []
    if p.schedule.op in FUSED_OPS:
        return _fused_tracks(p)
    used = _step_classes(system, p)
    lanes = len({_TRACK.match(e.track).group(2) for e in p.timeline if _TRACK.match(e.track)})
    sm_group = _sm_group(p)
    raw: dict[tuple[str, str, int, int], list[dict]] = defaultdict(list)
    for e in p.timeline:
        track, name = _TRACK.match(e.track), _NAME.match(e.name)
        phase = name.group(1) if name else e.name
        base = {"name": e.name, "group": phase, "start_s": e.start_s,
                "end_s": e.end_s, "moved_bytes": e.nbytes}
        if not track:
            raw[(e.track, "other", -1, 0)].append(base)
            continue
        rank, lane = int(track.group(1)), int(track.group(2))
        label = f"rank {rank} / lane {lane}" if lanes > 1 else f"rank {rank} / transfers"
        raw[(label, "lane", rank, lane)].append(base)
        raw[(f"rank {rank} / {sm_group}", "sm-group", rank, 0)].append(base)
        step = int(name.group(2)) if name else -1
        for cls in sorted(used.get((step, rank), ())):
            if cls not in _LOCAL:
                raw[(f"link {cls}", "link", -1, 0)].append(base)
    order = {"lane": 0, "sm-group": 1, "link": 2, "other": 3}
    out = []
    for key in sorted(raw, key=lambda k: (k[2] < 0, k[2], order[k[1]], k[3], k[0])):
        track, kind, rank, _lane = key
        for m in _merge(raw[key]):
            out.append({"track": track, "kind": kind, "rank": rank, **m})
    return out + _tail(p, out)


def _tail(p: Prediction, rows: list[dict]) -> list[dict]:
    """The trace spans the prediction: when the predicted time ends after the last
    transfer (the host's launch floor of back-to-back calls, or the last host-issued
    launch: ``pksim_core.collective_model.simulate``), a span on its own track covers the rest."""
    end_s = max((r["end_s"] for r in rows), default=0.0)
    if p.time_s - end_s <= max(1e-6 * p.time_s, 1e-12):
        return []
    return [{"track": "host / launch floor", "kind": "other", "rank": -1,
             "name": "launch and host floor (no transfer in flight)", "group": "launch floor",
             "start_s": end_s, "end_s": p.time_s, "moved_bytes": 0}]


def _fused_tracks(p: Prediction) -> list[dict]:
    """Rows of a fused op's timeline: its events already name their tracks (see
    ``pksim_core.fusion``); chunks that follow each other stay separate spans."""
    raw: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for e in p.timeline:
        rank_track = _RANK.match(e.track)
        if rank_track:
            rank, kind = int(rank_track.group(1)), (
                "compute" if rank_track.group(2).startswith("compute") else "comm")
        else:
            rank, kind = -1, "link" if e.track.startswith("link ") else "other"
        group = ("launch" if e.name == "kernel launch" else
                 e.name.split(": ", 1)[-1].split()[0] if kind == "compute" else
                 e.name.split(" chunk")[0].split(" tail")[0])
        raw[(e.track, kind, rank)].append({"name": e.name, "group": group,
                                           "start_s": e.start_s,
                                           "end_s": e.end_s, "moved_bytes": e.nbytes})
    order = {"compute": 0, "comm": 1, "link": 2, "other": 3}
    out = []
    for key in sorted(raw, key=lambda k: (k[2] < 0, k[2], order[k[1]], k[0])):
        track, kind, rank = key
        for m in _merge(raw[key], touching=False):
            out.append({"track": track, "kind": kind, "rank": rank, **m})
    return out


def chrome_trace(system: System, p: Prediction) -> dict[str, Any]:
    """The Chrome trace-event JSON (load in chrome://tracing or ui.perfetto.dev): its
    events' ``ts`` and ``dur`` in microseconds, as the trace-event format defines them;
    ``otherData`` (ours) in seconds, as every file pksim writes."""
    rows = tracks(system, p)
    processes: dict[str, int] = {}
    threads: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = []
    for row in rows:
        process = f"rank {row['rank']}" if row["rank"] >= 0 else (
            "links" if row["kind"] == "link" else "other")
        pid = processes.setdefault(process, len(processes) + 1)
        thread = row["track"].split(" / ", 1)[-1]
        tid = threads.setdefault((pid, thread), len(threads) + 1)
        events.append({"name": row["name"], "cat": row["kind"], "ph": "X", "pid": pid,
                       "tid": tid, "ts": row["start_s"] * 1e6,
                       "dur": max((row["end_s"] - row["start_s"]) * 1e6, 1e-3),
                       "args": with_aliases({"phase": row["group"],
                                             "moved_bytes": row["moved_bytes"]}, MOVED)})
    meta: list[dict[str, Any]] = []
    for name, pid in processes.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                     "args": {"sort_index": pid}})
    for (pid, name), tid in threads.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})
    s = p.schedule
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": renamed({"system": p.system, "op": s.op, "bytes": p.nbytes,
                                  "shape": dict(s.shape), "dtype": s.dtype,
                                  "world": s.world, "schedule": s.label(),
                                  "schedule_key": s.key(), "time_s": p.time_s,
                                  "bound_s": p.bound_s, "bound_resource": p.bound_resource,
                                  "reduced": p.reduced, "note": "one rank per symmetry class"
                                  if p.reduced else "every rank"}, ("bytes", "schedule"))}
