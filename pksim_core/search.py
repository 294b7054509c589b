"""The schedule space of a collective on a system, and the search over it.

The space: every algorithm of the op x every mechanism the hardware allows x a few
communication-SM counts x chunk sizes (for the pipelined chain/ring algorithms) x
peer order (for the direct ones). Infeasible points are dropped with their reason
kept; the rest are simulated and ranked by predicted time.

With ``top = K`` the search is a branch and bound: every candidate gets a lower bound
on its time (cheap: no simulation; ``lower_bound`` for collectives,
``pksim_core.fusion.lower_bounds`` for fused ops, which refines a cheap bound into a
tighter one only when the candidate comes up), candidates are taken in order of bound,
and the search stops once the next bound exceeds the K-th best time found. A bound is
never above the DES time, so the K best (same order, same tie-break) are those of the
full search; the result says how many candidates were simulated and which were pruned.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable, Iterator

from hwmodels.errors import InfeasibleError
from hwmodels.sm import handoff_s
from hwmodels.system import System
from hwmodels.units import format_bytes
from pksim_core.algorithms import find as algorithm_row
from pksim_core.cache import topology
from pksim_core.prediction import Prediction
from pksim_core.schedule import MECHANISMS, Schedule
from pksim_core.collective_model import Model, build, lanes_of, simulate, streamed_in_network
from pksim_core.fusion import lower_bounds
from pksim_core.nccl import nccl_schedule
from pksim_core.simulate import predict
from pksim_core.workloads.collectives import COLLECTIVES, algorithms_for, build_program
from pksim_core.workloads.fused_ops import ALGORITHMS

COMM_SMS = (4, 8, 16, 32, 64)
FUSED_COMM_SMS = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
CHUNKS = (0, 1 << 20, 4 << 20)
# Past this world size the search leaves out what is slow to simulate and never wins
# there (predict still runs it on request): patterns with one flow per ordered pair
# of ranks (n^2 flows to prepare), and pipelined chunks (a ring of hundreds of ranks
# splits into many symmetry classes, and overlapping lanes cannot reuse a step's time).
LARGE_WORLD = 128


# Relative slack on a bound before it prunes: the bound and the DES add the same terms
# in different orders, so float rounding could put a tight bound a hair above the time.
BOUND_SLACK = 1e-9


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[Prediction, ...]              # every simulated candidate, best first
    infeasible: tuple[tuple[str, str], ...]     # (label, reason)
    candidates: int                             # considered
    pruned: tuple[tuple[str, float], ...] = ()  # (label, lower bound): never simulated

    @property
    def simulated(self) -> int:
        return len(self.ranked)


def fused_space(system: System, op: str, shape: dict[str, int], world: int | None = None,
                domains: int = 1, dtype: str = "bf16", overlaps: tuple[str, ...] = (),
                algorithms: tuple[str, ...] = (), mechanisms: tuple[str, ...] = (),
                comm_sms: tuple[int, ...] = (), skew: float = 0.0,
                chunks: tuple[int, ...] = ()) -> list[Schedule]:
    """Candidates for a compute + communication op: every overlap strategy x its
    communication algorithm x mechanism x communication SMs (inter-SM only) x chunk
    size (GEMM ops; 0: one chunk per peer, or per wave of tiles intra-SM)."""
    topo = topology(system, world, domains)
    sms = topo.sms_per_rank()
    sm_counts = comm_sms or tuple(c for c in FUSED_COMM_SMS if c < sms)
    chunk_opts = (0, 16 << 20, 4 << 20, 1 << 20) if op in ("gemm-rs", "gemm-ar", "ag-gemm") else (0,)
    chunk_opts = chunks or chunk_opts
    extra = (("skew", skew),) if skew else ()
    base = dict(op=op, shape=tuple(sorted(shape.items())), world=topo.world, domains=domains,
                dtype=dtype, extra=extra)
    out, left_out = [], set()
    for overlap in overlaps or ("none", "inter-sm", "intra-sm"):
        if overlap == "none":
            out.append(Schedule(**base, overlap="none", algorithm=ALGORITHMS[op][0],
                                mechanism="register", comm_sms=1))
            continue
        for alg in algorithms or ALGORITHMS[op]:
            for mech in mechanisms or ("tma", "register", "multimem"):
                if (alg == "in-network") != (mech == "multimem"):
                    left_out.add(_pairing(alg, mech))
                    continue
                if overlap == "intra-sm" and mech == "register":
                    left_out.add("intra-SM overlap sends by TMA or multimem, not register")
                    continue
                counts = sm_counts if overlap == "inter-sm" else (1,)
                for c in counts:
                    for chunk in chunk_opts:
                        out.append(Schedule(**base, overlap=overlap, algorithm=alg,
                                            mechanism=mech, comm_sms=c, chunk_bytes=chunk))
    return _some(out, left_out)


def _pairing(alg: str, mech: str) -> str:
    """Why (alg, mech) is not a schedule: in-network runs by multimem and only it."""
    if alg == "in-network":
        return f"in-network runs by multimem, not {mech}"
    return f"multimem runs in-network only, not {alg}"


def _some(candidates: list[Schedule], left_out: set[str]) -> list[Schedule]:
    """The candidates, or an InfeasibleError saying why the options left none."""
    if not candidates:
        why = "; ".join(sorted(left_out)) or "the options leave none"
        raise InfeasibleError(f"no candidate schedules: {why}")
    return candidates


def space(system: System, op: str, nbytes: int, world: int | None = None,
          domains: int = 1, algorithms: tuple[str, ...] = (), mechanisms: tuple[str, ...] = (),
          comm_sms: tuple[int, ...] = (), chunks: tuple[int, ...] = (),
          extra: tuple = ()) -> list[Schedule]:
    """Candidate pk schedules (feasibility is checked when they are simulated); ``extra``:
    split sizes, send-recv's pairs, a reduce op or an epilogue (Schedule.extra)."""
    topo = topology(system, world, domains)
    n = topo.world
    sms = topo.sms_per_rank()
    algs = algorithms or tuple(a for a in algorithms_for(op)
                               if a != "hierarchical" or domains > 1)
    mechs = mechanisms or MECHANISMS
    sm_counts = comm_sms or tuple(sorted({c for c in COMM_SMS if c <= sms} | {sms}))
    out, left_out = [], set()
    for alg in algs:
        row = algorithm_row(op, alg)       # None: no such algorithm (its candidates fail)
        peer_order, pipelined = (row.peer_order, row.pipelined) if row else (False, False)
        if not algorithms and n > LARGE_WORLD and peer_order:
            continue
        for mech in mechs:
            if (alg == "in-network") != (mech == "multimem"):
                left_out.add(_pairing(alg, mech))
                continue
            for c in (sm_counts if mech != "copy-engine" else (1,)):
                chunk_opts = chunks or (CHUNKS if pipelined and n <= LARGE_WORLD
                                        else (0,))
                for chunk in chunk_opts:
                    if chunk and chunk >= nbytes:
                        left_out.add(f"a chunk of {format_bytes(chunk)} is not smaller than "
                                     f"the {format_bytes(nbytes)} buffer")
                        continue
                    orders = ("ring", "sequential") if peer_order else ("ring",)
                    for order in orders:
                        out.append(Schedule(op=op, shape=(("bytes", nbytes),), world=n,
                                            domains=domains, algorithm=alg, mechanism=mech,
                                            comm_sms=c, chunk_bytes=chunk,
                                            pipeline_depth=2 if chunk else 1, peer_order=order,
                                            extra=extra))
    return _some(out, left_out)


