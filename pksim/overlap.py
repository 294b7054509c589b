"""Compute and communication together: the DES of fused operations.

Tensor work is a fluid flow too: its amount is the bytes it streams through HBM, it
crosses the rank's tensor resource (capacity: the dtype's peak x the share of SMs
that compute; weight: FLOP per byte / shape efficiency) and the HBM, which it shares
with the communication's own traffic. Strategies:

- ``none``: the GEMM (all SMs, library efficiency) then NCCL's collective, two
  launches: the cuBLAS + NCCL baseline every other strategy is compared with.
- ``inter-sm``: ``comm_sms`` SMs move data while the rest compute, chunk by chunk
  (one chunk per peer): a chunk is sent once computed (produce) or computed once
  arrived (consume).
- ``intra-sm``: every SM computes; its communication warps send each finished wave of
  tiles (finer chunks), issuing from all SMs and competing with the tiles' traffic. The
  GEMM kernels whose epilogue store-adds its tiles (gemm-rs, gemm-ar) hold each wave's
  compute for the time the SMs' bulk engines take to read the staged tiles out
  (``epilogue_stall_s``: the consumers wait for it before they stage the next tile), put
  those stores on the issuing GPU's memory path (``mempath``), of which the main loops
  leave only ``tensor.epilogue_overlap`` while any rank computes, and their
  read-modify-writes run at ``hbm.tile_reduce_efficiency`` (all three measured by
  validation/microbench/gemm_store_add.cu).

What a search reuses (all exact: the same computation, not an approximation):
candidates whose plan and flows are the same (``_family``: the SM count, the overlap
strategy and a chunk size past the TMA message cap change neither) share the prepared
flows, and with the same SM split the whole run; the compute-alone reference is a
sum of idle per-chunk runs, cached per plan and compute SM count. ``lower_bounds``
gives the search (``pksim.search``) two lower bounds per candidate, a cheap one and a
tighter one, so that it need not simulate what cannot win.
"""
from __future__ import annotations

import math
from typing import Iterator

import simpy

from hwmodels.errors import InfeasibleError
from hwmodels.fluid import FluidEngine
from hwmodels.sm import (GEMM_TILE, attention_efficiency, epilogue_handoff_s, gemm_efficiency,
                         reduce_memory_weight, sustained_factor, tile_reduce_memory_weight)
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim import baseline
from pksim.flows import (FlowSpec, capacities, check_feasible, flow_spec, issue_capacity,
                         issue_weight, message_bytes, move_spec)
from pksim.prediction import Prediction, TimelineEvent
from pksim.schedule import Schedule
from pksim.symmetry import identity_flows, reduce_flows
from pksim.workloads import fused
from pksim.workloads.fused import Plan, Work

MAX_CHUNKS_PER_PEER = 16
# Resource classes inside a GPU: not links (pksim.trace shows the others as link tracks).
LOCAL_RESOURCES = ("issue", "ce", "hbm", "l2", "sm", "tensor")


def _efficiency(system: System, work: Work, sms: int) -> float:
    if work.kind == "attention":
        m, _, d = work.shape
        return attention_efficiency(system.gpu, m, False)
    m, n, k = work.shape
    return gemm_efficiency(system.gpu, m, n, k, sms)


def _compute_specs(topo: Topology, works) -> list[FlowSpec]:
    """Tensor work as flows: amount = HBM bytes, weight on the tensor resource = FLOP
    per byte (the shape's efficiency lives in the rank's tensor capacity)."""
    out = []
    for rank, w in enumerate(works):
        if w.flop <= 0:
            continue
        gpu = topo.locations[rank].gpu
        out.append(FlowSpec(((f"hbm[{gpu}]", 1.0), (f"tensor[{rank}]", w.flop / w.nbytes)),
                            0.0, w.nbytes, rank))
    return out


