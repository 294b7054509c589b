"""The schedule space of a collective on a system, and the search over it.

The space: every algorithm of the op x every mechanism the hardware allows x a few
communication-SM counts x chunk sizes (for the pipelined chain/ring algorithms) x
peer order (for the direct ones). Infeasible points are dropped with their reason
kept; the rest are simulated and ranked by predicted time.
"""
from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim import nccl
from pksim.prediction import Prediction
from pksim.schedule import MECHANISMS, Schedule
from pksim.simulate import predict
from pksim.workloads.collectives import algorithms_for

COMM_SMS = (4, 8, 16, 32, 64)
FUSED_COMM_SMS = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
CHUNKS = (0, 1 << 20, 4 << 20)
PIPELINED = ("ring", "tree", "hierarchical")
# Past this world size the search leaves out what is slow to simulate and never wins
# there (predict still runs it on request): patterns with one flow per ordered pair
# of ranks (n^2 flows to prepare), and pipelined chunks (a ring of hundreds of ranks
# splits into many symmetry classes, and overlapping lanes cannot reuse a step's time).
LARGE_WORLD = 128


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Prediction, ...]
    infeasible: tuple[tuple[str, str], ...]     # (label, reason)
    candidates: int


def nccl_schedule(system: System, op: str, nbytes: int, world: int | None = None,
                  domains: int = 1) -> Schedule:
    """The schedule NCCL itself would pick for this call."""
    topo = Topology.build(system, world, domains)
    algorithm, protocol = nccl.choose(system, topo, op, nbytes)
    chunk = 512 << 10 if protocol == "Simple" else 0
    return Schedule(op=op, shape=(("bytes", nbytes),), world=topo.world, domains=domains,
                    impl="nccl", algorithm=algorithm, mechanism="register", protocol=protocol,
                    comm_sms=nccl.CHANNELS, chunk_bytes=chunk,
                    pipeline_depth=8 if chunk else 1)


def fused_space(system: System, op: str, shape: dict[str, int], world: int | None = None,
                domains: int = 1, dtype: str = "bf16", overlaps: tuple[str, ...] = (),
                algorithms: tuple[str, ...] = (), mechanisms: tuple[str, ...] = (),
                comm_sms: tuple[int, ...] = (), skew: float = 0.0) -> list[Schedule]:
    """Candidates for a compute + communication op: every overlap strategy x its
    communication algorithm x mechanism x communication SMs (inter-SM only)."""
    from pksim.workloads.fused import ALGORITHMS
    topo = Topology.build(system, world, domains)
    sms = topo.sms_per_rank()
    sm_counts = comm_sms or tuple(c for c in FUSED_COMM_SMS if c < sms)
    chunk_opts = (0, 16 << 20, 4 << 20, 1 << 20) if op in ("gemm-rs", "gemm-ar", "ag-gemm") else (0,)
    extra = (("skew", skew),) if skew else ()
    base = dict(op=op, shape=tuple(sorted(shape.items())), world=topo.world, domains=domains,
                dtype=dtype, extra=extra)
    out = []
    for overlap in overlaps or ("none", "inter-sm", "intra-sm"):
        if overlap == "none":
            out.append(Schedule(**base, overlap="none", algorithm=ALGORITHMS[op][0],
                                mechanism="register", comm_sms=1))
            continue
        for alg in algorithms or ALGORITHMS[op]:
            for mech in mechanisms or ("tma", "register", "multimem"):
                if (alg == "in-network") != (mech == "multimem"):
                    continue
                if overlap == "intra-sm" and mech == "register":
                    continue
                counts = sm_counts if overlap == "inter-sm" else (1,)
                for c in counts:
                    for chunk in chunk_opts:
                        out.append(Schedule(**base, overlap=overlap, algorithm=alg,
                                            mechanism=mech, comm_sms=c, chunk_bytes=chunk))
    return out


def space(system: System, op: str, nbytes: int, world: int | None = None,
          domains: int = 1, algorithms: tuple[str, ...] = (), mechanisms: tuple[str, ...] = (),
          comm_sms: tuple[int, ...] = (), chunks: tuple[int, ...] = ()) -> list[Schedule]:
    """Candidate pk schedules (feasibility is checked when they are simulated)."""
    topo = Topology.build(system, world, domains)
    n = topo.world
    sms = topo.sms_per_rank()
    algs = algorithms or tuple(a for a in algorithms_for(op)
                               if a != "hierarchical" or domains > 1)
    mechs = mechanisms or MECHANISMS
    sm_counts = comm_sms or tuple(sorted({c for c in COMM_SMS if c <= sms} | {sms}))
    out = []
    for alg in algs:
        if not algorithms and n > LARGE_WORLD and alg in ("direct", "two-shot"):
            continue
        for mech in mechs:
            if (alg == "in-network") != (mech == "multimem"):
                continue
            for c in (sm_counts if mech != "copy-engine" else (1,)):
                chunk_opts = chunks or (CHUNKS if alg in PIPELINED and n <= LARGE_WORLD
                                        else (0,))
                for chunk in chunk_opts:
                    if chunk and chunk >= nbytes:
                        continue
                    orders = ("ring", "sequential") if alg in ("direct", "two-shot") else ("ring",)
                    for order in orders:
                        out.append(Schedule(op=op, shape=(("bytes", nbytes),), world=n,
                                            domains=domains, algorithm=alg, mechanism=mech,
                                            comm_sms=c, chunk_bytes=chunk,
                                            pipeline_depth=2 if chunk else 1, peer_order=order))
    return out


def _run(args: tuple[System, Schedule]) -> Prediction | tuple[str, str]:
    system, schedule = args
    try:
        return predict(system, schedule)
    except InfeasibleError as exc:
        return (schedule.label(), str(exc))


def search(system: System, candidates: list[Schedule], executor: Executor | None = None
           ) -> SearchResult:
    """Simulate every candidate; rank the feasible ones by predicted time."""
    jobs = [(system, s) for s in candidates]
    results = list(executor.map(_run, jobs)) if executor else [_run(j) for j in jobs]
    ranked = sorted((r for r in results if isinstance(r, Prediction)),
                    key=lambda p: (p.time_s, p.schedule.comm_sms, p.schedule.label()))
    infeasible = tuple(r for r in results if not isinstance(r, Prediction))
    if not ranked:
        reasons = "; ".join(sorted({why for _, why in infeasible}))
        raise InfeasibleError(f"no feasible schedule: {reasons}" if reasons else
                              "no candidate schedules")
    return SearchResult(tuple(ranked), infeasible, len(candidates))


def best(system: System, op: str, nbytes: int, world: int | None = None, domains: int = 1,
         impl: str = "pk", **narrow) -> Prediction:
    """The fastest schedule (pk) or NCCL's own choice (nccl)."""
    if impl == "nccl":
        return predict(system, nccl_schedule(system, op, nbytes, world, domains))
    result = search(system, space(system, op, nbytes, world, domains, **narrow))
    return result.ranked[0]


__all__ = ["space", "fused_space", "search", "best", "nccl_schedule", "SearchResult"]