def _run(args: tuple[System, Schedule, bool]) -> Prediction | tuple[str, str]:
    system, schedule, cold = args
    try:
        return predict(system, schedule, cold=cold)
    except InfeasibleError as exc:
        return (schedule.label(), str(exc))


def _rank(p: Prediction) -> tuple:
    return (p.time_s, p.schedule.comm_sms, p.schedule.label())


def search(system: System, candidates: list[Schedule], executor: Executor | None = None,
           top: int | None = None, cold: bool = False) -> SearchResult:
    """Rank the feasible candidates by predicted time. ``top = None``: simulate every
    candidate (on ``executor`` if given). ``top = K``: branch and bound (see the module
    text), in this process; ``ranked`` then holds the simulated candidates, whose first
    K are the K best of the whole space. ``cold``: the collectives' inputs come from HBM
    however small (``pksim_core.collective_model.build``)."""
    if top is not None:
        return _branch_and_bound(system, candidates, max(1, top), cold)
    jobs = [(system, s, cold) for s in candidates]
    results = list(executor.map(_run, jobs)) if executor else [_run(j) for j in jobs]
    ranked = sorted((r for r in results if isinstance(r, Prediction)), key=_rank)
    infeasible = tuple(r for r in results if not isinstance(r, Prediction))
    _check_any(ranked, infeasible)
    return SearchResult(tuple(ranked), infeasible, len(candidates))