def _tensor_caps(system: System, topo: Topology, plan: Plan, dtype: str,
                 compute_sms: int) -> dict[str, float]:
    """Each rank's tensor rate: its share of the SMs x the efficiency of its GEMM (or
    attention) shape on them x the sustained clock of a kernel that long with that many
    SMs of its GPU computing (every rank's compute SMs, for virtual ranks on one GPU:
    the communication SMs leave power to the others, ``hwmodels.sm.settled_fraction``)."""
    peak = system.gpu.tensor.flops(dtype)
    share = compute_sms / system.gpu.sm.count
    busy = compute_sms * (topo.world if topo.virtual else 1)
    caps = {}
    for rank in range(topo.world):
        works = [c.work[rank] for c in plan.chunks if c.work[rank].flop > 0]
        if not works:
            caps[f"tensor[{rank}]"] = peak * share
            continue
        eff = _efficiency(system, works[0], compute_sms)
        estimate = sum(w.flop for w in works) / (peak * share * eff)
        caps[f"tensor[{rank}]"] = peak * share * eff * sustained_factor(system.gpu, estimate, busy)
    return caps


# ---- what candidates share ------------------------------------------------------------
class _Cache(dict):
    """A small dict cache keyed by ``(id(system), ...)`` that checks the system is the
    one the entry was made for (an id can be reused once a system is freed) and drops
    its oldest entry past ``size``."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def lookup(self, system: System, key):
        hit = self.get(key)
        return hit[1] if hit is not None and hit[0] is system else None

    def store(self, system: System, key, value):
        if len(self) >= self.size:
            self.pop(next(iter(self)))
        self[key] = (system, value)
        return value


_TOPOLOGIES = _Cache(16)
_PLANS = _Cache(64)
_CACHE = _Cache(32)         # prepared flows per family
_ALONE = _Cache(512)        # compute-alone chunk durations per (plan, compute SMs)
_RUNS = _Cache(1024)        # (time, busy) of the DES per (family, SM split)


def clear_caches() -> None:
    """Forget every prepared plan, flow family, run and baseline (cold-start benchmarks)."""
    for cache in (_TOPOLOGIES, _PLANS, _CACHE, _ALONE, _RUNS):
        cache.clear()
    baseline.clear()


def _plan_key(schedule: Schedule, cpp: int) -> tuple:
    """What ``fused.plan`` depends on."""
    return (schedule.op, schedule.shape, schedule.world, schedule.domains, schedule.dtype,
            schedule.extra, schedule.algorithm, cpp, _store_add(schedule))


def _store_add(schedule: Schedule) -> bool:
    """The intra-SM kernels of gemm-rs / gemm-ar store-add each tile from the epilogue's
    shared-memory staging buffer (kernels/fused/fused.cuh, store_add_owners / _all)."""
    return schedule.overlap == "intra-sm" and schedule.op in ("gemm-rs", "gemm-ar")


def output_clear_s(system: System, topo: Topology, schedule: Schedule) -> float:
    """What the store-add kernels pay before they start: their outputs must be zero, and
    the entry point clears them on the stream (kernels/fused/entry.cuh, zero_output), one
    memset per rank (``sync.stream_launch_us`` each) writing the rank's output (gemm-ar:
    m x n; gemm-rs: its m / world rows) at the HBM's rate; virtual ranks clear every
    rank's output on their one GPU. Other kernels: 0."""
    if not _store_add(schedule):
        return 0.0
    shape = _shape(schedule)
    per_gpu = topo.world if topo.virtual else 1
    rows = shape["m"] if schedule.op == "gemm-ar" else shape["m"] / topo.world
    nbytes = per_gpu * rows * shape["n"] * schedule.element_bytes
    gpu = system.gpu
    return per_gpu * gpu.sync.stream_launch_s + nbytes / gpu.hbm.effective_Bps


