"""Lower bounds for the search (``pksim.search``): two per fused candidate, a cheap one and
a tighter one, so that it need not simulate what cannot win; and the bound with its binding
resource that a fused prediction reports."""
from __future__ import annotations

from typing import Iterator

from hwmodels.system import System
from hwmodels.topology import resource
from pksim_core.mechanisms.flow import issue_capacity, move_flow, transfer_issue_weight
from pksim_core.fusion.flows import FLOWS
from pksim_core.fusion.setup import Setup
from pksim_core.schedule import Schedule
from pksim_core.workloads.fused_ops import ChunkPlan


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
    setup = Setup(system, schedule)
    if schedule.overlap == "none":
        yield setup.baseline.time_s
        return
    compute = setup.compute_alone()
    issue = _issue_load(setup) / issue_capacity(setup.topo, setup.comm)
    yield setup.launch_s + max(sum(compute), issue)
    yield setup.launch_s + _flow_bound(setup, compute)


def _issue_load(setup: Setup) -> float:
    """The busiest rank's issue load (bytes x issue weight, as ``pksim_core.mechanisms.flow.transfer_flow``
    puts it on ``issue[rank]``), summed over the plan; the same for every candidate of
    the family (outside one GPU the weight does not depend on the SM count)."""
    key = setup.family + ("issue",)
    hit = FLOWS.lookup(setup.system, key)
    if hit is None:
        topo, comm = setup.topo, setup.comm
        load: dict[int, float] = {}
        weights: dict = {}
        link_eff = setup.system.gpu.nvlink.efficiency(comm.mechanism)
        for c in setup.plan.chunks:
            for m in c.moves:
                spec = move_flow(topo, comm, m, m.payload, False, link_eff)
                w = dict(spec.usage).get(resource("issue", m.issuer), 0.0)
                load[m.issuer] = load.get(m.issuer, 0.0) + w * m.payload
        steps = [c.transfers for c in setup.plan.chunks if not c.moves] + list(setup.plan.tail)
        for t in (t for step in steps for t in step):
            issuer = t.dst if t.kind == "switch-reduce" else t.src
            w = weights.get((t.kind, t.nbytes))
            if w is None or topo.virtual:
                w = weights[(t.kind, t.nbytes)] = transfer_issue_weight(topo, comm, t, t.nbytes, False)
            load[issuer] = load.get(issuer, 0.0) + w * t.nbytes
        hit = FLOWS.store(setup.system, key, max(load.values(), default=0.0))
    return hit


def _flow_bound(setup: Setup, compute: list[float]) -> float:
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


def resource_bound(system, plan: ChunkPlan, dtype: str, busy: dict, launch: float) -> tuple[float, str]:
    """Nothing beats the tensor work at the library's large-shape efficiency on every
    SM, nor any resource's busy time (its load / capacity)."""
    tensor = plan.total_flop / (system.gpu.tensor.gemm_efficiency *
                                system.gpu.tensor.flops(dtype))
    best, resource = tensor, "tensor"
    for name, value in busy.items():
        cls = name.cls
        if cls != "tensor" and value > best:
            best, resource = value, cls
    return launch + best, resource
