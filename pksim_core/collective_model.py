"""The collectives' model: the one assembly function, ``build``, and the discrete-event run.

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
from collections import Counter
from dataclasses import dataclass
from typing import Hashable

import simpy

from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from hwmodels.fluid import FluidEngine
from hwmodels.sm import grid_start_s
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core import nccl
from pksim_core.analytical import analyse
from pksim_core.cache import BoundedCache, topology
from pksim_core.kernel_contract import (BLOCK_THREADS, EPILOGUE_KERNELS, IN_NETWORK_CHUNKS_IN_FLIGHT,
                                   IN_NETWORK_STREAMED_OPS, in_network_chunk_bytes)
from pksim_core.mechanisms import of as mechanism_of
from pksim_core.mechanisms.copy_engine_cost import host_issue_s
from pksim_core.mechanisms.flow import (check_feasible, entry_barrier_s, extra_capacities,
                                        move_flow, phase_flag_s, phase_sync_s, resident_in_l2,
                                        transfer_flow, transfer_sync_s)
from pksim_core.prediction import Prediction, TimelineEvent
from pksim_core.program import StepProgram
from pksim_core.schedule import Schedule
from pksim_core.orbits import equal_capacities, flow_orbits
from pksim_core.symmetry import (FlowClass, FlowOrbit, classes_of, equality_pattern, identity_flows,
                            partition)
from pksim_core.workloads.collectives import COLLECTIVES, build_program, busbw_factor
from pksim_core.workloads.phases import plain

MAX_LANES = 64
LINK_CLASSES = ("nvl_out", "nvl_in", "up1", "down1", "up2", "down2", "nic_out", "nic_in")


@dataclass
class Model:
    system: System
    schedule: Schedule
    topo: Topology
    program: StepProgram
    lanes: int
    classes: dict[Hashable, list[FlowClass]]
    capacity: dict[str, float]
    sync_s: dict[Hashable, float]          # per pattern: signal after the step
    launch_s: float
    reduced: bool
    # Copy-engine collectives: when the host has issued each phase's calls, counted from the
    # first call, and how much GPU work the caller queued ahead of them (the calls issued
    # during it cost nothing): a phase cannot start before its calls are issued.
    host_issue_s: tuple[float, ...] = ()
    host_lead_s: float = 0.0
    # NCCL's back-to-back calls cannot go faster than the host issues them (nccl.launch_costs)
    host_floor_s: float = 0.0
    # A streamed kernel (the pk in-network collectives) hands each chunk from its reduce to
    # its store and on to the next chunk in program order, without flags: its steps pay no
    # signal; the last write's drain and the kernel's end are paid once, at the end.
    tail_s: float = 0.0
    # NCCL's line protocols (LL, LL128) and its NVLS loop run cut through: a step's flows
    # start once the previous step's first bytes have landed (nccl.cut_through, D41)
    cut: nccl.CutThrough | None = None

    def issued_s(self, step: int) -> float:
        """Earliest start of costed step ``step`` allowed by the host's calls."""
        if not self.host_issue_s:
            return 0.0
        return max(0.0, self.host_issue_s[min(step, len(self.host_issue_s) - 1)] - self.host_lead_s)

    def step_classes(self):
        """(step, its flow classes, what it pays after its last byte) in order. A generated
        kernel's last phase signals nobody: the kernel ends when its writes have landed."""
        steps = self.program.costed()
        for i, step in enumerate(steps):
            sync = self.sync_s[step.key]
            if self.program.phases is not None and i == len(steps) - 1 \
                    and not edge_barriers(self.topo, self.schedule):
                sync -= phase_flag_s(self.system, self.topo, self.schedule)
            yield step, self.classes[step.key], sync


def _nbytes(schedule: Schedule) -> int:
    return schedule.dim("bytes")


