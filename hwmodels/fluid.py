"""Fluid flows with max-min fair sharing, on simpy.

A flow moves a number of bytes across a set of resources. ``usage`` maps each
resource to a weight: the capacity the flow consumes per byte/s of its own rate
(1 for plain traffic, 1/efficiency for protocol overhead, or the number of
identical flows a representative stands for in a reduced simulation). Active flows
share every resource by weighted max-min fairness (progressive filling), those of a
higher priority first. Rates change only when a flow starts or ends or a capacity is
changed, so the next event is one simpy timeout.

Flows of the same usage and priority always get the same rate, so the engine serves them
as one group: the group counts the bytes each of its flows has moved since it formed, and a
flow lands when that count reaches what it was at the flow's start plus the flow's bytes.
An event then costs the groups, not the flows (a cut-through ring at 576 ranks keeps tens
of thousands of flows in flight, a few hundred distinct).
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import simpy

_EPS = 1e-12


def single_flow_time_s(capacity: Mapping[str, float], usage: Mapping[str, float],
                       nbytes: float, latency_s: float = 0.0) -> float:
    """When a flow that is alone on idle resources lands: FluidEngine's answer without the
    event loop. Alone, the flow keeps its tightest resource's rate (capacity / weight) from
    start to end, so it lands ``nbytes / rate`` after its latency; the float operations are
    the engine's own (tests/hwmodels/test_fluid.py checks the two are equal)."""
    for name in usage:
        if name not in capacity:
            raise KeyError(f"flow uses unknown resource {name!r}")
    start = latency_s if latency_s > 0 else 0.0
    if nbytes <= 0 or not usage:
        return start
    rate = max(min(capacity[name] / w for name, w in usage.items()), 0.0)
    if rate <= 0:
        stuck = sorted(n for n in usage if capacity[n] <= 0)
        raise RuntimeError(f"flows cannot progress: zero-capacity resources {stuck}")
    return start + float(nbytes) / rate


@dataclass(eq=False)
class Flow:
    nbytes: float
    usage: Mapping[str, float]
    done: simpy.Event
    tags: Mapping[str, Any]
    start_s: float = 0.0
    priority: int = 0


@dataclass(eq=False)
class _FlowGroup:
    """Active flows of one usage and priority: one rate; ``served`` bytes moved by each since
    the group formed; ``heap`` (served at which it lands, order, flow), soonest first."""
    usage: Mapping[str, float]
    priority: int
    served: float = 0.0
    rate: float = 0.0
    heap: list = field(default_factory=list)


@dataclass
class FlowRecord:
    tags: Mapping[str, Any]
    start_s: float
    end_s: float
    nbytes: float


