"""From a Transfer to a fluid flow: which resources it crosses, with what weight.

Weights: 1 per byte for memory and switch crossbars, 1/efficiency on NVLink ports
(protocol overhead of the mechanism), 2 for a destination that reads, adds and
writes back (derated to ``hbm.reduce_efficiency`` in HBM), and on the issue resource
the ratio of its capacity to the rate ``hwmodels.sm.sm_issue_Bps`` gives the
communication SMs for this transfer (TMA message round trips; for transfers inside
one GPU also the knee where the SMs meet the memory). Issue capacities: communication
SMs x the per-SM rate of the mechanism (``gpu.transfer_remote`` on a multi-GPU topology,
``gpu.transfer``'s fitted local rate on virtual ranks); the copy engines' own rate; all
from the system file. Which figure governs which path: docs/design.md, decision D38.
"""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.sm import (dest_writes, move_traffic, reduce_memory_weight, shared_reads,
                         sm_issue_Bps, tma_latency_s)
from hwmodels.topology import ResourceName, Topology, resource
from pksim.moves import (ce_reduce_blocks, move_Bps, move_latency_s, register_load_rounds,
                         working_blocks)
from pksim.program import Move, Program, Transfer
from pksim.schedule import Schedule


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


def issue_capacity(topo: Topology, sched: Schedule) -> float:
    """Bytes per second one rank's communication engine (SMs or copy engines) can issue:
    on a multi-GPU topology the SMs' NVLink write rate (gpu.transfer_remote), on virtual
    ranks their fitted local rate; each transfer's issue weight scales it to its own."""
    gpu = topo.system.gpu
    if sched.mechanism == "copy-engine":
        return gpu.copy_engine.count * gpu.copy_engine.bandwidth_Bps
    return sched.comm_sms * per_sm_Bps(gpu, sched.mechanism, remote=not topo.virtual)


def per_sm_Bps(gpu, mechanism: str, remote: bool, direction: str = "write") -> float:
    """One SM's payload rate by ``mechanism``: to or from another GPU over NVLink
    (``remote``: gpu.transfer_remote, the mechanism study), or inside its GPU
    (gpu.transfer, fitted on one GPU; multimem, never inside one GPU, as registers)."""
    if remote:
        return gpu.transfer_remote.per_sm_Bps(mechanism, direction)
    t = gpu.transfer
    return t.tma_local_Bps_per_sm if mechanism == "tma" else t.ldst_local_Bps_per_sm


def message_bytes(topo: Topology, sched: Schedule, piece: float) -> float:
    """Size of one TMA message: the chunk, capped by half the SM's shared memory."""
    cap = topo.system.gpu.sm.shared_memory_B / 2
    return min(piece, sched.chunk_bytes or cap, cap)


def _mem(topo: Topology, rank: int, resident: bool) -> str:
    gpu = topo.locations[rank].gpu
    return resource("l2" if resident else "hbm", gpu)


def issue_weight(topo: Topology, sched: Schedule, t: Transfer, piece: float,
                 resident: bool) -> float:
    """Capacity of the issue resource (comm SMs x per-SM rate) one payload byte of
    transfer ``t`` uses: that capacity / the rate ``hwmodels.sm.sm_issue_Bps`` gives
    the communication SMs for it. Remote: the TMA round trip per message (or 1 for
    ld/st). Inside one GPU (virtual ranks), as calibrated on the H200: every rank's
    communication SMs feed the one memory, so their combined rate bends at
    ``transfer.issue_knee``; a TMA reduction (fire-and-forget bulk stores) is
    issue-bound per message and meets the memory without a knee."""
    gpu = topo.system.gpu
    tr = gpu.transfer
    n = sched.comm_sms
    capacity = issue_capacity(topo, sched)
    if n <= 0 or capacity <= 0:
        return 1.0
    tma = sched.mechanism == "tma"
    message = message_bytes(topo, sched, piece) if tma else None
    if not topo.virtual and (t.src != t.dst or t.kind in ("switch-reduce", "multicast")):
        # over NVLink: the mechanism's per-SM rate in the transfer's direction (a TMA
        # store-add into the peer at its own), a TMA message's round trip, no knee (the
        # fluid engine's hard minimum with the links)
        direction = "reduce" if t.kind == "reduce" else "write"
        per_sm = per_sm_Bps(gpu, sched.mechanism, True, direction)
        rate = sm_issue_Bps(per_sm, n, tr.issue_knee, None, message,
                            tma_latency_s(gpu, remote=True) if tma else 0.0)
        return capacity / rate if rate > 0 else float("inf")
    # inside one GPU: the fitted local rates; every rank on it feeds the one memory
    ranks = topo.world if topo.virtual else 1
    local = per_sm_Bps(gpu, sched.mechanism, remote=False)
    if tma and t.kind == "reduce":      # fire-and-forget: no knee, the memory's hard limit
        rate = sm_issue_Bps(tr.tma_reduce_Bps_per_sm, n * ranks, tr.issue_knee, None,
                            message, issue_s=tr.tma_reduce_issue_s)
    else:
        mem = _mem(topo, t.src, resident)
        per_byte = 1.0 + (reduce_memory_weight(gpu, resident) if t.kind == "reduce" else 1.0)
        shared = topo.resources[mem].capacity_Bps / per_byte
        rate = sm_issue_Bps(local, n * ranks, tr.issue_knee, shared, message,
                            tma_latency_s(gpu) if tma else 0.0)
    return capacity / (rate / ranks) if rate > 0 else float("inf")


