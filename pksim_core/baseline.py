"""The baseline every fused prediction is compared with: the library kernel (cuBLAS, or
the attention library) on every SM, then NCCL's own collective, two launches.

It depends only on the op, its shape, dtype and world, so it is computed once per
search (``cached``), not once per candidate.
"""
from __future__ import annotations

from hwmodels.sm import attention_time_s, gemm_time_s
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core.cache import BoundedCache
from pksim_core.collective_model import build, simulate
from pksim_core.kernel_contract import BASELINE_COLLECTIVE, VIRTUAL_COLLECTIVE
from pksim_core.nccl import nccl_schedule
from pksim_core.prediction import Prediction
from pksim_core.schedule import Schedule
from pksim_core.workloads import fused_ops

# One baseline per (system, op, shape, dtype, world, domains, extra). On virtual ranks (one
# GPU, where NCCL cannot run) the baseline's collective is the generated pk collective of
# pksim_core.kernel_contract.VIRTUAL_COLLECTIVE.
_BASELINES = BoundedCache(256)


def clear() -> None:
    _BASELINES.clear()


def cached(system: System, topo: Topology, schedule: Schedule) -> Prediction:
    """The baseline of ``schedule``'s op (with ``schedule`` as its overlap-none schedule)."""
    key = (id(system), schedule.op, schedule.shape, schedule.dtype, schedule.world,
           schedule.domains, schedule.extra)
    base = _BASELINES.lookup(system, key)
    if base is None:
        base = _BASELINES.store(system, key, _baseline(system, topo, schedule))
    return base.__class__(**{**base.__dict__, "schedule": schedule.with_(overlap="none")})


def _shape(schedule: Schedule) -> dict[str, int]:
    return {k: int(v) for k, v in schedule.shape}


def _baseline(system: System, topo: Topology, schedule: Schedule) -> Prediction:
    """cuBLAS (or the attention library) on every SM, then NCCL's collective."""
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
        p = fused_ops.plan(op, shape, n, elem, "direct", 1, skew)
        busiest = max((w for c in p.chunks for w in c.work), key=lambda w: w.flop)
        m, nn, k = busiest.shape
        compute = gemm_time_s(gpu, m, nn, k, schedule.dtype, elem) if busiest.flop else 0.0
        if op == "moe-combine":
            compute = busiest.nbytes / gpu.hbm.effective_Bps
    if topo.virtual:
        # virtual ranks share the one GPU: their library GEMMs run one after another
        compute *= n
    p = fused_ops.plan(op, shape, n, elem, fused_ops.ALGORITHMS[op][0], 1, skew)
    coll = BASELINE_COLLECTIVE[op]
    comm = 0.0
    if n > 1:
        nccl = nccl_schedule(system, coll, max(1, p.baseline_bytes), n, topo.domains) \
            if not topo.virtual else None
        if nccl is None:       # NCCL cannot run virtual ranks: the pk collective stands in
            algorithm, mechanism = VIRTUAL_COLLECTIVE[coll]
            nccl = Schedule(op=coll, shape=(("bytes", max(1, p.baseline_bytes)),), world=n,
                            algorithm=algorithm, mechanism=mechanism,
                            comm_sms=max(1, topo.sms_per_rank()))
        comm = simulate(build(system, nccl)).time_s
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
        depends_on_assumed=tuple(system.assumed_keys(("gpu.", "domain.", "scaleout."))),
        profile=system.profile.name)
