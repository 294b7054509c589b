"""Fluid flows with max-min fair sharing, on simpy.

A flow moves a number of bytes across a set of resources. ``usage`` maps each
resource to a weight: the capacity the flow consumes per byte/s of its own rate
(1 for plain traffic, 1/efficiency for protocol overhead, or the number of
identical flows a representative stands for in a reduced simulation). Active flows
share every resource by weighted max-min fairness (progressive filling), those of a
higher priority first. Rates change only when a flow starts or ends or a capacity is
changed, so the next event is one simpy timeout.
"""
from __future__ import annotations

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
    remaining: float = 0.0
    rate: float = 0.0
    start_s: float = 0.0
    priority: int = 0


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
    flows: list[Flow] = field(default_factory=list)
    busy_s: dict[str, float] = field(default_factory=dict)
    records: list[FlowRecord] = field(default_factory=list)
    _last_s: float = 0.0
    _version: int = 0

    def transfer(self, nbytes: float, usage: Mapping[str, float], latency_s: float = 0.0,
                 priority: int = 0, **tags: Any) -> simpy.Event:
        """Start a flow after ``latency_s``; the returned event fires when its last byte lands.
        A flow of higher ``priority`` takes its max-min share before any lower one (a
        GEMM's main loops before its epilogue's stores: pksim.fused)."""
        done = self.env.event()
        for name in usage:
            if name not in self.capacity:
                raise KeyError(f"flow uses unknown resource {name!r}")
        flow = Flow(float(nbytes), dict(usage), done, tags, remaining=float(nbytes),
                    priority=priority)

        def start(_event: Any = None) -> None:
            flow.start_s = self.env.now
            if flow.nbytes <= 0 or not flow.usage:
                self._finish(flow)
                return
            self._advance()
            self.flows.append(flow)
            self._reschedule()

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
        """Move every active flow forward to now and account resource busy time."""
        dt = self.env.now - self._last_s
        self._last_s = self.env.now
        if dt <= 0:
            return
        for flow in self.flows:
            flow.remaining -= flow.rate * dt
            for name, weight in flow.usage.items():
                self.busy_s[name] = (self.busy_s.get(name, 0.0)
                                     + flow.rate * weight * dt / self.capacity[name])

    def _reschedule(self) -> None:
        # Done when nothing is left, or when what is left would take less time than the
        # clock can resolve at this point (float time stops advancing otherwise).
        resolution = _EPS * max(self.env.now, 1e-6)
        finished = [f for f in self.flows if f.remaining <= _EPS * max(1.0, f.nbytes)
                    or (f.rate > 0 and f.remaining / f.rate <= resolution)]
        if finished:
            self.flows = [f for f in self.flows if f not in finished]
            for flow in finished:
                self._finish(flow)
        self._share()
        self._version += 1
        if not self.flows:
            return
        next_s = min(f.remaining / f.rate if f.rate > 0 else math.inf for f in self.flows)
        if math.isinf(next_s):
            stuck = sorted({n for f in self.flows for n in f.usage if self.capacity[n] <= 0})
            raise RuntimeError(f"flows cannot progress: zero-capacity resources {stuck}")
        version = self._version

        def wake(_event: Any) -> None:
            if version == self._version:
                self._advance()
                self._reschedule()

        self.env.timeout(next_s).callbacks.append(wake)

    def _share(self) -> None:
        """Rates: the flows of the highest ``priority`` first, weighted max-min fair among
        themselves on the whole capacities; each lower priority then shares what the ones
        above left (``_fill``)."""
        priorities = {f.priority for f in self.flows}
        if len(priorities) <= 1:
            self._fill(self.flows, self.capacity)
            return
        left = dict(self.capacity)
        for priority in sorted(priorities, reverse=True):
            group = [f for f in self.flows if f.priority == priority]
            self._fill(group, left)
            for flow in group:
                for name, w in flow.usage.items():
                    left[name] -= w * flow.rate

    @staticmethod
    def _fill(flows: list[Flow], capacity: Mapping[str, float]) -> None:
        """Weighted max-min fair rates by progressive filling: raise every unfrozen
        flow's rate together until a resource fills, freeze the flows on it, repeat.
        Each resource's unfrozen weight is kept up to date as flows freeze, so one pass
        costs the flows' usage once plus the resources per level."""
        weight: dict[str, float] = {}
        users: dict[str, list[int]] = {}
        for i, flow in enumerate(flows):
            for name, w in flow.usage.items():
                weight[name] = weight.get(name, 0.0) + w
                users.setdefault(name, []).append(i)
        active = {name: len(ids) for name, ids in users.items()}   # unfrozen users
        frozen_load = dict.fromkeys(weight, 0.0)
        frozen = [False] * len(flows)
        left = len(flows)
        while left:
            levels = {name: (capacity[name] - frozen_load[name]) / w
                      for name, w in weight.items()}
            level = max(min(levels.values()), 0.0)
            tight = [name for name, value in levels.items() if value <= level * (1 + 1e-9)]
            for name in tight:
                for i in users[name]:
                    if frozen[i]:
                        continue
                    frozen[i] = True
                    left -= 1
                    flow = flows[i]
                    flow.rate = level
                    for other, w in flow.usage.items():
                        frozen_load[other] += w * level
                        active[other] -= 1
                        if active[other] == 0:
                            del weight[other]
                        else:
                            weight[other] -= w