def build(system: System | str, schedule: Schedule, reduced: bool = True,
          host_lead_s: float = 0.0, cold: bool = False) -> Model:
    """Assemble everything a prediction needs; raises InfeasibleError with the reason.
    ``host_lead_s``: GPU work queued on the caller's stream ahead of the collective, behind
    which the host issues a copy-engine collective's calls (0: the GPU waits for every call;
    the validation harness queues an L2-flushing write). ``cold``: the inputs are in HBM, not
    in L2, however small (the caller has just written something else over the L2, as the
    validation harness does before every call); by default a working set that fits in L2 is
    served from it."""
    if isinstance(system, str):
        system = load_system(system)
    if schedule.op not in COLLECTIVES:
        raise InfeasibleError(f"unknown collective {schedule.op!r}")
    topo = topology(system, schedule.world, schedule.domains)
    nbytes = _nbytes(schedule)
    streamed = streamed_in_network(schedule)
    schedule = as_run(schedule)
    sequential = schedule.peer_order == "sequential"
    algorithm = schedule.algorithm
    if schedule.impl == "nccl":
        nccl.check(system, topo, schedule)
        algorithm = nccl.program_algorithm(schedule)
    if schedule.impl == "pk" and not plain(schedule.extra) \
            and (schedule.op, algorithm) not in EPILOGUE_KERNELS:
        raise InfeasibleError(f"a reduce op or an epilogue is implemented by the kernels of "
                              f"{', '.join(f'{o} {a}' for o, a in EPILOGUE_KERNELS)}; "
                              f"not {algorithm} {schedule.op}")
    program = build_program(schedule.op, algorithm, topo.world, nbytes,
                            schedule.root, sequential, topo.domains,
                            schedule.mechanism if schedule.impl == "pk" else None,
                            schedule.dtype, schedule.extra)
    return assemble(system, schedule, topo, program, reduced, host_lead_s, cold, streamed)


def assemble(system: System, schedule: Schedule, topo: Topology, program: StepProgram,
             reduced: bool = True, host_lead_s: float = 0.0, cold: bool = False,
             streamed: bool = False) -> Model:
    """The Model of ``program`` (steps of transfers, or a generated kernel's phases) run by
    ``schedule`` on ``topo``: what ``build`` does once it has the collective's program. A
    caller with its own traffic (pksim_core.programs' point-to-point batches) gives its program
    here; ``schedule``'s key (its ``extra`` included) must then name that traffic, since the
    prepared flows are cached by it."""
    nbytes = _nbytes(schedule)
    kinds = program.kinds()
    if schedule.impl == "pk":
        check_feasible(topo, schedule, kinds, sm_reductions=program.phases is not None)
    lanes = lanes_of(schedule, max((s.largest() for s in program.patterns().values()),
                                   default=0.0))
    if schedule.impl == "nccl":         # NVLS's copies through its buffers, chunk by chunk
        program = nccl.with_buffer_copies(program, schedule, nbytes)
    resident = resident_in_l2(topo, nbytes) and not cold
    extra = extra_capacities(topo, schedule)     # the capacities beside the topology's
    if schedule.impl == "nccl":
        extra.update(nccl.issue_capacities(system, topo, schedule))
    classes, members, sync = _flows(system, schedule, topo, program, lanes, resident, reduced)
    tail = 0.0
    if streamed:
        tail = max(sync.values(), default=0.0)
        sync = {key: 0.0 for key in sync}
    base = topo.capacities()
    class_caps = {name: extra[instance] if instance in extra else base[instance]
                  for name, instance in members.items()}
    # A kernel launched on a stream behind other work, as a caller times it with events.
    launch = system.gpu.sync.stream_launch_s
    floor = 0.0
    if schedule.impl == "nccl":
        launch, floor, _ = nccl.launch_costs(system, topo, dict(schedule.extra).get(
            "launch", nccl.DEFAULT_LAUNCH))
    elif program.phases is not None and schedule.mechanism in ("tma", "register"):
        # a generated kernel: the start of its grid (every virtual rank's blocks on one GPU)
        blocks = schedule.comm_sms * (topo.world if topo.virtual else 1)
        launch += grid_start_s(system.gpu, blocks, BLOCK_THREADS[schedule.mechanism])
    elif program.phases is not None and schedule.mechanism == "copy-engine":
        # no kernel at all: the first copy waits for the engine's setup (which ce_burst
        # measures behind queued work) where later ones pay the chain, and the first copy on
        # each further stream of a GPU (its virtual ranks' streams) its start
        launch = mechanism_of("copy-engine").launch_s(topo)
    if edge_barriers(topo, schedule):      # ranks in separate processes meet first (D43)
        launch += entry_barrier_s(system, topo)
    cut = nccl.cut_through(schedule, program, sync) if schedule.impl == "nccl" else None
    return Model(system, schedule, topo, program, lanes, classes, class_caps, sync, launch,
                 reduced, _host_issue(system, schedule, program), host_lead_s, floor, tail,
                 cut)


