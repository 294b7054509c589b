"""A move's or a transfer's flow: which resources it crosses, with what weight, after what
latency, and what a phase pays after its last byte (the path of one move: the package's
docstring).

Weights: 1 per byte for memory and switch crossbars, 1 / efficiency on NVLink ports (the
mechanism's protocol overhead), 2 for a destination that reads, adds and writes back (derated
to ``hbm.reduce_efficiency`` in HBM), and on the issue resource the ratio of its capacity to
the rate the mechanism's component gives the communication SMs for this move or transfer.
Latencies come from the topology's paths (``Path.one_way_s``, ``round_trip_s``,
``drain_s``) and the mechanism (``Mechanism.message_s``, ``latency_s``); which figure governs
which path: docs/decisions/D38.md.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.sm import handoff_s, reduce_memory_weight
from hwmodels.system import System
from hwmodels.topology import Topology, resource
from pksim_core.cache import BoundedCache
from pksim_core.mechanisms import TMA, of
from pksim_core.mechanisms.copy_engine_cost import CopyEngine, commands, waits_s
from pksim_core.move_cuts import ce_reduce_blocks, working_blocks
from pksim_core.program import Move, Transfer
from pksim_core.schedule import Schedule

INF = float("inf")


@dataclass(frozen=True)
class FlowSpec:
    usage: tuple[tuple[str, float], ...]
    latency_s: float
    nbytes: float
    issuer: int


def check_feasible(topo: Topology, sched: Schedule, kinds: set[str],
                   sm_reductions: bool = False) -> None:
    """Raise InfeasibleError naming what the hardware or the mechanism lacks.
    ``sm_reductions``: a generated kernel sums with SM kernels between its copies."""
    gpu = topo.system.gpu
    name = topo.system.name
    mech = sched.mechanism
    if mech == "copy-engine" and kinds & {"reduce", "switch-reduce"} and not (
            sm_reductions and "switch-reduce" not in kinds):
        raise InfeasibleError(f"{sched.op}/{sched.algorithm}: the copy engine cannot reduce "
                              f"(and codegen has no copy-engine kernel for it)")
    if mech == "tma" and not gpu.transfer.tma:
        raise InfeasibleError(f"{name}: no TMA on {gpu.architecture} "
                              f"(gpu.transfer.tma = false); TMA arrived with Hopper")
    switch_kinds = kinds & {"switch-reduce", "multicast"}
    if switch_kinds and mech != "multimem":
        raise InfeasibleError(f"the in-network algorithm needs the multimem mechanism, not {mech}")
    if mech == "multimem":
        if not switch_kinds:
            raise InfeasibleError(f"multimem is only used by the in-network algorithm, "
                                  f"not {sched.algorithm}")
        level = topo.span_level()
        tiers = topo.system.domain.switch_tiers
        if topo.virtual or level == 0:
            raise InfeasibleError(f"{name}: no NVLink switch spans the {topo.world} ranks "
                                  f"(in-network needs one)")
        tier = tiers[level - 1]
        if "switch-reduce" in kinds and not tier.in_switch_reduction:
            raise InfeasibleError(f"{name}: switch tier {level} ({tier.name}) has no "
                                  f"in-switch reduction")
        if "multicast" in kinds and not tier.multicast:
            raise InfeasibleError(f"{name}: switch tier {level} ({tier.name}) has no multicast")
    if mech != "copy-engine" and sched.comm_sms > topo.sms_per_rank():
        raise InfeasibleError(f"{sched.comm_sms} communication SMs asked, but a rank has "
                              f"{topo.sms_per_rank()} SMs")


def resident_in_l2(topo: Topology, program_bytes_per_rank: float) -> bool:
    """A working set (input + output of every rank on a GPU) that fits in L2 is served
    from L2 rather than HBM."""
    ranks_per_gpu = topo.world if topo.virtual else 1
    return 2 * program_bytes_per_rank * ranks_per_gpu <= topo.system.gpu.l2.capacity_B


def mem(topo: Topology, rank: int, resident: bool) -> str:
    """The memory resource a rank's buffer lives in: its GPU's L2 (resident) or HBM."""
    gpu = topo.locations[rank].gpu
    return resource("l2" if resident else "hbm", gpu)


def message_bytes(topo: Topology, sched: Schedule, piece: float) -> float:
    """Size of one TMA message: the chunk, capped by half the SM's shared memory."""
    cap = topo.system.gpu.sm.shared_memory_B / 2
    return min(piece, sched.chunk_bytes or cap, cap)