def _pull(schedule: Schedule, topo: Topology) -> int:
    """The inter-SM kernels of gemm-rs (direct) and gemm-ar (two-shot), up to
    EXACT_SHIFTS_UP_TO ranks (past it the plan keeps the per-chunk push approximation):
    each owner's communication blocks pull and sum the world partials of its rows
    (kernels/fused/comm.cuh, pull_reduce; codegen.fused.KERNELS) as its tiles complete,
    i.e. during the last chunk: the number of pieces that chunk's reduction follows, one
    per wave of its tiles over the rank's SMs (at most MAX_CHUNKS_PER_PEER). 0: not a pull
    kernel (gemm-ar's one-shot and in-network forms push)."""
    if not (schedule.overlap == "inter-sm"
            and (schedule.op, schedule.algorithm) in (("gemm-rs", "direct"),
                                                      ("gemm-ar", "two-shot"))
            and schedule.world <= fused.EXACT_SHIFTS_UP_TO):
        return 0
    shape = _shape(schedule)
    tiles = math.ceil(shape["m"] / topo.world / GEMM_TILE[0]) * math.ceil(shape["n"] /
                                                                          GEMM_TILE[1])
    return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(tiles / topo.sms_per_rank())))


def _family(system: System, topo: Topology, comm: Schedule, cpp: int,
            reduced: bool) -> tuple:
    """The key of everything the flows of ``comm`` depend on. Outside one GPU the SM
    count changes only capacities (``pksim.flows.issue_weight``); the overlap strategy
    changes only capacities and the plan's chunking (``cpp``); a chunk size at or past
    the TMA message cap gives the same messages as none (``pksim.flows.message_bytes``)."""
    chunk = comm.chunk_bytes
    if chunk and message_bytes(topo, comm, math.inf) == \
            message_bytes(topo, comm.with_(chunk_bytes=0), math.inf):
        chunk = 0
    norm = comm.with_(overlap="inter-sm", chunk_bytes=chunk,
                      comm_sms=comm.comm_sms if topo.virtual else 1)
    return (id(system), norm.key(), cpp, reduced, _store_add(comm), _pull(comm, topo))


def _topology(system: System, schedule: Schedule) -> Topology:
    key = (id(system), schedule.world, schedule.domains)
    hit = _TOPOLOGIES.lookup(system, key)
    if hit is None:
        hit = _TOPOLOGIES.store(system, key, Topology.build(system, schedule.world,
                                                             schedule.domains))
    return hit


def _plan(system: System, schedule: Schedule, topo: Topology, cpp: int) -> Plan:
    key = (id(system),) + _plan_key(schedule, cpp) + (_pull(schedule, topo),)
    hit = _PLANS.lookup(system, key)
    if hit is None:
        skew = float(dict(schedule.extra).get("skew", 0.0))
        hit = _PLANS.store(system, key, fused.plan(
            schedule.op, _shape(schedule), topo.world, schedule.element_bytes,
            schedule.algorithm, cpp, skew, _store_add(schedule), _pull(schedule, topo)))
    return hit


def _flows(system, topo, comm: Schedule, plan: Plan, family: tuple, reduced: bool):
    """Flows of every chunk, grouped into symmetry classes; shared by every candidate
    of the family (see ``_family``)."""
    hit = _CACHE.lookup(system, family)
    if hit is not None:
        return hit
    link_eff = system.gpu.nvlink.efficiency(comm.mechanism)
    smem = _store_add(comm)
    patterns: dict = {}
    for c in plan.chunks:
        patterns.setdefault(("compute", c.key), _compute_specs(topo, c.work))
        if ("comm", c.key) not in patterns:
            patterns[("comm", c.key)] = _comm_specs(topo, comm, c, link_eff, smem)
    for i, step in enumerate(plan.tail):
        patterns[("tail", i)] = [flow_spec(topo, comm, t, t.nbytes, False, link_eff) for t in step]
    sync = {k: max((s.latency_s for s in v), default=0.0) + system.gpu.sync.flag_latency_s
            for k, v in patterns.items() if k[0] != "compute" and v}
    if reduced:
        probe = capacities(topo, comm.with_(comm_sms=1))
        probe.update(_tensor_caps(system, topo, plan, comm.dtype, system.gpu.sm.count))
        probe.update(_mempath_caps(topo))
        classes, members = reduce_flows(patterns, probe)
    else:
        classes = identity_flows(patterns)
        members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
    return _CACHE.store(system, family, (classes, members, sync))