def _check_any(ranked, infeasible) -> None:
    if not ranked:
        reasons = "; ".join(sorted({why for _, why in infeasible}))
        raise InfeasibleError(f"no feasible schedule: {reasons}" if reasons else
                              "no candidate schedules")


@dataclass
class _Pending:
    """A candidate the branch and bound has not simulated yet."""
    schedule: Schedule
    bounds: Iterator[float]                 # ever tighter lower bounds on its time
    simulate: Callable[[], Prediction]


def _pending(system: System, schedule: Schedule, cold: bool = False) -> _Pending:
    if schedule.op in COLLECTIVES:
        model: list[Model] = []

        def bounds() -> Iterator[float]:
            if schedule.world > LARGE_WORLD:
                yield step_floor(system, schedule)
            model.append(build(system, schedule, cold=cold))
            yield lower_bound(model[0])

        return _Pending(schedule, bounds(), lambda: simulate(model[0]))
    return _Pending(schedule, lower_bounds(system, schedule),
                    lambda: predict(system, schedule))


def _branch_and_bound(system: System, candidates: list[Schedule], top: int,
                      cold: bool = False) -> SearchResult:
    """Best-first over lower bounds: pop the smallest bound; if the candidate has a
    tighter one, push it back with that, else simulate it. Stop when the smallest bound
    left exceeds the top-th best time: every candidate left has at least that bound."""
    heap: list = []
    infeasible: list[tuple[str, str]] = []

    def refine(index: int, item: _Pending, floor: float = 0.0) -> None:
        try:
            bound, ready = max(floor, next(item.bounds)), False
        except StopIteration:
            bound, ready = floor, True
        except InfeasibleError as exc:
            infeasible.append((item.schedule.label(), str(exc)))
            return
        heapq.heappush(heap, (bound, item.schedule.comm_sms, item.schedule.label(), index,
                              ready, item))

    for index, schedule in enumerate(candidates):
        refine(index, _pending(system, schedule, cold))
    ranked: list[Prediction] = []
    times: list[float] = []                  # simulated times, sorted
    while heap:
        bound, _, _, index, ready, item = heap[0]
        if len(times) >= top and bound > times[top - 1] * (1 + BOUND_SLACK):
            break
        heapq.heappop(heap)
        if not ready:
            refine(index, item, bound)
            continue
        try:
            p = item.simulate()
        except InfeasibleError as exc:
            infeasible.append((item.schedule.label(), str(exc)))
            continue
        ranked.append(p)
        bisect.insort(times, p.time_s)
    pruned = tuple(sorted((entry[5].schedule.label(), entry[0]) for entry in heap))
    ranked.sort(key=_rank)
    _check_any(ranked, infeasible)
    return SearchResult(tuple(ranked), tuple(infeasible), len(candidates), pruned)