def issue_capacity(topo: Topology, sched: Schedule) -> float:
    """Bytes per second one rank's communication engine (SMs or copy engines) can issue:
    on a multi-GPU topology the SMs' NVLink write rate (gpu.transfer_remote), on virtual
    ranks their fitted local rate; each transfer's issue weight scales it to its own."""
    return of(sched.mechanism).issue_capacity(topo.system.gpu, sched.comm_sms, not topo.virtual)


def ce_kernel_sms(topo: Topology, sched: Schedule) -> int:
    """Blocks of a copy-engine schedule's reduction kernels: its comm_sms (the kernels'
    blocks per rank), else all of a rank's SMs (codegen.plan's default)."""
    return max(1, sched.comm_sms or topo.sms_per_rank())


def capacities(topo: Topology, sched: Schedule) -> dict[str, float]:
    """Every resource a flow of this schedule may use, with its capacity (B/s): the
    topology's, then ``extra_capacities``."""
    caps = dict(topo.capacities())
    caps.update(extra_capacities(topo, sched))
    return caps


def extra_capacities(topo: Topology, sched: Schedule) -> dict[str, float]:
    """The resources of ``capacities`` that are not the topology's: each rank's issue (its
    communication SMs, or its copy engines); copy-engine schedules also get SM issue
    resources for their reduction kernels and the copy-command queues."""
    issue = issue_capacity(topo, sched)
    ce = sched.mechanism == "copy-engine"
    if not ce:
        return dict.fromkeys(_issue_names(topo.world), issue)
    sm_issue = issue_capacity(topo, sched.with_(mechanism="register",
                                                  comm_sms=ce_kernel_sms(topo, sched)))
    caps: dict[str, float] = {}
    for rank in range(topo.world):
        caps[resource("ce", rank)] = issue
        caps[resource("issue", rank)] = sm_issue
        caps[commands(topo, rank)] = 1.0         # seconds of copy commands per second
    return caps


@functools.lru_cache(maxsize=8)
def _issue_names(world: int) -> tuple[str, ...]:
    return tuple(resource("issue", rank) for rank in range(world))


def warm_sources(topo: Topology, m: Move, resident: bool) -> int:
    """How many of the move's sources it reads from L2 because the previous phase has just
    written them (Move.warm; a ring's received chunk): all of them when that phase's writes
    on the GPU (the payload of every rank on it) fit in the L2; none when the whole program
    already counts as resident, or when they do not fit."""
    if not m.warm or resident:
        return 0
    ranks_per_gpu = topo.world if topo.virtual else 1
    return m.warm if m.payload * ranks_per_gpu <= topo.system.gpu.l2.capacity_B else 0


