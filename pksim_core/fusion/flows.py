"""The flows of a fused candidate: its tensor work as flows on each rank's tensor resource
and HBM, its communication's moves and transfers (a store-add from the epilogue's staging
buffer also crosses the issuing GPU's memory path, ``mempath``), grouped into symmetry
classes once per family (``FLOWS``, shared by every candidate of the family).
"""
from __future__ import annotations

from hwmodels.sm import (attention_efficiency, gemm_efficiency, reduce_memory_weight,
                         sustained_factor, tile_reduce_memory_weight)
from hwmodels.system import System
from hwmodels.topology import Topology, resource
from pksim_core.cache import BoundedCache
from pksim_core.mechanisms.flow import (FlowSpec, capacities, move_flow, transfer_flow,
                                   transfer_sync_s)
from pksim_core.fusion.plans import store_add
from pksim_core.schedule import Schedule
from pksim_core.symmetry import identity_flows, reduce_flows
from pksim_core.workloads.fused_ops import ChunkPlan, Work

FLOWS = BoundedCache(32)        # prepared flows per family (and its issue load: pksim_core.fusion.bounds)


def _efficiency(system: System, work: Work, sms: int) -> float:
    if work.kind == "attention":
        m, _, d = work.shape
        return attention_efficiency(system.gpu, m, False)
    m, n, k = work.shape
    return gemm_efficiency(system.gpu, m, n, k, sms)


def compute_specs(topo: Topology, works) -> list[FlowSpec]:
    """Tensor work as flows: amount = HBM bytes, weight on the tensor resource = FLOP
    per byte (the shape's efficiency lives in the rank's tensor capacity)."""
    out = []
    for rank, w in enumerate(works):
        if w.flop <= 0:
            continue
        gpu = topo.locations[rank].gpu
        usage = ((resource("hbm", gpu), 1.0), (resource("tensor", rank), w.flop / w.nbytes))
        out.append(FlowSpec(usage, 0.0, w.nbytes, rank))
    return out


def tensor_caps(system: System, topo: Topology, plan: ChunkPlan, dtype: str,
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
            caps[resource("tensor", rank)] = peak * share
            continue
        eff = _efficiency(system, works[0], compute_sms)
        estimate = sum(w.flop for w in works) / (peak * share * eff)
        sustained = sustained_factor(system.gpu, estimate, busy)
        caps[resource("tensor", rank)] = peak * share * eff * sustained
    return caps


def prepared_flows(system, topo, comm: Schedule, plan: ChunkPlan, family: tuple, reduced: bool):
    """Flows of every chunk, grouped into symmetry classes; shared by every candidate
    of the family (see ``family``)."""
    hit = FLOWS.lookup(system, family)
    if hit is not None:
        return hit
    link_eff = system.gpu.nvlink.efficiency(comm.mechanism)
    smem = store_add(comm)
    patterns: dict = {}
    for c in plan.chunks:
        patterns.setdefault(("compute", c.key), compute_specs(topo, c.work))
        if ("comm", c.key) not in patterns:
            patterns[("comm", c.key)] = _comm_specs(topo, comm, c, link_eff, smem)
    for i, step in enumerate(plan.tail):
        patterns[("tail", i)] = [transfer_flow(topo, comm, t, t.nbytes, False, link_eff)
                                 for t in step]
    sync = {k: transfer_sync_s(system, v) for k, v in patterns.items()
            if k[0] != "compute" and v}
    if reduced:
        probe = capacities(topo, comm.with_(comm_sms=1))
        probe.update(tensor_caps(system, topo, plan, comm.dtype, system.gpu.sm.count))
        probe.update(mempath_caps(topo))
        classes, members = reduce_flows(patterns, probe)
    else:
        classes = identity_flows(patterns)
        members = {n: n for specs in patterns.values() for s in specs for n, _ in s.usage}
    return FLOWS.store(system, family, (classes, members, sync))


def _comm_specs(topo: Topology, comm: Schedule, chunk, link_eff: float,
                smem: bool) -> list[FlowSpec]:
    """The flows of a chunk's communication: its moves (``pksim_core.mechanisms.flow.move_flow``: the
    communication blocks' rate for that shape of move, calibrated on block_moves) when
    the plan gives them, else one flow per transfer."""
    if chunk.moves:
        return [move_flow(topo, comm, m, m.payload, False, link_eff) for m in chunk.moves]
    return [_transfer_spec(topo, comm, t, link_eff, smem) for t in chunk.transfers]


def _transfer_spec(topo: Topology, comm: Schedule, t, link_eff: float,
                   from_smem: bool) -> FlowSpec:
    """The flow of transfer ``t`` (``pksim_core.mechanisms.flow.transfer_flow``). ``from_smem``: a store-add
    from the epilogue's shared-memory staging buffer, whose payload is read from no
    memory: only the destination's read-modify-write reaches HBM, at the tile rate
    (``hwmodels.sm.tile_reduce_memory_weight``), and it also crosses the issuing GPU's
    memory path (``mempath``, which the main loops share: ``run_plan``)."""
    spec = transfer_flow(topo, comm, t, t.nbytes, False, link_eff)
    if not from_smem:
        return spec
    gpu = topo.system.gpu
    src = resource("hbm", topo.locations[t.src].gpu)
    dst = resource("hbm", topo.locations[t.dst].gpu)
    usage = dict(spec.usage)
    usage[src] -= 1.0
    write = 1.0
    if t.kind == "reduce":
        write = tile_reduce_memory_weight(gpu)
        usage[dst] += write - reduce_memory_weight(gpu, False)
    path = mempath(topo, t.src)
    usage[path] = usage.get(path, 0.0) + write
    return FlowSpec(tuple((n, w) for n, w in usage.items() if w > 1e-12), spec.latency_s,
                    spec.nbytes, spec.issuer)


def mempath(topo: Topology, rank: int) -> str:
    return resource("mempath", topo.locations[rank].gpu)


def mempath_caps(topo: Topology) -> dict[str, float]:
    """The memory path of every GPU, as fast as its HBM (what the main loops take of it
    while they run is taken in ``run_plan``)."""
    return {resource("mempath", g): topo.resources[resource("hbm", g)].capacity_Bps
            for g in sorted({loc.gpu for loc in topo.locations})}