def lanes_of(schedule: Schedule, largest: float) -> int:
    """Pipeline lanes of a schedule whose largest transfer or move is ``largest`` bytes:
    one per ``chunk_bytes`` of it, at most MAX_LANES."""
    if schedule.chunk_bytes and largest > schedule.chunk_bytes:
        return min(MAX_LANES, math.ceil(largest / schedule.chunk_bytes))
    return 1


def streamed_in_network(schedule: Schedule) -> bool:
    """Whether ``schedule`` runs the streamed in-network kernel (collectives/in_network.cuh):
    pk's in-network all-reduce, reduce-scatter and all-gather. Its chunks are the model's
    lanes, one in flight per step (pipeline_depth 1): chunk i + 1's multimem.ld_reduce runs
    beside chunk i's multimem.st."""
    return (schedule.impl == "pk" and schedule.algorithm == "in-network"
            and schedule.mechanism == "multimem"
            and schedule.op in IN_NETWORK_STREAMED_OPS)


def as_run(schedule: Schedule) -> Schedule:
    """``schedule`` as its kernel runs it: a streamed in-network schedule names the kernel's
    chunk and its chunks in flight (kernel_contract); any other schedule as it is."""
    if not streamed_in_network(schedule):
        return schedule
    return schedule.with_(chunk_bytes=in_network_chunk_bytes(schedule.comm_sms,
                                                             schedule.chunk_bytes),
                          pipeline_depth=IN_NETWORK_CHUNKS_IN_FLIGHT)


def _host_issue(system: System, schedule: Schedule, program: StepProgram) -> tuple[float, ...]:
    """When the host has issued each phase's calls: a generated copy-engine collective's
    (pksim_core.mechanisms.copy_engine_cost.host_issue_s); empty for kernels (one launch)."""
    if schedule.mechanism != "copy-engine" or schedule.impl != "pk" or program.phases is None:
        return ()
    return host_issue_s(system.gpu.sync, schedule.algorithm, program)


FLOWS = BoundedCache(64)        # flow classes per (system, schedule, residency): see _flows
ORBITS = BoundedCache(64)       # flow orbits per (topology shape, schedule but its SM count, ...)
# _instance_caps and equal_capacities per (system, schedule): each holds every resource of
# the topology (65,000 at 9,216 ranks), and is quick to make again
INSTANCE_CAPS = BoundedCache(8)
PARTITIONS = BoundedCache(64)   # the classes of the orbits per (orbits' key, equality pattern)


def _flows(system: System, schedule: Schedule, topo: Topology, program: StepProgram, lanes: int,
           resident: bool, reduced: bool):
    """Flows per traffic pattern, reduced to classes, and the signal time after each step.

    Cached per (system, schedule, residency). The SM count enters the flows (a move's issue
    weight and its blocks' latency: pksim_core.mechanisms.flow.move_flow), not which of them are
    alike: the orbits of the topology's symmetries are kept per schedule without it, so a
    search over SM counts finds them once (keyed without it, the flows of the first SM count
    asked stood for every other one, and a prediction depended on what ran before it:
    docs/decisions/D76.md).
    """
    key = (id(system), schedule.key(), reduced, resident)
    hit = FLOWS.lookup(system, key)
    if hit is not None:
        return hit
    link_eff = (nccl.link_efficiency(system, schedule) if schedule.impl == "nccl"
                else system.gpu.nvlink.efficiency(schedule.mechanism))
    steps = program.patterns()
    # what each pattern costs: a generated kernel's moves (pksim_core.workloads.phases), else the
    # transfers, each costed as one copy or store-add by its source
    items = {pkey: step.moves() if step.moves() is not None else step.transfers()
             for pkey, step in steps.items()}
    instance_caps, equal_caps = _kept_instance_caps(system, topo, schedule)
    if reduced:     # one flow per orbit of the topology's symmetries (pksim_core.orbits)
        # (the item lists by identity, as pksim_core.orbits keeps them: kept alive by the entry);
        # by the topology's shape and which capacities are equal, not by the system: the
        # guessed-figure swings of one prediction simulate it again on ~50 changed systems
        okey = (topo.shape(), schedule.with_(comm_sms=1).key(), resident,
                tuple((k, id(its)) for k, its in items.items()), equal_caps)
        found = ORBITS.lookup(ORBITS, okey)
        if found is None:
            orbit_of, relabel = flow_orbits(topo, instance_caps, items)
            found = ORBITS.store(ORBITS, okey, ((orbit_of, relabel), items,
                                                _orbit_sizes(orbit_of, items)))
        (orbit_of, relabel), _, counted = found
    else:
        orbit_of, relabel = {pkey: list(range(len(its))) for pkey, its in items.items()}, []
        counted = _orbit_sizes(orbit_of, items)
    orbits, sync = {}, {}
    for pkey, step in steps.items():
        sizes, firsts, queued = counted[pkey]
        reps = [items[pkey][i] for i in firsts]
        if step.moves() is not None:
            specs = [move_flow(topo, schedule, m, m.payload / lanes, resident, link_eff,
                               queued[m.issuer] if m.engine != "sm" else 1)
                     for m in reps]
            # an orbit's moves cross paths of the same latencies: its first stands for it
            sync[pkey] = phase_sync_s(system, topo, schedule, reps, step.joins)
        else:
            specs = [transfer_flow(topo, schedule, t, t.nbytes / lanes, resident, link_eff)
                     for t in reps]
            if schedule.impl == "nccl":    # the paths' latency, and Simple's flag
                sync[pkey] = nccl.step_sync_s(system, schedule, specs)
            else:
                sync[pkey] = transfer_sync_s(system, specs)
        orbits[pkey] = [FlowOrbit(pkey, i, sizes[i], spec) for i, spec in zip(firsts, specs)]
    if reduced:
        classes, members = _classes(found, okey, orbits, instance_caps, relabel)
    else:
        patterns = {pkey: [o.spec for o in os] for pkey, os in orbits.items()}
        classes = identity_flows(patterns)
        members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
    return FLOWS.store(system, key, (classes, members, sync))