# ---- a generated kernel's move -------------------------------------------------------------
def move_flow(topo: Topology, sched: Schedule, m: Move, piece: float, resident: bool,
              link_efficiency: float, queued: int = 1) -> FlowSpec:
    """The flow of one move (``piece`` bytes of it) of a generated kernel
    (pksim_core.workloads.phases): its payload read from every source's memory, written to every
    destination's (each once per byte: the kernels sum in the SM, no read-modify-write),
    across the links between the issuer and every remote source or destination; the
    issuer's SMs at the rate its mechanism's component gives that shape, or its copy
    engines."""
    usage: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        usage[name] = usage.get(name, 0.0) + weight

    gpu = topo.system.gpu
    link_w = 1.0 / link_efficiency
    tma = sched.mechanism == "tma" and m.engine != "sm"
    moving = TMA if tma else of("register")       # whose routines move the bytes
    tma_s = moving.message_s(gpu, remote=True) if tma and not topo.virtual else 0.0
    # Inside one GPU a move waits for its first read from memory (HBM, or the L2 where the
    # working set is resident: as pksim_core.microbench_model._block_move), with TMA as with
    # registers (D5); across GPUs for the round trip of a remote read, and a remote TMA
    # message adds its own.
    latency = ((gpu.l2.latency_s if resident else gpu.hbm.latency_s) if topo.virtual
               else 0.0)
    reads = moving.shared_reads(gpu, m.readers, m.payload)
    writes = moving.dest_writes(gpu, len(m.dests), m.payload)
    warm = warm_sources(topo, m, resident)
    for i, q in enumerate(m.sources):
        add(mem(topo, q, resident or i >= len(m.sources) - warm), reads)
        if q != m.issuer:
            path = topo.gpu_path(q, m.issuer)
            for name in path.resources:
                add(name, 1.0 if name.startswith("sw") else link_w)
            latency = max(latency, path.round_trip_s)      # a read is a round trip
    # a register sum that loads its sources in rounds
    latency += moving.rounds_latency_s(gpu, m.reduce and m.engine != "sm", len(m.sources),
                                       m.shifts, m.load_rounds)
    for q in m.dests:
        add(mem(topo, q, resident), writes)
        if q != m.issuer:
            path = topo.gpu_path(m.issuer, q)
            for name in path.resources:
                add(name, 1.0 if name.startswith("sw") else link_w)
            latency = max(latency, path.one_way_s)
    block = piece / working_blocks(sched.comm_sms, piece, dealt=m.dealt)
    far = not topo.virtual and any(q != m.issuer for q in m.sources)
    far_stores = not topo.virtual and not far and any(q != m.issuer for q in m.dests)
    latency += tma_s + moving.latency_s(gpu, len(m.sources), len(m.dests), m.reduce, block,
                                        m.routine, remote=far, far_stores=far_stores,
                                        shifts=m.shifts)
    # Moves the issuer makes one after another: TMA ones also wait for their bulk stores to
    # complete (pk::tma::complete_writes) before the next starts: inside one GPU until the L2
    # has them (as a phase's writes, phase_sync_s), across GPUs a round trip.
    complete = (gpu.l2.latency_s if topo.virtual else latency) if tma else 0.0
    latency = m.serial * latency + (m.serial - 1) * complete
    if sched.mechanism == "copy-engine" and m.engine != "sm":
        add(resource("ce", m.issuer), 1.0)
        # One GPU's copies pass its copy commands one after another (CopyEngine.
        # command_weight, as pksim_core.microbench_model's ce_burst adds them). A copy starts once
        # its stream's previous work has finished (a chain; the engine's setup is the first
        # copy's alone: CopyEngine.launch_s); the ``queued`` copies of one rank in one phase
        # share its stream, so the last of them starts after that many chains.
        engine = of("copy-engine")
        if m.payload > 0:
            add(commands(topo, m.issuer), engine.command_weight(gpu, m.payload))
        latency += queued * gpu.sync.stream_chain_s
    else:
        mech = "register" if m.engine == "sm" else sched.mechanism
        n = ce_kernel_sms(topo, sched) if m.engine == "sm" else sched.comm_sms
        add(resource("issue", m.issuer), move_issue_weight(topo, m, mech, n, resident))
        if sched.mechanism == "copy-engine":
            # a reduction kernel between a copy-engine collective's copies: its launch holds
            # the GPU's commands as a copy does, and it starts once its stream's copy is done
            if m.payload > 0:
                add(commands(topo, m.issuer), gpu.sync.kernel_launch_s / m.payload)
            latency += gpu.sync.stream_chain_s
    return FlowSpec(tuple(sorted(usage.items())), latency, piece, m.issuer)


def move_issue_weight(topo: Topology, m: Move, mech: str, n: int, resident: bool) -> float:
    """Capacity of issue[issuer] (n SMs x the mechanism's per-SM rate) one payload byte of
    the move uses. Inside one GPU every rank's SMs feed the one memory: their combined
    rate meets it through the knee (``Mechanism.local_rate_Bps``), as in the calibration;
    across NVLink the study's per-SM rates, no knee with a memory."""
    gpu = topo.system.gpu
    component = of(mech)
    capacity = n * component.per_sm_Bps(gpu, remote=not topo.virtual)
    if n <= 0 or capacity <= 0:
        return 1.0
    if m.engine != "sm":
        n = working_blocks(n, m.payload, dealt=mech == "tma" and m.dealt)
    else:                     # the copy-engine schedules' reduction kernels cut their own way
        n = ce_reduce_blocks(n, m.payload)
    s, d = len(m.sources), len(m.dests)
    routines = of("tma" if mech == "tma" else "register") if m.routine == "pull" else component
    far_s = 0 if topo.virtual else sum(q != m.issuer for q in m.sources)
    far_d = 0 if topo.virtual else sum(q != m.issuer for q in m.dests)
    if far_s or far_d:
        rate = routines.rate_Bps(gpu, s, d, m.reduce, n, None, far_s, far_d, routine=m.routine,
                                 shifts=m.shifts)
    else:                     # inside one GPU: every rank on it that moves feeds the one memory
        ranks = (m.active or topo.world) if topo.virtual else 1
        memory = topo.resources[mem(topo, m.issuer, resident)].capacity_Bps
        cold = s - warm_sources(topo, m, resident)    # what queues at the memory
        rate = routines.local_rate_Bps(gpu, s, d, m.reduce, n * ranks, memory, m.payload,
                                       m.readers, cold, m.routine, m.epilogue, m.elem_bytes,
                                       m.shifts, m.crossed) / ranks
    return capacity / rate if rate > 0 else INF


