"""Running a program's tasks: the host issues launches in order, the GPU runs each task on its
lanes (streams) in order once its dependencies are done (docs/design.md, "Programs: the
schedule").

- Host: each task's launches cost ``sync.launch_api_us`` of host time one after another, and
  a task cannot start before the host has issued it. A host read (``.item()``, a host-sync
  op) waits until the GPU has finished everything issued before it, then costs a copy's issue
  (``copy_api_us``), the copy on the stream (``stream_launch_us``) and the host's wake-up
  (``host_sync_us``); the host issues nothing meanwhile.
- GPU: a task holds its lanes from start to end; each lane runs its tasks in issue order (a
  CUDA stream), a task waits for its dependencies on other lanes (events). The baseline has one
  lane (and NCCL's own stream for the calls the reference makes asynchronously: ``async``);
  pksim's best a compute lane and a communication lane, a fused kernel holding both.
- Sharing: while communication-only tasks run, a compute-only task runs on the SMs they leave
  (its rate is 1 - their SMs / the GPU's SMs); a task's duration is its time alone at rate 1.
  The HBM a collective shares with an overlapped kernel is not modelled (docs/decisions.md D40).
"""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.system import System

EPS = 1e-15


@dataclass(frozen=True)
class Task:
    name: str
    ops: tuple[str, ...]          # the program ops it runs
    lanes: tuple[str, ...]
    duration_s: float
    kind: str = "compute"         # compute | comm | fused | host
    label: str = ""               # the kernel or schedule it runs
    launches: int = 1
    host_reads: int = 0
    sms: int = 0                  # SMs a communication-only task keeps from compute
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Span:
    task: int
    issued_s: float
    start_s: float
    end_s: float


def host_read_s(system: System) -> float:
    sync = system.gpu.sync
    return sync.copy_api_s + sync.stream_launch_s + sync.host_sync_s


def run_tasks(system: System, tasks: list[Task]) -> list[Span]:
    """Start and end of every task (tasks in issue order, dependencies earlier)."""
    spans: list[Span | None] = [None] * len(tasks)
    host = 0.0
    segment: list[int] = []
    issued: dict[int, float] = {}
    for i, task in enumerate(tasks):
        if task.host_reads:
            ends = _segment(system, tasks, segment, issued, spans)
            start = max([host] + ends + [s.end_s for s in spans[:i] if s is not None])
            end = start + task.host_reads * host_read_s(system) + task.duration_s
            spans[i] = Span(i, start, start, end)
            host, segment, issued = end, [], {}
            continue
        host += task.launches * system.gpu.sync.launch_api_s
        issued[i] = host
        segment.append(i)
    _segment(system, tasks, segment, issued, spans)
    return [s for s in spans if s is not None]


def _segment(system: System, tasks: list[Task], order: list[int], issued: dict[int, float],
             spans: list) -> list[float]:
    """Tasks issued between two host reads (none of them waits for the host again)."""
    if not order:
        return []
    sms_total = system.gpu.sm.count
    queues: dict[str, list[int]] = {}
    for i in order:
        for lane in tasks[i].lanes:
            queues.setdefault(lane, []).append(i)
    head = dict.fromkeys(queues, 0)
    busy: dict[str, int] = {}
    left: dict[int, float] = {}
    start: dict[int, float] = {}
    end: dict[int, float] = {i: s.end_s for i, s in enumerate(spans) if s is not None}
    now = min(issued[i] for i in order)
    pending = set(order)
    cursor = 0              # issue times rise in order: the first task not issued by ``now``
    while pending or left:
        while cursor < len(order) and issued[order[cursor]] <= now + EPS:
            cursor += 1
        for i in sorted({queues[lane][head[lane]] for lane in queues
                         if head[lane] < len(queues[lane])}):
            task = tasks[i]
            ready = (all(head[ln] < len(queues[ln]) and queues[ln][head[ln]] == i and ln not in busy
                         for ln in task.lanes)
                     and issued[i] <= now + EPS
                     and all(d in end and end[d] <= now + EPS for d in task.deps))
            if ready:
                start[i], left[i] = now, task.duration_s
                pending.discard(i)
                for ln in task.lanes:
                    busy[ln] = i
                    head[ln] += 1
        if not left:
            if cursor >= len(order):
                raise RuntimeError("program schedule stalled (a dependency on a later task)")
            now = issued[order[cursor]]
            continue
        taken = sum(tasks[i].sms for i in left if tasks[i].kind == "comm")
        rate = {i: (max(0.05, 1.0 - taken / sms_total) if tasks[i].kind == "compute"
                    else 1.0) for i in left}
        step = min(left[i] / rate[i] for i in left)
        if cursor < len(order):
            step = min(step, issued[order[cursor]] - now)
        for i in list(left):
            left[i] -= step * rate[i]
        now += step
        for i in [i for i in left if left[i] <= 1e-12 * tasks[i].duration_s + 1e-18]:
            del left[i]
            end[i] = now
            spans[i] = Span(i, issued[i], start[i], now)
            for ln in tasks[i].lanes:
                busy.pop(ln, None)
    return [end[i] for i in order]