def _comm_specs(topo: Topology, comm: Schedule, chunk, link_eff: float,
                smem: bool) -> list[FlowSpec]:
    """The flows of a chunk's communication: its moves (``pksim.flows.move_spec``: the
    communication blocks' rate for that shape of move, calibrated on block_moves) when
    the plan gives them, else one flow per transfer."""
    if chunk.moves:
        return [move_spec(topo, comm, m, m.payload, False, link_eff) for m in chunk.moves]
    return [_transfer_spec(topo, comm, t, link_eff, smem) for t in chunk.transfers]


def _transfer_spec(topo: Topology, comm: Schedule, t, link_eff: float,
                   from_smem: bool) -> FlowSpec:
    """The flow of transfer ``t`` (``pksim.flows.flow_spec``). ``from_smem``: a store-add
    from the epilogue's shared-memory staging buffer, whose payload is read from no
    memory: only the destination's read-modify-write reaches HBM, at the tile rate
    (``hwmodels.sm.tile_reduce_memory_weight``), and it also crosses the issuing GPU's
    memory path (``mempath``, which the main loops share: ``_run``)."""
    spec = flow_spec(topo, comm, t, t.nbytes, False, link_eff)
    if not from_smem:
        return spec
    gpu = topo.system.gpu
    src = f"hbm[{topo.locations[t.src].gpu}]"
    dst = f"hbm[{topo.locations[t.dst].gpu}]"
    usage = dict(spec.usage)
    usage[src] -= 1.0
    write = 1.0
    if t.kind == "reduce":
        write = tile_reduce_memory_weight(gpu)
        usage[dst] += write - reduce_memory_weight(gpu, False)
    path = _mempath(topo, t.src)
    usage[path] = usage.get(path, 0.0) + write
    return FlowSpec(tuple((n, w) for n, w in usage.items() if w > 1e-12), spec.latency_s,
                    spec.nbytes, spec.issuer)


def epilogue_stall_s(system: System, chunk, sms: int) -> float:
    """How long the busiest rank's ``sms`` SMs stop computing to hand a chunk's epilogue
    stores to their bulk engines (``hwmodels.sm.epilogue_handoff_s``): time not spent on
    the tensor cores."""
    per_rank: dict[int, float] = {}
    for x in chunk.transfers:
        per_rank[x.src] = per_rank.get(x.src, 0.0) + epilogue_handoff_s(
            system.gpu, x.nbytes, sms, reduce=x.kind == "reduce")
    return max(per_rank.values(), default=0.0)


def _mempath(topo: Topology, rank: int) -> str:
    return f"mempath[{topo.locations[rank].gpu}]"


def _mempath_caps(topo: Topology) -> dict[str, float]:
    """The memory path of every GPU, as fast as its HBM (what the main loops take of it
    while they run is taken in ``_run``)."""
    return {f"mempath[{g}]": topo.resources[f"hbm[{g}]"].capacity_Bps
            for g in sorted({loc.gpu for loc in topo.locations})}


def _idle_s(classes, caps) -> float:
    """How long one set of flows takes on an otherwise idle machine."""
    env = simpy.Environment()
    engine = FluidEngine(env, caps)
    for fc in classes:
        engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s)
    env.run()
    return env.now


def _compute_alone(system: System, topo: Topology, schedule: Schedule, plan: Plan, cpp: int,
                   compute_sms: int, reduced: bool) -> list[float]:
    """Per chunk, its tensor work's duration without communication. Chunks then run one
    after another, each on an idle machine, so the compute-alone time is their sum
    (the DES of the plan without its transfers, one distinct chunk at a time). The
    symmetry classes of each distinct chunk are found once per plan."""
    key = (id(system),) + _plan_key(schedule, cpp) + (_pull(schedule, topo), reduced)
    hit = _ALONE.lookup(system, key + (compute_sms,))
    if hit is not None:
        return hit
    prepared = _ALONE.lookup(system, key)
    if prepared is None:
        distinct: dict = {}                # per-rank work of a chunk -> pattern number
        order = [distinct.setdefault(c.work, len(distinct)) for c in plan.chunks]
        patterns = {i: _compute_specs(topo, work) for work, i in distinct.items()}
        if reduced:
            probe = {name: r.capacity_Bps for name, r in topo.resources.items()}
            probe.update(_tensor_caps(system, topo, plan, schedule.dtype, system.gpu.sm.count))
            classes, members = reduce_flows(patterns, probe)
        else:
            classes = identity_flows(patterns)
            members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
        prepared = _ALONE.store(system, key, (order, classes, members))
    order, classes, members = prepared
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    caps.update(_tensor_caps(system, topo, plan, schedule.dtype, compute_sms))
    class_caps = {name: caps[inst] for name, inst in members.items()}
    durations = {i: _idle_s(classes[i], class_caps) for i in classes}
    return _ALONE.store(system, key + (compute_sms,), [durations[i] for i in order])