# ---- a transfer (the simulator's programs, NCCL's steps) ---------------------------------
def transfer_issue_weight(topo: Topology, sched: Schedule, t: Transfer, piece: float,
                          resident: bool) -> float:
    """Capacity of the issue resource (comm SMs x per-SM rate) one payload byte of transfer
    ``t`` uses: that capacity / the rate the mechanism gives the communication SMs for it.
    Over NVLink: its per-SM rate in the transfer's direction (a TMA store-add into the peer
    at its own), a TMA message's round trip, no knee (the fluid engine's hard minimum with the
    links). Inside one GPU (virtual ranks): every rank's communication SMs feed the one
    memory, so their combined rate bends at ``transfer.issue_knee``; a TMA reduction
    (fire-and-forget bulk stores) is issue-bound per message and meets the memory without a
    knee."""
    gpu = topo.system.gpu
    n = sched.comm_sms
    capacity = issue_capacity(topo, sched)
    if n <= 0 or capacity <= 0:
        return 1.0
    component = of(sched.mechanism)
    tma = sched.mechanism == "tma"
    message = message_bytes(topo, sched, piece) if tma else None
    if not topo.virtual and (t.src != t.dst or t.kind in ("switch-reduce", "multicast")):
        direction = "reduce" if t.kind == "reduce" else "write"
        rate = component.stream_Bps(gpu, n, None, message, remote=True, direction=direction)
        return capacity / rate if rate > 0 else INF
    ranks = topo.world if topo.virtual else 1
    if tma and t.kind == "reduce":      # fire-and-forget: no knee, the memory's hard limit
        rate = TMA.reduce_stream_Bps(gpu, n * ranks, message)
    else:
        memory = mem(topo, t.src, resident)
        per_byte = 1.0 + (reduce_memory_weight(gpu, resident) if t.kind == "reduce" else 1.0)
        shared = topo.resources[memory].capacity_Bps / per_byte
        rate = component.stream_Bps(gpu, n * ranks, shared, message)
    return capacity / (rate / ranks) if rate > 0 else INF


def transfer_flow(topo: Topology, sched: Schedule, t: Transfer, piece: float,
                  resident: bool, link_efficiency: float) -> FlowSpec:
    """The flow of one piece (``piece`` bytes) of transfer ``t``: copy or store-add over the
    path between its ranks (one way), a multimem load-reduce (a round trip through the switch
    to every rank's memory, its access there, D40) or a multicast store."""
    usage: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        usage[name] = usage.get(name, 0.0) + weight

    issuer = t.dst if t.kind == "switch-reduce" else t.src
    if sched.mechanism == "copy-engine":
        add(resource("ce", issuer), 1.0)
    elif sched.impl == "nccl":     # NCCL's channels move every byte at NCCL's channel rate
        # (NVLS's copies through its buffers by their own warps: pksim_core.nccl, D42)
        local_copy = t.kind == "copy" and t.src == t.dst
        add(resource("copy" if local_copy else "issue", issuer), 1.0)
    else:
        add(resource("issue", issuer), transfer_issue_weight(topo, sched, t, piece, resident))
    link_w = 1.0 / link_efficiency
    latency = 0.0
    gpu = topo.system.gpu
    if t.kind in ("copy", "reduce"):
        add(mem(topo, t.src, resident), 1.0)
        add(mem(topo, t.dst, resident),
            reduce_memory_weight(gpu, resident) if t.kind == "reduce" else 1.0)
        path = topo.gpu_path(t.src, t.dst)
        for name in path.resources:
            add(name, 1.0 if name.startswith("sw") else link_w)
        latency = path.one_way_s
    elif t.kind == "switch-reduce":
        for q in range(topo.world):
            add(mem(topo, q, resident), 1.0)
            path = topo.reduction_path(q)
            for name in path.resources:
                add(name, 1.0 if name.startswith(("sw", "nvls")) else link_w)
            latency = max(latency, path.one_way_s)
        add(resource("nvl_in", t.dst), link_w)
        add(mem(topo, t.dst, resident), 1.0)
        # a load's round trip: from the issuer up to the switch and on to every rank's
        # memory, its access there, and the reduced value back the same way (D40)
        access = gpu.l2.latency_s if resident else gpu.hbm.latency_s
        latency = 2 * (latency + topo.reduction_path(t.dst).one_way_s) + access
    elif t.kind == "multicast":
        add(mem(topo, t.src, resident), 1.0)
        up = topo.reduction_path(t.src)
        for name in up.resources:
            if not name.startswith("nvls"):
                add(name, 1.0 if name.startswith("sw") else link_w)
        for q in range(topo.world):
            add(resource("nvl_in", q), link_w)
            add(mem(topo, q, resident), 1.0)
        latency = up.round_trip_s
    if sched.mechanism == "copy-engine":
        latency += of("copy-engine").copy_setup_s(gpu, topo.virtual)
    return FlowSpec(tuple(sorted(usage.items())), latency, piece, issuer)