@dataclass
class FluidEngine:
    env: simpy.Environment
    capacity: Mapping[str, float]
    record: bool = False
    busy_s: dict[str, float] = field(default_factory=dict)
    records: list[FlowRecord] = field(default_factory=list)
    _groups: dict = field(default_factory=dict)  # (priority, usage) -> _Group
    _load: dict = field(default_factory=dict)    # resource -> capacity in use at the rates
    _order: Any = field(default_factory=itertools.count)
    _last_s: float = 0.0
    _version: int = 0
    _pending: bool = False

    def transfer(self, nbytes: float, usage: Mapping[str, float], latency_s: float = 0.0,
                 priority: int = 0, **tags: Any) -> simpy.Event:
        """Start a flow after ``latency_s``; the returned event fires when its last byte lands.
        A flow of higher ``priority`` takes its max-min share before any lower one (a
        GEMM's main loops before its epilogue's stores: pksim_core.fusion)."""
        done = self.env.event()
        for name in usage:
            if name not in self.capacity:
                raise KeyError(f"flow uses unknown resource {name!r}")
        flow = Flow(float(nbytes), dict(usage), done, tags, priority=priority)

        def start(_event: Any = None) -> None:
            flow.start_s = self.env.now
            if flow.nbytes <= 0 or not flow.usage:
                self._finish(flow)
                return
            self._advance()
            key = (flow.priority, frozenset(flow.usage.items()))
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _FlowGroup(flow.usage, flow.priority)
            heapq.heappush(group.heap, (group.served + flow.nbytes, next(self._order), flow))
            self._reschedule_soon()

        if latency_s > 0:
            self.env.timeout(latency_s).callbacks.append(start)
        else:
            start()
        return done

    def set_capacity(self, name: str, capacity: float) -> None:
        """Change a resource's capacity from now on (the flows on it are re-shared). The
        wake-up scheduled at the old rates stays in simpy's queue and fires as a no-op: a
        caller whose flows speed up runs its environment until its own processes end
        (``env.run(until=...)``), not until the queue is empty."""
        if name not in self.capacity:
            raise KeyError(f"unknown resource {name!r}")
        self._advance()
        self.capacity = {**self.capacity, name: float(capacity)}
        self._reschedule()

    # ---- internals -------------------------------------------------------------
    def _finish(self, flow: Flow) -> None:
        if self.record:
            self.records.append(FlowRecord(flow.tags, flow.start_s, self.env.now, flow.nbytes))
        flow.done.succeed(self.env.now)

    def _advance(self) -> None:
        """Move every group forward to now and account resource busy time."""
        dt = self.env.now - self._last_s
        self._last_s = self.env.now
        if dt <= 0:
            return
        for group in self._groups.values():
            group.served += group.rate * dt
        for name, load in self._load.items():
            self.busy_s[name] = self.busy_s.get(name, 0.0) + load * dt / self.capacity[name]

    def _reschedule_soon(self) -> None:
        """Re-share once at the end of this instant, however many flows start in it: the
        rates are a function of the set of active flows, so one pass after the last start
        gives what a pass after each would."""
        if self._pending:
            return
        self._pending = True

        def run(_event: Any) -> None:
            self._pending = False
            self._advance()
            self._reschedule()

        self.env.timeout(0).callbacks.append(run)

    def _reschedule(self) -> None:
        # Done when nothing is left, or when what is left would take less time than the
        # clock can resolve at this point (float time stops advancing otherwise).
        resolution = _EPS * max(self.env.now, 1e-6)
        for key, group in list(self._groups.items()):
            heap = group.heap
            while heap:
                left = heap[0][0] - group.served
                flow = heap[0][2]
                if not (left <= _EPS * max(1.0, flow.nbytes)
                        or (group.rate > 0 and left / group.rate <= resolution)):
                    break
                heapq.heappop(heap)
                self._finish(flow)
            if not heap:
                del self._groups[key]
        self._share()
        self._version += 1
        if not self._groups:
            return
        next_s = min((g.heap[0][0] - g.served) / g.rate if g.rate > 0 else math.inf
                     for g in self._groups.values())
        if math.isinf(next_s):
            stuck = sorted({n for g in self._groups.values() for n in g.usage
                            if self.capacity[n] <= 0})
            raise RuntimeError(f"flows cannot progress: zero-capacity resources {stuck}")
        version = self._version

        def wake(_event: Any) -> None:
            if version == self._version:
                self._advance()
                self._reschedule()

        self.env.timeout(next_s).callbacks.append(wake)

    def _share(self) -> None:
        """Rates: the groups of the highest ``priority`` first, weighted max-min fair among
        themselves on the whole capacities; each lower priority then shares what the ones
        above left (``_fill``)."""
        groups = list(self._groups.values())
        priorities = {g.priority for g in groups}
        if len(priorities) <= 1:
            self._load = self._fill(groups, self.capacity)
            return
        left = dict(self.capacity)
        self._load = {}
        for priority in sorted(priorities, reverse=True):
            load = self._fill([g for g in groups if g.priority == priority], left)
            for name, used in load.items():
                left[name] -= used
                self._load[name] = self._load.get(name, 0.0) + used

    @staticmethod
    def _fill(groups: list[_FlowGroup], capacity: Mapping[str, float]) -> dict:
        """Weighted max-min fair rates by progressive filling: raise every unfrozen
        group's rate together until a resource fills, freeze the groups on it, repeat; a
        group weighs its flows' weight times their number. Each resource's unfrozen weight
        is kept up to date as groups freeze, so one pass costs the groups' usage once plus
        the resources per level. Returns each resource's capacity in use at those rates."""
        weight: dict[str, float] = {}
        users: dict[str, list[int]] = {}
        for i, group in enumerate(groups):
            n = len(group.heap)
            for name, w in group.usage.items():
                weight[name] = weight.get(name, 0.0) + w * n
                users.setdefault(name, []).append(i)
        active = {name: len(ids) for name, ids in users.items()}   # unfrozen users
        load = dict.fromkeys(weight, 0.0)
        frozen = [False] * len(groups)
        left = len(groups)
        while left:
            levels = {name: (capacity[name] - load[name]) / w for name, w in weight.items()}
            level = max(min(levels.values()), 0.0)
            tight = [name for name, value in levels.items() if value <= level * (1 + 1e-9)]
            for name in tight:
                for i in users[name]:
                    if frozen[i]:
                        continue
                    frozen[i] = True
                    left -= 1
                    group = groups[i]
                    group.rate = level
                    n = len(group.heap)
                    for other, w in group.usage.items():
                        load[other] += w * level * n
                        active[other] -= 1
                        if active[other] == 0:
                            del weight[other]
                        else:
                            weight[other] -= w * n
        return load