def _shape(schedule: Schedule) -> dict[str, int]:
    return {k: int(v) for k, v in schedule.shape}


def _chunks_per_peer(schedule: Schedule, topo: Topology) -> int:
    """How finely each peer's part is cut: ``chunk_bytes`` if the schedule sets it,
    else one chunk per peer (inter-SM) or one per wave of output tiles (intra-SM)."""
    if schedule.op not in ("gemm-rs", "gemm-ar", "ag-gemm"):
        return 1
    shape = _shape(schedule)
    n = topo.world
    if schedule.chunk_bytes:
        cols = shape["k"] if schedule.op == "ag-gemm" else shape["n"]
        part = shape["m"] / n * cols * schedule.element_bytes
        return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(part / schedule.chunk_bytes)))
    if schedule.overlap != "intra-sm":
        return 1
    tiles = math.ceil(shape["m"] / n / GEMM_TILE[0]) * math.ceil(shape["n"] / GEMM_TILE[1])
    return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(tiles / topo.sms_per_rank())))


class _Setup:
    """A fused candidate, checked and planned: its topology, plan, SM split and the
    schedule its communication runs with."""

    def __init__(self, system: System, schedule: Schedule, reduced: bool = True):
        self.system, self.schedule, self.reduced = system, schedule, reduced
        topo = self.topo = _topology(system, schedule)
        if system.gpu.tensor.flops(schedule.dtype) <= 0:
            raise InfeasibleError(f"{system.name} has no {schedule.dtype} tensor rate")
        fused.check_shape(schedule.op, _shape(schedule), topo.world)
        self.baseline = baseline.cached(system, topo, schedule)
        self.launch_s = system.gpu.sync.kernel_launch_s
        if schedule.overlap == "none":
            return
        self.clear_s = output_clear_s(system, topo, schedule)
        self.cpp = _chunks_per_peer(schedule, topo)
        plan = self.plan = _plan(system, schedule, topo, self.cpp)
        sms = topo.sms_per_rank()
        if schedule.overlap == "inter-sm":
            if schedule.comm_sms >= sms:
                raise InfeasibleError(f"inter-SM overlap with {schedule.comm_sms} communication "
                                      f"SMs leaves no SM to compute (a rank has {sms})")
            self.compute_sms, self.comm = sms - schedule.comm_sms, schedule
        else:
            if schedule.mechanism not in ("tma", "multimem"):
                raise InfeasibleError("intra-SM overlap sends from the compute SMs' "
                                      "communication warps with TMA (or multimem)")
            self.compute_sms, self.comm = sms, schedule.with_(comm_sms=sms)
        kinds = {t.kind for c in plan.chunks for t in c.transfers} | \
            {t.kind for step in plan.tail for t in step}
        check_feasible(topo, self.comm, kinds)
        self.family = _family(system, topo, self.comm, self.cpp, reduced)

    def compute_alone(self) -> list[float]:
        return _compute_alone(self.system, self.topo, self.schedule, self.plan, self.cpp,
                              self.compute_sms, self.reduced)

    def flows(self):
        return _flows(self.system, self.topo, self.comm, self.plan, self.family, self.reduced)

    def class_caps(self, members: dict[str, str]) -> dict[str, float]:
        caps = capacities(self.topo, self.comm)
        caps.update(_tensor_caps(self.system, self.topo, self.plan, self.comm.dtype,
                                 self.compute_sms))
        caps.update(_mempath_caps(self.topo))
        return {name: caps[inst] for name, inst in members.items()}