# ---- what a step or a phase pays after its last byte -------------------------------------
def transfer_sync_s(system: System, specs) -> float:
    """After a step of transfers (a program without a generated kernel's phases): its
    longest path latency again for the signal to reach the receiver, and the time another
    SM takes to see a flag (sync.flag_latency_ns)."""
    return max((s.latency_s for s in specs), default=0.0) + system.gpu.sync.flag_latency_s


def phase_sync_s(system: System, topo: Topology, schedule: Schedule, moves,
                 joins: bool = True) -> float:
    """What a generated kernel's phase pays after its last byte: its writes must complete
    (one L2 latency inside a GPU, as block_moves shows for TMA and registers alike; the
    longest path's drain across GPUs, plus a remote TMA message's round trip for bulk
    stores) before the block's release and a system-scope flag (pk/sync.cuh;
    hwmodels.sm.handoff_s, measured by signal_chain) tell the next phase (the last phase has
    neither: pksim_core.collective_model.Model.step_classes). Copy-engine phases wait on events
    instead: the drain, and the event waits of the ranks' streams where the phase ``joins``
    them."""
    if topo.virtual:
        # writes are complete once the L2 (the GPU's point of coherence) has them
        drain = system.gpu.l2.latency_s
    else:
        drain = max((topo.gpu_path(m.issuer, q).drain_s for m in moves for q in m.dests
                     if q != m.issuer), default=0.0)
        if any(m.engine != "sm" for m in moves):
            drain += of(schedule.mechanism).handoff_extra_s(system.gpu, remote=True)
    if isinstance(of(schedule.mechanism), CopyEngine):
        return drain + (waits_s(system.gpu.sync, schedule.algorithm, topo) if joins else 0.0)
    return handoff_s(system.gpu, drain)


def phase_flag_s(system: System, topo: Topology, schedule: Schedule) -> float:
    """The hand-off that tells a generated kernel's next phase, beyond its writes' drain
    (hwmodels.sm.handoff_s): a release and a system-scope flag; for copy-engine phases the
    ranks' streams' event waits (what a copy pays behind earlier work is its chain:
    move_flow)."""
    if schedule.mechanism == "copy-engine":
        return waits_s(system.gpu.sync, schedule.algorithm, topo)
    return handoff_s(system.gpu, 0.0)


def entry_barrier_s(system: System, topo: Topology) -> float:
    """The entry barrier across GPUs (pk::barrier: a system-scope release, one arrival stored
    into every rank's counter over NVLink, a system-scope acquire of every peer's): a
    phase's hand-off (hwmodels.sm.handoff_s) whose drain is the arrivals' one-way path; the
    exit barrier is the last phase's own hand-off (D43)."""
    key = (id(system), topo.world, topo.domains)
    path = FARTHEST.lookup(system, key)
    if path is None:        # once per topology: a search asks for it for every candidate
        path = FARTHEST.store(system, key, max((topo.gpu_path(0, q).one_way_s
                                                for q in topo.first_peers()), default=0.0))
    return handoff_s(system.gpu, path)


FARTHEST = BoundedCache(16)     # the one-way path latency from rank 0 to its farthest peer