LAST_CLASSES = BoundedCache(64)  # per orbits: the last flows' classes (_classes)


def _classes(found, okey, orbits: dict, instance_caps: dict, relabel):
    """The classes of the orbits' flows and each class resource's instance. The refinement
    compares the numbers only for equality: its partition is kept per equality pattern.
    The classes themselves are kept per orbits with the flows and the capacities they were
    made from: the guessed-figure swings change one figure at a time, most of which leave
    every flow and capacity as it was, and then get the same classes without working out
    the pattern (equal flows and capacities give equal classes: classes_of reads no more)."""
    last = LAST_CLASSES.lookup(found, okey)
    if last is not None and last[0] == orbits \
            and [instance_caps.get(n) for n in last[1]] == last[2]:
        return last[3]
    pat = (okey, equality_pattern(orbits, instance_caps))
    part = PARTITIONS.lookup(found, pat)
    if part is None:
        part = PARTITIONS.store(found, pat, partition(orbits, instance_caps, relabel))
    made = classes_of(orbits, part)
    used = list(dict.fromkeys(n for os in orbits.values() for o in os for n, _ in o.spec.usage))
    LAST_CLASSES.store(found, okey, (orbits, used, [instance_caps.get(n) for n in used], made))
    return made


def _orbit_sizes(orbit_of: dict, items: dict) -> dict:
    """Per pattern: each orbit's size by its first item, the firsts in order, and the copy
    commands each rank queues (its items not moved by SMs): what the orbits alone decide,
    kept with them for every system that shares them."""
    out = {}
    for pkey, of in orbit_of.items():
        sizes = Counter(of)
        queued = Counter(getattr(m, "issuer", None) for m in items[pkey]
                         if getattr(m, "engine", "sm") != "sm")
        out[pkey] = (sizes, sorted(sizes), queued)
    return out


def _kept_instance_caps(system: System, topo: Topology, schedule: Schedule) -> tuple[dict, tuple]:
    """``_instance_caps`` and its ``equal_capacities``, made once per (system, shape,
    schedule without its SM count): at 4,096 ranks 0.5 s a build, asked for by every candidate
    of a search."""
    # (NCCL's channels set its issue capacities: their count stays in the key)
    key = (id(system), topo.world, topo.domains,
           (schedule if schedule.impl == "nccl" else schedule.with_(comm_sms=1)).key())
    hit = INSTANCE_CAPS.lookup(system, key)
    if hit is None:
        extra = _instance_extra(system, topo, schedule)
        caps = dict(topo.capacities())
        caps.update(extra)
        hit = INSTANCE_CAPS.store(system, key, (caps, equal_capacities(caps, topo, extra)))
    return hit