def predict_fused(system: System, schedule: Schedule, reduced: bool = True,
                  record: bool = False) -> Prediction:
    setup = _Setup(system, schedule, reduced)
    base = setup.baseline
    if schedule.overlap == "none":
        if record:
            return _with_timeline(base, _baseline_timeline(setup))
        return base
    plan = setup.plan
    key = setup.family + (setup.compute_sms, setup.comm.comm_sms)
    run = None if record else _RUNS.lookup(system, key)
    timeline: tuple[TimelineEvent, ...] = ()
    if run is None:
        run = _run(setup, record)
        if record:
            timeline = run[2]
        else:
            _RUNS.store(system, key, run)
    time_s, busy = run[0], run[1]
    launch = setup.launch_s + setup.clear_s          # the outputs' clear, then the launch
    time_s += launch
    compute_alone = sum(setup.compute_alone()) + launch
    breakdown: dict[str, float] = {"clear": setup.clear_s} if setup.clear_s else {}
    for name, value in busy.items():
        cls = name.split("#")[0].split("[")[0]
        breakdown[cls] = max(breakdown.get(cls, 0.0), value)
    bound_s, bound_resource = _bound(system, plan, schedule.dtype, busy, launch)
    links = [v for c, v in breakdown.items() if c in ("nvl_out", "nvl_in", "nic_out", "nic_in")]
    return Prediction(
        schedule=schedule, system=system.name, time_s=time_s,
        bound_s=min(bound_s, time_s), bound_resource=bound_resource, alpha_beta_s=time_s,
        breakdown=dict(sorted(breakdown.items())),
        link_util=max(links) / time_s if links else 0.0, nbytes=plan.baseline_bytes,
        compute_s=compute_alone, exposed_comm_s=max(0.0, time_s - compute_alone),
        baseline_s=base.time_s, speedup=base.time_s / time_s,
        depends_on_assumed=tuple(system.assumed_keys(("gpu.", "domain.", "scaleout."))),
        reduced=reduced, notes=(plan.note,) if plan.note else (), timeline=timeline)


def _run(setup: _Setup, record: bool):
    """The DES of the plan with its communication: (time, busy seconds per class
    resource, the timeline when ``record``)."""
    plan = setup.plan
    classes, members, sync = setup.flows()
    env = simpy.Environment()
    caps = setup.class_caps(members)
    # The epilogue's stores get epilogue_overlap of the memory path while the main loops
    # run, all of it once the last tile is computed.
    paths = {name: caps[name] for name, inst in members.items() if inst.startswith("mempath[")}
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
    timeline = _timeline(setup, engine.records, stalls) if record else ()
    return env.now, engine.busy_s, timeline


# ---- lower bounds for the search ----------------------------------------------------------
def lower_bounds(system: System, schedule: Schedule) -> Iterator[float]:
    """Lower bounds on ``predict_fused(system, schedule).time_s``, each tighter than the
    last: the baseline's own time (``none``); else first, without preparing any flow,
    launch + the larger of the compute alone and the busiest rank's issue load over its
    issue capacity, then one from the prepared flows (shared by the family). Raises
    InfeasibleError as ``predict_fused`` would.

    Why they hold: a compute flow crosses only its GPU's HBM and its rank's tensor
    resource, which nothing else uses; communication adds load on the HBM, so under
    max-min sharing every compute flow runs at most as fast as without it, and chunk i's
    compute takes at least its idle time C_i. A flow of a class takes at least its
    latency + bytes x weight / capacity on every resource it crosses, so communication
    chunk i takes at least M_i (its slowest flow alone, plus the signal). The DES runs
    the compute chunks in order, the communication chunks in order, and chunk i's
    communication after its compute (produce; the reverse for consume), then the tail:
    time >= launch + max_j (C_0 + .. + C_j + M_j + .. + M_last) + tail (a two-machine
    flow shop). And no resource can be busier than the time: its total load / capacity
    (the issue resource's load is the same sum as the flows', taken over the plan's
    transfers before any flow is prepared).
    """
    setup = _Setup(system, schedule)
    if schedule.overlap == "none":
        yield setup.baseline.time_s
        return
    compute = setup.compute_alone()
    issue = _issue_load(setup) / issue_capacity(setup.topo, setup.comm)
    yield setup.launch_s + max(sum(compute), issue)
    yield setup.launch_s + _flow_bound(setup, compute)


