"""The discrete-event runs of a fused candidate: its plan with its communication (compute
and communication chunk by chunk, produce or consume, then the tail), and the compute alone
(a sum of idle per-chunk runs, cached per plan and compute SM count).
"""
from __future__ import annotations

import simpy

from hwmodels.fluid import FluidEngine
from pksim_core.mechanisms import epilogue_handoff_s
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core.cache import BoundedCache
from pksim_core.fusion.flows import compute_specs, tensor_caps
from pksim_core.fusion.plans import plan_key, pull_pieces
from pksim_core.fusion.timeline import plan_timeline
from pksim_core.schedule import Schedule
from pksim_core.symmetry import identity_flows, reduce_flows
from pksim_core.workloads.fused_ops import ChunkPlan

ALONE = BoundedCache(512)       # compute-alone chunk durations per (plan, compute SMs)


def epilogue_stall_s(system: System, chunk, sms: int) -> float:
    """How long the busiest rank's ``sms`` SMs stop computing to hand a chunk's epilogue
    stores to their bulk engines (``pksim_core.mechanisms.epilogue_handoff_s``): time not spent on
    the tensor cores."""
    per_rank: dict[int, float] = {}
    for x in chunk.transfers:
        per_rank[x.src] = per_rank.get(x.src, 0.0) + epilogue_handoff_s(
            system.gpu, x.nbytes, sms, reduce=x.kind == "reduce")
    return max(per_rank.values(), default=0.0)


def _idle_s(classes, caps) -> float:
    """How long one set of flows takes on an otherwise idle machine."""
    env = simpy.Environment()
    engine = FluidEngine(env, caps)
    for fc in classes:
        engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s)
    env.run()
    return env.now


def compute_alone(system: System, topo: Topology, schedule: Schedule, plan: ChunkPlan, chunks_per_peer: int,
                   compute_sms: int, reduced: bool) -> list[float]:
    """Per chunk, its tensor work's duration without communication. Chunks then run one
    after another, each on an idle machine, so the compute-alone time is their sum
    (the DES of the plan without its transfers, one distinct chunk at a time). The
    symmetry classes of each distinct chunk are found once per plan."""
    key = (id(system),) + plan_key(schedule, chunks_per_peer) + (pull_pieces(schedule, topo), reduced)
    hit = ALONE.lookup(system, key + (compute_sms,))
    if hit is not None:
        return hit
    prepared = ALONE.lookup(system, key)
    if prepared is None:
        distinct: dict = {}                # per-rank work of a chunk -> pattern number
        order = [distinct.setdefault(c.work, len(distinct)) for c in plan.chunks]
        patterns = {i: compute_specs(topo, work) for work, i in distinct.items()}
        if reduced:
            probe = {name: r.capacity_Bps for name, r in topo.resources.items()}
            probe.update(tensor_caps(system, topo, plan, schedule.dtype, system.gpu.sm.count))
            classes, members = reduce_flows(patterns, probe)
        else:
            classes = identity_flows(patterns)
            members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
        prepared = ALONE.store(system, key, (order, classes, members))
    order, classes, members = prepared
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    caps.update(tensor_caps(system, topo, plan, schedule.dtype, compute_sms))
    class_caps = {name: caps[inst] for name, inst in members.items()}
    durations = {i: _idle_s(classes[i], class_caps) for i in classes}
    return ALONE.store(system, key + (compute_sms,), [durations[i] for i in order])


def run_plan(setup, record: bool):
    """The DES of the plan with its communication: (time, busy seconds per class
    resource, the timeline when ``record``)."""
    plan = setup.plan
    classes, members, sync = setup.flows()
    env = simpy.Environment()
    caps = setup.class_caps(members)
    # The epilogue's stores get epilogue_overlap of the memory path while the main loops
    # run, all of it once the last tile is computed.
    paths = {name: caps[name] for name, inst in members.items() if inst.cls == "mempath"}
    share = setup.system.gpu.tensor.epilogue_overlap
    engine = FluidEngine(env, {**caps, **{name: share * c for name, c in paths.items()}},
                         record=record)
    n = len(plan.chunks)
    computed = [env.event() for _ in range(n)]
    arrived = [env.event() for _ in range(n)]

    # ... and the main loops are served before them (their share is what the path leaves)
    first = 1 if paths else 0

    def run(key, index):
        events = [engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s,
                                  priority=first if key[0] == "compute" else 0,
                                  rank=fc.issuer, what=key[0], index=index, crosses=fc.usage)
                  for fc in classes.get(key, [])]
        yield env.all_of(events)
        if key in sync:
            yield env.timeout(sync[key])

    stall = [epilogue_stall_s(setup.system, c, setup.compute_sms) if paths else 0.0
             for c in plan.chunks]
    stalls: list[tuple[int, float, float]] = []        # (chunk, start, end), for the timeline

    def compute():
        for i, c in enumerate(plan.chunks):
            if plan.mode == "consume":
                yield arrived[i]
            yield from run(("compute", c.key), i)
            computed[i].succeed()
            if stall[i] > 0:
                stalls.append((i, env.now, env.now + stall[i]))
                yield env.timeout(stall[i])
        for name, capacity in paths.items():
            engine.set_capacity(name, capacity)

    def communicate():
        for i, c in enumerate(plan.chunks):
            if plan.mode == "produce":
                yield computed[i]
            yield from run(("comm", c.key), i)
            arrived[i].succeed()

    def finish(computing):
        yield env.all_of(computed + arrived + [computing])
        for i in range(len(plan.tail)):
            yield from run(("tail", i), i)

    computing = env.process(compute())
    env.process(communicate())
    # Run until the plan is done, not until the queue is empty: a capacity raised between
    # two of the engine's wake-ups leaves a stale one behind (hwmodels.fluid.set_capacity).
    env.run(until=env.process(finish(computing)))
    timeline = plan_timeline(setup, engine.records, stalls) if record else ()
    return env.now, engine.busy_s, timeline