def flow_spec(topo: Topology, sched: Schedule, t: Transfer, piece: float,
              resident: bool, link_efficiency: float) -> FlowSpec:
    """The flow of one piece (``piece`` bytes) of transfer ``t``."""
    usage: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        usage[name] = usage.get(name, 0.0) + weight

    issuer = t.dst if t.kind == "switch-reduce" else t.src
    if sched.mechanism == "copy-engine":
        add(resource("ce", issuer), 1.0)
    elif sched.impl == "nccl":     # NCCL's channels move every byte at NCCL's channel rate
        # (NVLS's copies through its buffers by their own warps: pksim.nccl, D42)
        local_copy = t.kind == "copy" and t.src == t.dst
        add(resource("copy" if local_copy else "issue", issuer), 1.0)
    else:
        add(resource("issue", issuer), issue_weight(topo, sched, t, piece, resident))
    link_w = 1.0 / link_efficiency
    latency = 0.0
    everyone = range(topo.world)
    if t.kind in ("copy", "reduce"):
        add(_mem(topo, t.src, resident), 1.0)
        add(_mem(topo, t.dst, resident),
            reduce_memory_weight(topo.system.gpu, resident) if t.kind == "reduce" else 1.0)
        path = topo.gpu_path(t.src, t.dst)
        for name in path.resources:
            add(name, 1.0 if name.startswith("sw") else link_w)
        latency = path.latency_s
    elif t.kind == "switch-reduce":
        for q in everyone:
            add(_mem(topo, q, resident), 1.0)
            path = topo.reduction_path(q)
            for name in path.resources:
                add(name, 1.0 if name.startswith(("sw", "nvls")) else link_w)
            latency = max(latency, path.latency_s)
        add(resource("nvl_in", t.dst), link_w)
        add(_mem(topo, t.dst, resident), 1.0)
        # a load's round trip: from the issuer up to the switch and on to every rank's
        # memory, its access there, and the reduced value back the same way (D40)
        gpu = topo.system.gpu
        access = gpu.l2.latency_s if resident else gpu.hbm.latency_s
        latency = 2 * (latency + topo.reduction_path(t.dst).latency_s) + access
    elif t.kind == "multicast":
        add(_mem(topo, t.src, resident), 1.0)
        up = topo.reduction_path(t.src)
        for name in up.resources:
            if not name.startswith("nvls"):
                add(name, 1.0 if name.startswith("sw") else link_w)
        for q in everyone:
            add(resource("nvl_in", q), link_w)
            add(_mem(topo, q, resident), 1.0)
        latency = 2 * up.latency_s
    if sched.mechanism == "copy-engine":
        latency += ce_setup_s(topo)
    return FlowSpec(tuple(sorted(usage.items())), latency, piece, issuer)


def ce_setup_s(topo: Topology) -> float:
    """What a copy-engine transfer waits before its bytes flow: between GPUs the NVLink
    figure (gpu.transfer_remote.copy_engine_setup_us, the study's message-size curve),
    inside one GPU (virtual ranks) the fitted local one (gpu.copy_engine.setup_latency_us)."""
    gpu = topo.system.gpu
    return gpu.copy_engine.setup_s if topo.virtual else gpu.transfer_remote.copy_engine_setup_s


def ce_kernel_sms(topo: Topology, sched: Schedule) -> int:
    """Blocks of a copy-engine schedule's reduction kernels: its comm_sms (the kernels'
    blocks per rank), else all of a rank's SMs (codegen.plan's default)."""
    return max(1, sched.comm_sms or topo.sms_per_rank())