def _issue_load(setup: _Setup) -> float:
    """The busiest rank's issue load (bytes x issue weight, as ``pksim.flows.flow_spec``
    puts it on ``issue[rank]``), summed over the plan; the same for every candidate of
    the family (outside one GPU the weight does not depend on the SM count)."""
    key = setup.family + ("issue",)
    hit = _CACHE.lookup(setup.system, key)
    if hit is None:
        topo, comm = setup.topo, setup.comm
        load: dict[int, float] = {}
        weights: dict = {}
        link_eff = setup.system.gpu.nvlink.efficiency(comm.mechanism)
        for c in setup.plan.chunks:
            for m in c.moves:
                spec = move_spec(topo, comm, m, m.payload, False, link_eff)
                w = dict(spec.usage).get(f"issue[{m.issuer}]", 0.0)
                load[m.issuer] = load.get(m.issuer, 0.0) + w * m.payload
        steps = [c.transfers for c in setup.plan.chunks if not c.moves] + list(setup.plan.tail)
        for t in (t for step in steps for t in step):
            issuer = t.dst if t.kind == "switch-reduce" else t.src
            w = weights.get((t.kind, t.nbytes))
            if w is None or topo.virtual:
                w = weights[(t.kind, t.nbytes)] = issue_weight(topo, comm, t, t.nbytes, False)
            load[issuer] = load.get(issuer, 0.0) + w * t.nbytes
        hit = _CACHE.store(setup.system, key, max(load.values(), default=0.0))
    return hit


def _flow_bound(setup: _Setup, compute: list[float]) -> float:
    plan = setup.plan
    classes, members, sync = setup.flows()
    caps = setup.class_caps(members)
    load: dict[str, float] = {}

    def least(key) -> float:
        """The least time pattern ``key`` can take (its signal included); adds its load."""
        slowest = 0.0
        for fc in classes.get(key, ()):
            drain = 0.0
            for name, weight in fc.usage:
                load[name] = load.get(name, 0.0) + weight * fc.nbytes
                drain = max(drain, weight * fc.nbytes / caps[name])
            slowest = max(slowest, fc.latency_s + drain)
        return slowest + sync.get(key, 0.0)

    comm = []
    for c in plan.chunks:
        least(("compute", c.key))
        comm.append(least(("comm", c.key)))
    tail = sum(least(("tail", i)) for i in range(len(plan.tail)))
    first, second = (compute, comm) if plan.mode == "produce" else (comm, compute)
    shop, before, after = 0.0, 0.0, sum(second)
    for a, b in zip(first, second):
        before += a
        shop = max(shop, before + after)
        after -= b
    busiest = max((v / caps[n] for n, v in load.items()), default=0.0)
    return max(shop + tail, busiest)


# ---- timelines (pksim trace) ------------------------------------------------------------
def _physical(name: str) -> str:
    return name.split("#")[0].split("[")[0]


def _work_label(work: Work, compute_sms: int) -> str:
    if work.kind == "attention":
        return "attention"
    _, n, k = work.shape
    rows = work.flop / (2.0 * n * k)
    tiles = math.ceil(rows / GEMM_TILE[0] - 1e-9) * math.ceil(n / GEMM_TILE[1])
    return f"GEMM {tiles} tiles ({tiles / compute_sms:.2g} waves)"


def compute_track(setup: _Setup) -> str:
    return f"compute SMs ({setup.compute_sms})"


def comm_track(setup: _Setup) -> str:
    s = setup.schedule
    if s.overlap == "intra-sm":
        return f"comm warps (all {setup.compute_sms} SMs, {s.mechanism})"
    return f"comm SMs ({s.comm_sms}, {s.mechanism})"