def edge_barriers(topo: Topology, schedule: Schedule) -> bool:
    """Whether a pk kernel meets every rank at its entry and its exit: ranks in separate
    processes (kernels/collectives/collective.cuh run(), ``edges``) run a grid barrier across
    all ranks before the first phase and after the last (docs/decisions/D43.md); the
    algorithms without a generated kernel (rhd, tree, hierarchical) are held to the same, as
    any kernel whose peers' buffers must be ready. Virtual ranks share one launch and need
    neither; copy-engine schedules leave it to their barrier kernels (not modelled). The exit
    is the last step's own signal (Model.step_classes keeps a phase kernel's; a streamed
    in-network kernel's is its tail, Model.tail_s)."""
    return (schedule.impl == "pk" and not topo.virtual and topo.world > 1
            and schedule.mechanism in ("tma", "register", "multimem"))


def _instance_caps(system: System, topo: Topology, schedule: Schedule) -> dict[str, float]:
    """Capacities used only to tell resources apart in the symmetry reduction; the SM
    count is fixed so that it does not enter the cache key."""
    caps = dict(topo.capacities())
    caps.update(_instance_extra(system, topo, schedule))
    return caps


def _instance_extra(system: System, topo: Topology, schedule: Schedule) -> dict[str, float]:
    """The entries of ``_instance_caps`` that are not the topology's."""
    extra = extra_capacities(topo, schedule.with_(comm_sms=1))
    if schedule.impl == "nccl":
        extra.update(nccl.issue_capacities(system, topo, schedule))
    return extra


def simulate(model: Model, record: bool = False) -> Prediction:
    """Run the model on the fluid engine; return the prediction (with the analytical
    bound and alpha-beta time beside it)."""
    if model.cut is not None:
        time_s, busy_s, records = _run_cut_through(model, record)
    elif model.lanes == 1:
        time_s, busy_s, records = _run_sequential(model, record)
    else:
        time_s, busy_s, records = _run_lanes(model, record)
    time_s = _ended_s(model, time_s)
    breakdown: dict[str, float] = {}
    for name, busy in busy_s.items():
        cls = name.cls
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
                                       r.start_s, r.end_s, r.nbytes) for r in records)
    return Prediction(
        schedule=model.schedule, system=model.system.name, time_s=time_s,
        bound_s=analysis.bound_s, bound_resource=analysis.bound_resource,
        alpha_beta_s=analysis.alpha_beta_s, breakdown=dict(sorted(breakdown.items())),
        link_util=link_util, nbytes=nbytes, algbw_GBps=algbw,
        busbw_GBps=algbw * busbw_factor(model.schedule.op, model.topo.world),
        exposed_comm_s=time_s, depends_on_assumed=tuple(assumed_inputs(model)),
        reduced=model.reduced, timeline=timeline, profile=model.system.profile.name)


def simulated_time(model: Model) -> float:
    """``simulate(model).time_s`` alone, by the same runs in the same order, without what
    only the rest of the prediction needs (busy times, the bound, the analysis): what the
    guessed-figure swings of ``pksim predict`` ask of each changed system."""
    if model.cut is not None:
        time_s = _run_cut_through(model, False)[0]
    elif model.lanes == 1:
        time_s = _run_sequential(model, False, busy_times=False)[0]
    else:
        time_s = _run_lanes(model, False)[0]
    return _ended_s(model, time_s)


def _ended_s(model: Model, time_s: float) -> float:
    """The run's end with the host's issue, NCCL's floor and a streamed kernel's tail."""
    if model.host_issue_s:
        time_s = max(time_s, model.issued_s(len(model.host_issue_s) - 1))
    return max(time_s, model.host_floor_s) + model.tail_s


def _run_lanes(model: Model, record: bool):
    """Pipelined lanes: lane j runs step s after lane j - depth has finished it."""
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
    return env.now, engine.busy_s, engine.records


