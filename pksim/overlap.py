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


def _compute_specs(system: System, topo: Topology, works, sms: int) -> list[FlowSpec]:
    out = []
    for rank, w in enumerate(works):
        if w.flop <= 0:
            continue
        gpu = topo.locations[rank].gpu
        weight = (w.flop / w.nbytes) / _efficiency(system, w, sms)
        out.append(FlowSpec(((f"hbm[{gpu}]", 1.0), (f"tensor[{rank}]", weight)), 0.0,
                            w.nbytes, rank))
    return out


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
    baseline = _baseline(system, topo, schedule)
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
        reduced=reduced)


def _run(system, topo, comm: Schedule, plan: Plan, compute_sms: int, reduced: bool):
    """Simulate the plan; returns (time, busy per class resource, compute-only time)."""
    link_eff = system.gpu.nvlink.efficiency(comm.mechanism)
    patterns: dict = {}
    for c in plan.chunks:
        patterns.setdefault(("compute", c.key), _compute_specs(system, topo, c.work, compute_sms))
        patterns.setdefault(("comm", c.key), [flow_spec(topo, comm, t, t.nbytes, False, link_eff)
                                              for t in c.transfers])
    for i, step in enumerate(plan.tail):
        patterns[("tail", i)] = [flow_spec(topo, comm, t, t.nbytes, False, link_eff) for t in step]
    caps = capacities(topo, comm)
    peak = system.gpu.tensor.flops(comm.dtype)
    share = compute_sms / system.gpu.sm.count
    # a long tensor kernel runs at a lower, power-limited clock (calibrated)
    busiest = max((sum(w.flop for w in c.work) for c in plan.chunks), default=0.0)
    estimate = len(plan.chunks) * busiest / max(1, topo.world) / (peak * share)
    rate = peak * share * sustained_factor(system.gpu, estimate)
    for rank in range(topo.world):
        caps[f"tensor[{rank}]"] = rate
    if reduced:
        classes, members = reduce_flows(patterns, caps)
        caps = {name: caps[inst] for name, inst in members.items()}
    else:
        classes = identity_flows(patterns)
    sync = {k: max((s.latency_s for s in v), default=0.0) + system.gpu.sync.flag_latency_s
            for k, v in patterns.items() if k[0] != "compute" and v}

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
    if op in ("gemm-rs", "gemm-ar"):
        compute = gemm_time_s(gpu, shape["m"], shape["n"], shape["k"], schedule.dtype, elem)
    elif op == "ag-gemm":
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
