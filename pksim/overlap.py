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
  tiles (finer chunks), issuing from all SMs and competing with the tiles' traffic.
"""
from __future__ import annotations

import math

import simpy

from hwmodels.errors import InfeasibleError
from hwmodels.fluid import FluidEngine
from hwmodels.sm import (GEMM_TILE, attention_efficiency, gemm_efficiency,
                         sustained_factor)
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim.flows import FlowSpec, capacities, check_feasible, flow_spec
from pksim.prediction import Prediction
from pksim.schedule import Schedule
from pksim.symmetry import identity_flows, reduce_flows
from pksim.workloads import fused
from pksim.workloads.fused import Plan, Work

MAX_CHUNKS_PER_PEER = 16


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
    attention) shape on them x the sustained clock of a kernel that long."""
    peak = system.gpu.tensor.flops(dtype)
    share = compute_sms / system.gpu.sm.count
    caps = {}
    for rank in range(topo.world):
        works = [c.work[rank] for c in plan.chunks if c.work[rank].flop > 0]
        if not works:
            caps[f"tensor[{rank}]"] = peak * share
            continue
        eff = _efficiency(system, works[0], compute_sms)
        estimate = sum(w.flop for w in works) / (peak * share * eff)
        caps[f"tensor[{rank}]"] = peak * share * eff * sustained_factor(system.gpu, estimate)
    return caps


_CACHE: dict = {}


def _flows(system: System, topo: Topology, comm: Schedule, plan: Plan, reduced: bool):
    """Flows of every chunk, grouped into symmetry classes; cached across candidates
    that differ only in their SM count (which changes capacities, not the flows)."""
    key = (id(system), (comm if topo.virtual else comm.with_(comm_sms=1)).key(), reduced)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is system:
        return hit[1]
    link_eff = system.gpu.nvlink.efficiency(comm.mechanism)
    patterns: dict = {}
    for c in plan.chunks:
        patterns.setdefault(("compute", c.key), _compute_specs(topo, c.work))
        patterns.setdefault(("comm", c.key), [flow_spec(topo, comm, t, t.nbytes, False, link_eff)
                                              for t in c.transfers])
    for i, step in enumerate(plan.tail):
        patterns[("tail", i)] = [flow_spec(topo, comm, t, t.nbytes, False, link_eff) for t in step]
    sync = {k: max((s.latency_s for s in v), default=0.0) + system.gpu.sync.flag_latency_s
            for k, v in patterns.items() if k[0] != "compute" and v}
    if reduced:
        probe = capacities(topo, comm.with_(comm_sms=1))
        probe.update(_tensor_caps(system, topo, plan, comm.dtype, system.gpu.sm.count))
        classes, members = reduce_flows(patterns, probe)
    else:
        classes = identity_flows(patterns)
        members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
    if len(_CACHE) > 32:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (system, (classes, members, sync))
    return classes, members, sync


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


def predict_fused(system: System, schedule: Schedule, reduced: bool = True) -> Prediction:
    topo = Topology.build(system, schedule.world, schedule.domains)
    if system.gpu.tensor.flops(schedule.dtype) <= 0:
        raise InfeasibleError(f"{system.name} has no {schedule.dtype} tensor rate")
    fused.check_shape(schedule.op, _shape(schedule), topo.world)
    baseline = _cached_baseline(system, topo, schedule)
    if schedule.overlap == "none":
        return baseline
    skew = float(dict(schedule.extra).get("skew", 0.0))
    plan = fused.plan(schedule.op, _shape(schedule), topo.world, schedule.element_bytes,
                      schedule.algorithm, _chunks_per_peer(schedule, topo), skew)
    sms = topo.sms_per_rank()
    if schedule.overlap == "inter-sm":
        if schedule.comm_sms >= sms:
            raise InfeasibleError(f"inter-SM overlap with {schedule.comm_sms} communication SMs "
                                  f"leaves no SM to compute (a rank has {sms})")
        compute_sms, comm = sms - schedule.comm_sms, schedule
    else:
        if schedule.mechanism not in ("tma", "multimem"):
            raise InfeasibleError("intra-SM overlap sends from the compute SMs' "
                                  "communication warps with TMA (or multimem)")
        compute_sms, comm = sms, schedule.with_(comm_sms=sms)
    kinds = {t.kind for c in plan.chunks for t in c.transfers} | \
        {t.kind for step in plan.tail for t in step}
    check_feasible(topo, comm, kinds)
    time_s, busy, compute_alone = _run(system, topo, comm, plan, compute_sms, reduced)
    launch = system.gpu.sync.kernel_launch_s
    time_s += launch
    compute_alone += launch
    breakdown: dict[str, float] = {}
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
        baseline_s=baseline.time_s, speedup=baseline.time_s / time_s,
        depends_on_assumed=tuple(system.assumed_keys(("gpu.", "domain.", "scaleout."))),
        reduced=reduced, notes=(plan.note,) if plan.note else ())