def _run_cut_through(model: Model, record: bool):
    """Lanes whose steps cut through (Model.cut): a lane starts its steps' flows together,
    step s after the path latencies of the steps before it (its first bytes can only follow
    theirs), except after a hand-off step, whose flows must end and be signalled first; the
    hand-offs cut the lane into segments, which run in lane order where the cut says so;
    lane j starts once lane j - depth has ended. All flows share the resources, so a link
    carrying several steps at once carries their sum: the time is the larger of the latency
    chain and the busiest resource's work, not their sum."""
    env = simpy.Environment()
    engine = FluidEngine(env, model.capacity, record=record)
    steps = list(model.step_classes())
    depth = max(1, model.schedule.pipeline_depth)
    cut = model.cut
    segments = len(cut.handoffs & set(range(len(steps) - 1))) + 1
    done = [[env.event() for _ in range(segments)] for _ in range(model.lanes)]

    def lane(j: int):
        yield env.timeout(model.launch_s)
        if j >= depth:
            yield done[j - depth][-1]
        events, offset, k = [], cut.lead_s, 0
        if cut.in_order and j > 0:
            yield done[j - 1][0]
        for s, (step, classes, _sync) in enumerate(steps):
            for fc in classes:
                events.append(engine.transfer(fc.nbytes, dict(fc.usage), offset + fc.latency_s,
                                              rank=fc.issuer, step=s, lane=j,
                                              pattern=step.key[0]))
            offset += max((fc.latency_s for fc in classes), default=0.0)
            if s in cut.handoffs and s < len(steps) - 1:
                yield env.all_of(events)
                done[j][k].succeed()
                events, offset, k = [], cut.handoff_s, k + 1
                if cut.in_order and j > 0:
                    yield done[j - 1][k]
        yield env.all_of(events)
        if cut.tail_s > 0:
            yield env.timeout(cut.tail_s)
        done[j][-1].succeed()

    for j in range(model.lanes):
        env.process(lane(j))
    env.run()
    return env.now, engine.busy_s, engine.records


def _run_step(classes: list[FlowClass], capacity, record: bool, step: int, key):
    """One step on an idle network: (duration, busy seconds, records from time 0)."""
    env = simpy.Environment()
    engine = FluidEngine(env, capacity, record=record)
    for fc in classes:
        engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s,
                        rank=fc.issuer, step=step, lane=0, pattern=key[0])
    env.run()
    return env.now, engine.busy_s, engine.records


STEP_RUNS = BoundedCache(256)   # one step on an idle network, by what it runs (_idle_step)


def _idle_step(classes: list[FlowClass], capacity: dict, step: int, key):
    """``_run_step`` without records, kept by its input: the flows and the capacities of the
    resources they use (the engine reads no other). The swings of ``pksim predict`` run the
    same schedule on systems with one figure changed, most of which leave a step's flows
    and capacities as they were; the run is then the one before, exactly."""
    used = {n for fc in classes for n, _ in fc.usage}
    content = (tuple((fc.usage, fc.latency_s, fc.nbytes) for fc in classes),
               tuple(sorted((n, capacity[n]) for n in used)))
    hit = STEP_RUNS.lookup(STEP_RUNS, content)
    if hit is None:
        hit = STEP_RUNS.store(STEP_RUNS, content, _run_step(classes, capacity, False, 0, key))
    return hit


def _run_sequential(model: Model, record: bool, busy_times: bool = True):
    """One lane: every step starts on an idle network, so a step's duration depends
    only on its traffic pattern. Each distinct pattern runs once on the fluid engine;
    repeats reuse it (exact, and what makes 576-rank rings cheap). Without ``busy_times``
    the resources' busy seconds are not added up (empty)."""
    memo: dict = {}
    now = model.launch_s
    busy: dict[str, float] = {}
    records = []
    for s, (step, classes, sync_s) in enumerate(model.step_classes()):
        now = max(now, model.issued_s(s))
        if record:
            memo[step.key] = _run_step(classes, model.capacity, record, s, step.key)
        elif step.key not in memo:
            memo[step.key] = _idle_step(classes, model.capacity, s, step.key)
        duration, step_busy, step_records = memo[step.key]
        if busy_times:
            for name, value in step_busy.items():
                busy[name] = busy.get(name, 0.0) + value
        for r in step_records:
            records.append(r.__class__(r.tags, r.start_s + now, r.end_s + now, r.nbytes))
        now += duration + sync_s
    return now, busy, records


def assumed_inputs(model: Model) -> list[str]:
    """The guessed figures (roadmap, estimate, assumed) this prediction used."""
    used = {n.cls for classes in model.classes.values() for fc in classes
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
        prefixes += ["gpu.transfer.", "profile."]
    return model.system.assumed_keys(tuple(prefixes))