def capacities(topo: Topology, sched: Schedule) -> dict[str, float]:
    """Every resource a flow of this schedule may use, with its capacity (B/s). Copy-engine
    schedules also get SM issue resources for their reduction kernels."""
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    issue = issue_capacity(topo, sched)
    ce = sched.mechanism == "copy-engine"
    sm_issue = issue_capacity(topo, sched.with_(mechanism="register",
                                                  comm_sms=ce_kernel_sms(topo, sched)))
    for rank in range(topo.world):
        caps[resource("ce" if ce else "issue", rank)] = issue
        if ce:
            caps[resource("issue", rank)] = sm_issue
            caps[ce_commands(topo, rank)] = 1.0      # seconds of copy commands per second
    return caps


def ce_commands(topo: Topology, rank: int) -> ResourceName:
    """The copy-command queue of the GPU ``rank`` runs on (one for all virtual ranks)."""
    return resource("cecmd", 0 if topo.virtual else rank)


def move_spec(topo: Topology, sched: Schedule, m: Move, piece: float, resident: bool,
              link_efficiency: float, queued: int = 1) -> FlowSpec:
    """The flow of one move (``piece`` bytes of it) of a generated kernel
    (pksim.workloads.phases): its payload
    read from every source's memory, written to every destination's (each once per byte:
    the kernels sum in the SM, no read-modify-write), across the links between the
    issuer and every remote source or destination; the issuer's SMs at the rate of
    ``pksim.moves.move_Bps`` for its shape, or its copy engines."""
    usage: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        usage[name] = usage.get(name, 0.0) + weight

    gpu = topo.system.gpu
    link_w = 1.0 / link_efficiency
    tma = sched.mechanism == "tma" and m.engine != "sm"
    tma_s = tma_latency_s(gpu, remote=True) if tma and not topo.virtual else 0.0
    # Inside one GPU a move waits for its first read from memory (HBM, or the L2 where the
    # working set is resident: as pksim.microbench_model._block_move), with TMA as with registers
    # (block_moves without stacks: 4 KiB on 4-132 blocks, TMA 4.9-6.1 us, registers
    # 4.5-5.8 us; docs/decisions.md D5); across GPUs for the round trip of a remote read, and a remote
    # TMA message adds its own (hwmodels.sm.tma_latency_s).
    latency = ((gpu.l2.latency_s if resident else gpu.hbm.latency_s) if topo.virtual
               else 0.0)
    mech = "tma" if tma else "register"
    reads = shared_reads(gpu, mech, m.readers, m.payload)
    writes = dest_writes(gpu, mech, len(m.dests), m.payload)
    warm = warm_sources(topo, m, resident)
    for i, q in enumerate(m.sources):
        mem = _mem(topo, q, resident or i >= len(m.sources) - warm)
        add(mem, reads)
        if q != m.issuer:
            path = topo.gpu_path(q, m.issuer)
            for name in path.resources:
                add(name, 1.0 if name.startswith("sw") else link_w)
            latency = max(latency, 2 * path.latency_s)      # a read is a round trip
    if not tma:                   # a register sum that loads its sources in rounds
        rounds = register_load_rounds(gpu, m.reduce and m.engine != "sm", len(m.sources),
                                      m.shifts, m.load_rounds)
        latency += (rounds - 1) * gpu.kernel.load_round_s
    for q in m.dests:
        add(_mem(topo, q, resident), writes)
        if q != m.issuer:
            path = topo.gpu_path(m.issuer, q)
            for name in path.resources:
                add(name, 1.0 if name.startswith("sw") else link_w)
            latency = max(latency, path.latency_s)
    block = piece / working_blocks(sched.comm_sms, piece, dealt=m.dealt)
    far = not topo.virtual and any(q != m.issuer for q in m.sources)
    far_stores = not topo.virtual and not far and any(q != m.issuer for q in m.dests)
    latency += tma_s + move_latency_s(gpu, mech, len(m.sources), len(m.dests), m.reduce, block,
                                      m.routine, remote=far, far_stores=far_stores,
                                      shifts=m.shifts)
    # Moves the issuer makes one after another: TMA ones also wait for their bulk stores to
    # complete (pk::tma::complete_writes) before the next starts: inside one GPU until the L2
    # has them (as a phase's writes, pksim.collective.phase_sync_s), across GPUs a round trip.
    complete = (gpu.l2.latency_s if topo.virtual else latency) if tma else 0.0
    latency = m.serial * latency + (m.serial - 1) * complete
    if sched.mechanism == "copy-engine" and m.engine != "sm":
        add(resource("ce", m.issuer), 1.0)
        # One GPU's copies pass its copy commands one after another, each holding them for
        # command_s and its bytes at one engine's rate (as pksim.microbench_model._ce_burst adds
        # them). A copy starts once its stream's previous work has finished (a chain; the
        # engine's setup is the first copy's alone: collective.build adds the difference to the
        # launch); the ``queued`` copies of one rank in one phase share its stream, so the
        # last of them starts after that many chains.
        if m.payload > 0:
            add(ce_commands(topo, m.issuer),
                gpu.copy_engine.command_s / m.payload + 1.0 / gpu.copy_engine.bandwidth_Bps)
        latency += queued * gpu.sync.stream_chain_s
    else:
        mech = "register" if m.engine == "sm" else sched.mechanism
        n = ce_kernel_sms(topo, sched) if m.engine == "sm" else sched.comm_sms
        add(resource("issue", m.issuer), move_issue_weight(topo, sched, m, mech, n, resident))
        if sched.mechanism == "copy-engine":
            # a reduction kernel between a copy-engine collective's copies: its launch holds
            # the GPU's commands as a copy does, and it starts once its stream's copy is done
            if m.payload > 0:
                add(ce_commands(topo, m.issuer), gpu.sync.kernel_launch_s / m.payload)
            latency += gpu.sync.stream_chain_s
    return FlowSpec(tuple(sorted(usage.items())), latency, piece, m.issuer)