def _timeline(setup: _Setup, records, stalls=()) -> tuple[TimelineEvent, ...]:
    """Flow records of the fused DES as timeline events, shifted by the outputs' clear
    (store-add kernels) and the launch: per simulated rank a compute track (one span per
    chunk of tiles, and the epilogue's hand-off of its store-adds after it: ``stalls``) and
    a communication track, and per link class the times some transfer crosses it."""
    clear, launch = setup.clear_s, setup.clear_s + setup.launch_s
    coll = fused.BASELINE_COLLECTIVE[setup.schedule.op]
    ranks = sorted({r.tags["rank"] for r in records})
    events = [TimelineEvent(f"rank {r} / {compute_track(setup)}", "kernel launch", clear, launch)
              for r in ranks]
    if clear:
        events += [TimelineEvent(f"rank {r} / {compute_track(setup)}",
                                 "outputs cleared (memset)", 0.0, clear) for r in ranks]
    events += [TimelineEvent(f"rank {r} / {compute_track(setup)}",
                             f"chunk {i}: epilogue hands its store-adds to the bulk engines",
                             start + launch, end + launch)
               for i, start, end in stalls for r in ranks]
    for rec in records:
        tags, start, end = rec.tags, rec.start_s + launch, rec.end_s + launch
        rank, index = tags["rank"], tags["index"]
        if tags["what"] == "compute":
            work = setup.plan.chunks[index].work[rank]
            events.append(TimelineEvent(f"rank {rank} / {compute_track(setup)}",
                                        f"chunk {index}: {_work_label(work, setup.compute_sms)}",
                                        start, end, rec.nbytes))
            continue
        name = f"{coll} chunk {index}" if tags["what"] == "comm" else f"{coll} tail {index}"
        events.append(TimelineEvent(f"rank {rank} / {comm_track(setup)}", name, start, end,
                                    rec.nbytes))
        for cls in sorted({_physical(n) for n, _ in tags["crosses"]}):
            if cls not in LOCAL_RESOURCES:
                events.append(TimelineEvent(f"link {cls}", name, start, end, rec.nbytes))
    return tuple(sorted(events, key=lambda e: (e.start_s, e.track)))


def _baseline_timeline(setup: _Setup) -> tuple[TimelineEvent, ...]:
    """The baseline as two kernels on one rank: the library GEMM on every SM, then
    NCCL's collective (its own timeline is ``pksim trace --op <collective> --impl nccl``)."""
    base, launch = setup.baseline, setup.launch_s
    compute = base.breakdown.get("tensor", 0.0)
    sms = setup.topo.sms_per_rank()
    coll = fused.BASELINE_COLLECTIVE[setup.schedule.op]
    track = f"rank 0 / compute SMs (all {sms})"
    return (TimelineEvent(track, "kernel launch", 0.0, launch),
            TimelineEvent(track, "library GEMM" if "gemm" in setup.schedule.op else
                          "library kernel", launch, launch + compute),
            TimelineEvent("rank 0 / NCCL channels", "kernel launch", launch + compute,
                          2 * launch + compute),
            TimelineEvent("rank 0 / NCCL channels", f"NCCL {coll}", 2 * launch + compute,
                          base.time_s, base.nbytes))


def _with_timeline(p: Prediction, timeline: tuple[TimelineEvent, ...]) -> Prediction:
    return p.__class__(**{**p.__dict__, "timeline": timeline})


def _bound(system, plan: Plan, dtype: str, busy: dict, launch: float) -> tuple[float, str]:
    """Nothing beats the tensor work at the library's large-shape efficiency on every
    SM, nor any resource's busy time (its load / capacity)."""
    tensor = plan.total_flop / (system.gpu.tensor.gemm_efficiency *
                                system.gpu.tensor.flops(dtype))
    best, resource = tensor, "tensor"
    for name, value in busy.items():
        cls = name.split("#")[0].split("[")[0]
        if cls != "tensor" and value > best:
            best, resource = value, cls
    return launch + best, resource