def step_floor(system: System, schedule: Schedule) -> float:
    """A lower bound on a pk collective's time from its program alone, before any flow is
    prepared (``lower_bound``'s chain, each term taken at its least): every costed step but
    the last pays at least its signal, which is at least a flag's latency (a step of
    transfers: its paths' latency + ``sync.flag_latency_ns``) or a phase's hand-off with
    nothing to drain (a generated kernel's phase: ``hwmodels.sm.handoff_s``); and a step of
    transfers lasts at least its largest piece read from its source's memory at weight 1
    (pksim.flows.flow_spec), at best at the faster of the GPU's HBM and L2. A copy-engine
    kernel's phases wait on events, not flags, but each of its copies (and reduction
    kernels) starts behind its stream's previous work (``sync.stream_chain_us``,
    pksim_core.mechanisms.flow.move_flow): every phase lasts at least that, and at least that
    many chains as one rank queues copies in it (Step.queued; docs/decisions/D77.md). 0 for the streamed in-network
    kernel (no signal per step). At 16 x NVL576 the tree across all 9,216 ranks (18,430 steps
    of the whole buffer) and, at small sizes, the ring (at least 15 ms of flags) are pruned
    before their flows are prepared; at 576 ranks, codegen's ring by copy engines and its direct
    all-gather by copy engines (576 copies a rank: 576 chains)."""
    if schedule.impl != "pk" or streamed_in_network(schedule):
        return 0.0
    program = build_program(schedule.op, schedule.algorithm, schedule.world,
                            schedule.dim("bytes"), schedule.root,
                            schedule.peer_order == "sequential", schedule.domains,
                            schedule.mechanism, schedule.dtype, schedule.extra)
    gpu = system.gpu
    steps = program.costed()
    if program.phases is not None:
        if schedule.mechanism == "copy-engine":     # the last of a rank's queued copies
            return sum(step.queued or 1 for step in steps) * gpu.sync.stream_chain_s
        return max(0, len(steps) - 1) * handoff_s(gpu, 0.0)
    largest = {key: step.largest() for key, step in program.patterns().items()}
    lanes = lanes_of(schedule, max(largest.values(), default=0.0))
    fastest = max(gpu.hbm.effective_Bps, gpu.l2.bandwidth_Bps)
    moving = sum(largest[step.key] for step in steps) / lanes / fastest
    return max(0, len(steps) - 1) * gpu.sync.flag_latency_s + moving


def lower_bound(model: Model) -> float:
    """A lower bound on a collective's DES time: the two terms of ``pksim_core.analytical``
    (bytes over the busiest resource; the chain of step latencies), the latter tightened
    for pipelined lanes. Computed once per traffic pattern, so 576-rank rings stay cheap.

    Every execution of step s (by one lane) lasts at least e_s = the slowest of its
    flows alone (path latency + bytes x weight / capacity) plus the step's signal, and
    lane j runs step s only after lane j - depth has finished it. So step s is run
    ceil(lanes / depth) times one after another, after steps 0..s-1 of the first lane
    and before steps s+1.. of the last: time >= launch + sum(e) + (ceil(L/d) - 1) max(e).
    """
    patterns: dict = {}          # key -> (bytes per resource, slowest flow alone)
    counts: dict = defaultdict(int)
    longest = 0.0                 # the longest e_s of any step
    chain = 0.0
    for step, classes, sync_s in model.step_classes():
        if step.key not in patterns:
            load: dict[str, float] = defaultdict(float)
            slowest = 0.0
            for fc in classes:
                drain = 0.0
                for name, weight in fc.usage:
                    load[name] += weight * fc.nbytes
                    drain = max(drain, weight * fc.nbytes / model.capacity[name])
                slowest = max(slowest, fc.latency_s + drain)
            patterns[step.key] = (load, slowest)
        counts[step.key] += 1
        e = patterns[step.key][1] + sync_s     # a step's own signal (the last has none)
        chain += e
        longest = max(longest, e)
    if not patterns:
        return model.launch_s
    total: dict[str, float] = defaultdict(float)
    for key, (load, _) in patterns.items():
        for name, value in load.items():
            total[name] += value * counts[key] * model.lanes
    bandwidth = max((v / model.capacity[n] for n, v in total.items()), default=0.0)
    rounds = math.ceil(model.lanes / max(1, model.schedule.pipeline_depth))
    chain += (rounds - 1) * longest
    return model.launch_s + max(chain, bandwidth)


def best(system: System, op: str, nbytes: int, world: int | None = None, domains: int = 1,
         impl: str = "pk", **narrow) -> Prediction:
    """The fastest schedule (pk) or NCCL's own choice (nccl)."""
    if impl == "nccl":
        return predict(system, nccl_schedule(system, op, nbytes, world, domains))
    result = search(system, space(system, op, nbytes, world, domains, **narrow), top=1)
    return result.ranked[0]


__all__ = ["space", "fused_space", "search", "best", "SearchResult", "lower_bound"]