def warm_sources(topo: Topology, m: Move, resident: bool) -> int:
    """How many of the move's sources it reads from L2 because the previous phase has just
    written them (Move.warm; a ring's received chunk): all of them when that phase's writes
    on the GPU (the payload of every rank on it) fit in the L2; none when the whole program
    already counts as resident, or when they do not fit."""
    if not m.warm or resident:
        return 0
    ranks_per_gpu = topo.world if topo.virtual else 1
    return m.warm if m.payload * ranks_per_gpu <= topo.system.gpu.l2.capacity_B else 0


def move_issue_weight(topo: Topology, sched: Schedule, m: Move, mech: str, n: int,
                      resident: bool) -> float:
    """Capacity of issue[issuer] (n SMs x the mechanism's per-SM rate) one payload byte of
    the move uses. Inside one GPU every rank's SMs feed the one memory: their combined
    rate meets it through the knee (pksim.moves.move_Bps), as in the calibration."""
    gpu = topo.system.gpu
    capacity = n * per_sm_Bps(gpu, mech, remote=not topo.virtual)
    if n <= 0 or capacity <= 0:
        return 1.0
    if m.engine != "sm":
        n = working_blocks(n, m.payload, dealt=mech == "tma" and m.dealt)
    else:                     # the copy-engine schedules' reduction kernels cut their own way
        n = ce_reduce_blocks(n, m.payload)
    s, d = len(m.sources), len(m.dests)
    far_s = 0 if topo.virtual else sum(q != m.issuer for q in m.sources)
    far_d = 0 if topo.virtual else sum(q != m.issuer for q in m.dests)
    if far_s or far_d:        # over NVLink: the study's per-SM rates, no knee with a memory
        rate = move_Bps(gpu, mech, s, d, m.reduce, n, None, far_s, far_d, routine=m.routine,
                        shifts=m.shifts)
    else:                     # inside one GPU: every rank on it that moves feeds the one memory
        ranks = (m.active or topo.world) if topo.virtual else 1
        mem = topo.resources[_mem(topo, m.issuer, resident)].capacity_Bps
        cold = s - warm_sources(topo, m, resident)    # what queues at the memory
        traffic = move_traffic(gpu, mech, cold, d, m.readers, m.payload, ceiling=False)
        rate = move_Bps(gpu, mech, s, d, m.reduce, n * ranks, mem / traffic,
                        readers=m.readers, routine=m.routine, epilogue=m.epilogue,
                        elem_bytes=m.elem_bytes, shifts=m.shifts) / ranks
    return capacity / rate if rate > 0 else float("inf")


def resident_in_l2(topo: Topology, program_bytes_per_rank: float) -> bool:
    """A working set (input + output of every rank on a GPU) that fits in L2 is served
    from L2 rather than HBM."""
    ranks_per_gpu = topo.world if topo.virtual else 1
    return 2 * program_bytes_per_rank * ranks_per_gpu <= topo.system.gpu.l2.capacity_B


def program_kinds(program: Program) -> set[str]:
    return program.kinds()