def _run(system, topo, comm: Schedule, plan: Plan, compute_sms: int, reduced: bool):
    """Simulate the plan; returns (time, busy per class resource, compute-only time)."""
    classes, members, sync = _flows(system, topo, comm, plan, reduced)
    instance_caps = capacities(topo, comm)
    instance_caps.update(_tensor_caps(system, topo, plan, comm.dtype, compute_sms))
    caps = {name: instance_caps[inst] for name, inst in members.items()}

    def simulate(with_comm: bool):
        env = simpy.Environment()
        engine = FluidEngine(env, caps)
        n = len(plan.chunks)
        computed = [env.event() for _ in range(n)]
        arrived = [env.event() for _ in range(n)]

        def run(key):
            events = [engine.transfer(fc.nbytes, dict(fc.usage), fc.latency_s)
                      for fc in classes.get(key, [])]
            yield env.all_of(events)
            if with_comm and key in sync:
                yield env.timeout(sync[key])

        def compute():
            for i, c in enumerate(plan.chunks):
                if plan.mode == "consume" and with_comm:
                    yield arrived[i]
                yield from run(("compute", c.key))
                computed[i].succeed()

        def communicate():
            for i, c in enumerate(plan.chunks):
                if plan.mode == "produce":
                    yield computed[i]
                if with_comm:
                    yield from run(("comm", c.key))
                arrived[i].succeed()

        def finish():
            yield env.all_of(computed + arrived)
            if with_comm:
                for i in range(len(plan.tail)):
                    yield from run(("tail", i))

        env.process(compute())
        env.process(communicate())
        env.process(finish())
        env.run()
        return env.now, engine.busy_s

    time_s, busy = simulate(True)
    alone, _ = simulate(False)
    return time_s, busy, alone


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


_BASELINES: dict = {}


def _cached_baseline(system: System, topo: Topology, schedule: Schedule) -> Prediction:
    """The baseline depends only on the op, its shape, dtype and world: computed once
    per search, not once per candidate."""
    key = (id(system), schedule.op, schedule.shape, schedule.dtype, schedule.world,
           schedule.domains, schedule.extra)
    hit = _BASELINES.get(key)
    if hit is None or hit[0] is not system:
        if len(_BASELINES) > 256:
            _BASELINES.pop(next(iter(_BASELINES)))
        hit = (system, _baseline(system, topo, schedule))
        _BASELINES[key] = hit
    base = hit[1]
    return base.__class__(**{**base.__dict__, "schedule": schedule.with_(overlap="none")})


def _baseline(system: System, topo: Topology, schedule: Schedule) -> Prediction:
    """cuBLAS (or the attention library) on every SM, then NCCL's collective."""
    from pksim.search import nccl_schedule
    from pksim.simulate import predict
    from hwmodels.sm import attention_time_s, gemm_time_s

    shape = _shape(schedule)
    n = topo.world
    gpu = system.gpu
    elem = schedule.element_bytes
    op = schedule.op
    skew = float(dict(schedule.extra).get("skew", 0.0))
    if op in ("gemm-rs", "gemm-ar", "ag-gemm"):
        compute = gemm_time_s(gpu, shape["m"], shape["n"], shape["k"], schedule.dtype, elem)
    elif op == "ring-attention":
        # all-gather K/V, then the local queries against the whole sequence
        s = shape["seq"]
        compute = attention_time_s(gpu, shape["batch"], shape["heads"], s, shape["head_dim"],
                                   False, schedule.dtype, elem) / n
    elif op == "ulysses-attention":
        compute = attention_time_s(gpu, shape["batch"], shape["heads"] // n, shape["seq"],
                                   shape["head_dim"], False, schedule.dtype, elem)
    else:
        p = fused.plan(op, shape, n, elem, "direct", 1, skew)
        busiest = max((w for c in p.chunks for w in c.work), key=lambda w: w.flop)
        m, nn, k = busiest.shape
        compute = gemm_time_s(gpu, m, nn, k, schedule.dtype, elem) if busiest.flop else 0.0
        if op == "moe-combine":
            compute = busiest.nbytes / gpu.hbm.effective_Bps
    p = fused.plan(op, shape, n, elem, fused.ALGORITHMS[op][0], 1, skew)
    coll = fused.BASELINE_COLLECTIVE[op]
    comm = 0.0
    if n > 1:
        nccl = nccl_schedule(system, coll, max(1, p.baseline_bytes), n, topo.domains) \
            if not topo.virtual else None
        if nccl is None:       # NCCL cannot run virtual ranks: the pk ring stands in
            nccl = Schedule(op=coll, shape=(("bytes", max(1, p.baseline_bytes)),), world=n,
                            algorithm="ring" if coll != "all-to-all" else "direct",
                            mechanism="register", comm_sms=max(1, topo.sms_per_rank()))
        comm = predict(system, nccl).time_s
        if op == "ulysses-attention":
            comm *= 4 / 3          # q, k, v in; the output (a third of that) back
    launch = gpu.sync.kernel_launch_s
    time_s = 2 * launch + compute + comm
    return Prediction(
        schedule=schedule.with_(overlap="none"), system=system.name, time_s=time_s,
        bound_s=launch + max(compute, comm),
        bound_resource="tensor" if compute >= comm else "nccl",
        alpha_beta_s=time_s, breakdown={"tensor": compute, "nccl": comm}, link_util=0.0,
        nbytes=p.baseline_bytes, compute_s=compute + launch, exposed_comm_s=comm + launch,
        baseline_s=time_s, speedup=1.0,
        depends_on_assumed=tuple(system.assumed_keys(("gpu.", "domain.", "scaleout."))))
