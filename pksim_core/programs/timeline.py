"""Running a program's tasks: the host issues launches in order, the GPU runs each task on its
lanes (streams) in order once its dependencies are done (docs/design/programs.md; docs/
decisions/D46.md).

- Host: each task's launches cost ``sync.launch_api_us`` of host time one after another, and
  a task cannot start before the host has issued it. A host read (``.item()``, a host-sync
  op) is a copy on its stream: it waits until everything issued before it on that stream (its
  lanes) and its dependencies are done, then costs a copy's issue (``copy_api_us``), the copy
  (``stream_launch_us``) and the host's wake-up (``host_sync_us``); the host issues nothing
  until it returns, while work on other streams (NCCL's asynchronous calls) goes on.
- GPU: a task holds its lanes from start to end; each lane runs its tasks in issue order (a
  CUDA stream), a task waits for its dependencies on other lanes (events). The baseline has one
  lane (and NCCL's own stream for the calls the reference makes asynchronously: ``async``);
  pksim's best a compute lane and a communication lane, a fused kernel holding both.
- Sharing: while communication-only tasks run, a compute-only task runs on the SMs they leave
  (its rate is 1 - their SMs / the GPU's SMs); a task's duration is its time alone at rate 1.
  The HBM a collective shares with an overlapped kernel is not modelled (docs/decisions/D46.md).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwmodels.system import System

EPS = 1e-15


@dataclass(frozen=True)
class ProgramTask:
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


def run_tasks(system: System, tasks: list[ProgramTask]) -> list[Span]:
    """Start and end of every task (tasks in issue order, dependencies earlier)."""
    return run_until(system, tasks)[0]


def run_until(system: System, tasks: list[ProgramTask], host_s: float = 0.0,
              settled: Callable[[int], bool] | None = None
              ) -> tuple[list[Span], tuple[int, float] | None]:
    """``run_tasks`` with the host's clock at ``host_s`` before the first issue, stopping at
    the first task ``j`` issued once every task before it has ended for which ``settled(j)``
    holds: then the spans of the tasks before it and (j, its issue time). From such a task on
    the run is that of the tasks from it on alone, started at its issue time (pksim's best
    compares plans that differ in a few tasks this way, docs/decisions/D61.md)."""
    api = system.gpu.sync.launch_api_s
    read_s = host_read_s(system)
    sms_total = system.gpu.sm.count
    n = len(tasks)
    issued: list[float] = []
    host = host_s

    def issue() -> None:
        """Issue tasks in order until a host read, which blocks the host until it returns."""
        nonlocal host
        while len(issued) < n:
            task = tasks[len(issued)]
            if task.host_reads:
                issued.append(host)
                return
            host += task.launches * api
            issued.append(host)

    queues: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        for lane in task.lanes:
            queues.setdefault(lane, []).append(i)
    head = dict.fromkeys(queues, 0)
    busy: dict[str, int] = {}
    left: dict[int, float] = {}
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    spans: list[Span | None] = [None] * n
    issue()
    now = issued[0] if issued else 0.0
    cursor = 0              # issue times rise in order: the first task not issued by ``now``
    while len(end) < n:
        while cursor < len(issued) and issued[cursor] <= now + EPS:
            if settled is not None and len(end) == cursor and settled(cursor):
                return [s for s in spans if s is not None], (cursor, issued[cursor])
            cursor += 1
        for i in sorted({queues[lane][head[lane]] for lane in queues
                         if head[lane] < len(queues[lane])}):
            task = tasks[i]
            if (i < len(issued) and issued[i] <= now + EPS
                    and all(queues[ln][head[ln]] == i and ln not in busy for ln in task.lanes)
                    and all(d in end and end[d] <= now + EPS for d in task.deps)):
                start[i] = now
                left[i] = task.duration_s + task.host_reads * read_s
                for ln in task.lanes:
                    busy[ln] = i
                    head[ln] += 1
        if not left:
            if cursor >= len(issued):
                raise RuntimeError("program schedule stalled (a dependency on a later task)")
            now = issued[cursor]
            continue
        taken = sum(tasks[i].sms for i in left if tasks[i].kind == "comm")
        rate = {i: (max(0.05, 1.0 - taken / sms_total) if tasks[i].kind == "compute"
                    else 1.0) for i in left}
        step = min(left[i] / rate[i] for i in left)
        if cursor < len(issued):
            step = min(step, issued[cursor] - now)
        for i in list(left):
            left[i] -= step * rate[i]
        now += step
        for i in [i for i in left if left[i] <= 1e-12 * tasks[i].duration_s + 1e-18]:
            del left[i]
            end[i] = now
            spans[i] = Span(i, issued[i], start[i], now)
            for ln in tasks[i].lanes:
                busy.pop(ln, None)
            if tasks[i].host_reads:          # the host returns and issues what follows
                host = now
                issue()
    return [s for s in spans if s is not None], None
