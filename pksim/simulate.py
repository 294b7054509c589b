"""The one assembly function, ``build``, and the discrete-event run of a collective.

``build(system, schedule)`` turns a schedule into a Model: the topology, the
algorithm's steps, and for each traffic pattern its flows (one per equivalence
class when ``reduced``). ``simulate`` runs the Model on the fluid engine: each
pipeline lane walks the steps in order; a step starts its flows after their path
latency, ends when the last byte lands, then pays the signal to the receiver
(one path latency plus the flag latency). With ``chunk_bytes`` the data splits
into lanes, ``pipeline_depth`` of them in flight at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable

import simpy

from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from hwmodels.fluid import FluidEngine
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim import nccl
from pksim.flows import (capacities, check_feasible, flow_spec, program_kinds,
                         resident_in_l2)
from pksim.prediction import Prediction, TimelineEvent
from pksim.program import Program
from pksim.schedule import Schedule
from pksim.symmetry import FlowClass, identity_flows, reduce_flows
from pksim.workloads.collectives import COLLECTIVES, build_program, busbw_factor

MAX_LANES = 64
LINK_CLASSES = ("nvl_out", "nvl_in", "up1", "down1", "up2", "down2", "nic_out", "nic_in")


@dataclass
class Model:
    system: System
    schedule: Schedule
    topo: Topology
    program: Program
    lanes: int
    classes: dict[Hashable, list[FlowClass]]
    capacity: dict[str, float]
    sync_s: dict[Hashable, float]          # per pattern: signal after the step
    launch_s: float
    reduced: bool

    def step_classes(self):
        for step in self.program.steps:
            yield step, self.classes[step.key], self.sync_s[step.key]


def _nbytes(schedule: Schedule) -> int:
    return schedule.dim("bytes")


def build(system: System | str, schedule: Schedule, reduced: bool = True) -> Model:
    """Assemble everything a prediction needs; raises InfeasibleError with the reason."""
    if isinstance(system, str):
        system = load_system(system)
    if schedule.op not in COLLECTIVES:
        raise InfeasibleError(f"unknown collective {schedule.op!r}")
    topo = Topology.build(system, schedule.world, schedule.domains)
    nbytes = _nbytes(schedule)
    sequential = schedule.peer_order == "sequential"
    algorithm = schedule.algorithm
    if schedule.impl == "nccl":
        nccl.check(system, topo, schedule)
        algorithm = nccl.program_algorithm(schedule)
    program = build_program(schedule.op, algorithm, topo.world, nbytes,
                            schedule.root, sequential, topo.domains)
    kinds = program_kinds(program)
    if schedule.impl == "pk":
        check_feasible(topo, schedule, kinds)
    largest = max((t.nbytes for s in program.patterns().values() for t in s.transfers()),
                  default=0.0)
    lanes = 1
    if schedule.chunk_bytes and largest > schedule.chunk_bytes:
        lanes = min(MAX_LANES, math.ceil(largest / schedule.chunk_bytes))
    resident = resident_in_l2(topo, nbytes)
    link_eff = (nccl.link_efficiency(system, schedule) if schedule.impl == "nccl"
                else system.gpu.nvlink.efficiency(schedule.mechanism))
    caps = capacities(topo, schedule)
    if schedule.impl == "nccl":
        caps.update(nccl.issue_capacities(system, topo, schedule))
    patterns = {}
    sync = {}
    flag = system.gpu.sync.flag_latency_s
    for key, step in program.patterns().items():
        specs = [flow_spec(topo, schedule, t, t.nbytes / lanes, resident, link_eff)
                 for t in step.transfers()]
        patterns[key] = specs
        if schedule.impl == "nccl":
            sync[key] = nccl.step_latency(system, topo, schedule)
            specs[:] = [s.__class__(s.usage, 0.0, s.nbytes, s.issuer) for s in specs]
        else:
            sync[key] = max((s.latency_s for s in specs), default=0.0) + flag
    if reduced:
        classes, class_caps = reduce_flows(patterns, caps)
    else:
        classes, class_caps = identity_flows(patterns), caps
    launch = system.gpu.sync.kernel_launch_s
    if schedule.impl == "nccl":
        launch += nccl.base_latency(schedule)
    return Model(system, schedule, topo, program, lanes, classes, class_caps, sync, launch,
                 reduced)


def _physical(name: str) -> str:
    """'nvl_out#3' or 'nvl_out[3]' -> 'nvl_out'."""
    return name.split("#")[0].split("[")[0]


def simulate(model: Model, record: bool = False) -> Prediction:
    """Run the model on the fluid engine; return the prediction (with the analytical
    bound and alpha-beta time beside it)."""
    from pksim.analytical import analyse

    env = simpy.Environment()
    engine = FluidEngine(env, model.capacity, record=record)
    steps = list(model.step_classes())
    depth = max(1, model.schedule.pipeline_depth)
    done = [[env.event() for _ in steps] for _ in range(model.lanes)]

    def lane(j: int):
        yield env.timeout(model.launch_s)
        for s, (step, classes, sync_s) in enumerate(steps):
            if j >= depth:
                yield done[j - depth][s]
            events = [engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s,
                                      rank=fc.issuer, step=s, lane=j, pattern=step.key[0])
                      for fc in classes]
            yield env.all_of(events)
            if sync_s > 0:
                yield env.timeout(sync_s)
            done[j][s].succeed()

    for j in range(model.lanes):
        env.process(lane(j))
    env.run()
    time_s = env.now
    breakdown: dict[str, float] = {}
    for name, busy in engine.busy_s.items():
        cls = _physical(name)
        breakdown[cls] = max(breakdown.get(cls, 0.0), busy)
    links = [busy for cls, busy in breakdown.items() if cls in LINK_CLASSES]
    link_util = max(links) / time_s if links and time_s > 0 else 0.0
    analysis = analyse(model)
    nbytes = _nbytes(model.schedule)
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    timeline = ()
    if record:
        timeline = tuple(TimelineEvent(f"rank {r.tags['rank']} / lane {r.tags['lane']}",
                                       f"{r.tags['pattern']} step {r.tags['step']}",
                                       r.start_s, r.end_s, r.nbytes) for r in engine.records)
    return Prediction(
        schedule=model.schedule, system=model.system.name, time_s=time_s,
        bound_s=analysis.bound_s, bound_resource=analysis.bound_resource,
        alpha_beta_s=analysis.alpha_beta_s, breakdown=dict(sorted(breakdown.items())),
        link_util=link_util, nbytes=nbytes, algbw_GBps=algbw,
        busbw_GBps=algbw * busbw_factor(model.schedule.op, model.topo.world),
        exposed_comm_s=time_s, depends_on_assumed=tuple(assumed_inputs(model)),
        reduced=model.reduced, timeline=timeline)


def assumed_inputs(model: Model) -> list[str]:
    """The guessed figures (roadmap, estimate, assumed, override) this prediction used."""
    used = {_physical(n) for classes in model.classes.values() for fc in classes
            for n, _ in fc.usage}
    prefixes = ["gpu.sync.", "gpu.sm."]
    if used & {"nvl_out", "nvl_in"}:
        prefixes.append("gpu.nvlink.")
    if any(u.startswith(("sw", "up", "down", "nvls")) for u in used):
        prefixes.append("domain.")
    if used & {"nic_out", "nic_in"}:
        prefixes.append("scaleout.")
    if "hbm" in used:
        prefixes.append("gpu.hbm.")
    if "l2" in used:
        prefixes.append("gpu.l2.")
    if "ce" in used:
        prefixes.append("gpu.copy_engine.")
    if "issue" in used:
        prefixes.append("gpu.transfer.")
    return model.system.assumed_keys(tuple(prefixes))


def predict(system: System | str, schedule: Schedule, reduced: bool = True,
            record: bool = False) -> Prediction:
    return simulate(build(system, schedule, reduced), record=record)
