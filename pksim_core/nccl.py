"""NCCL as it would run on the modelled hardware: the baseline users compare against.

NCCL's own tuner picks algorithm, protocol, channels and chunk (pksim_core.nccl_tuner, with the
graph inputs of pksim_core.nccl_graph and the constants of the declared NCCL version,
pksim_core.nccl_constants): its cost table RANKS, it is not a time. The time is the DES of the
picked algorithm on the topology (pksim_core.collective_model) with:
- the protocol's wire efficiency: LL carries 8 data bytes in 16 (1/2), LL128 120 of every
  128 (15/16), Simple 1 (nccl-model.md section 2), times the register path's efficiency;
- per step, the topology's path latency, plus for Simple the flag the sender posts after
  its data (LL and LL128 carry their flags inside the data lines);
- per rank, the issue capacity of the picked channels: channels x perChMaxRingLL128Bw
  (LL128), over 15/16 for LL and Simple (NCCL's tables: reported as such);
- the launch cost of the launch mode (``launch_costs``).
"""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology, resource
from pksim_core import nccl_graph
from pksim_core.algorithms import NCCL_ALGORITHMS
from pksim_core.cache import topology
from pksim_core.kernel_contract import SPLIT_OPS
from pksim_core.nccl_constants import constants
from pksim_core.program import StepProgram, Step, Transfer
from pksim_core.schedule import Schedule

PROTOCOLS = ("LL", "LL128", "Simple")
PROTO_EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}
LAUNCH_MODES = ("graph", "eager", "one-thread")
# The launch mode where the caller does not say: one process per GPU launching on its stream
# (how frameworks call NCCL), the launch pk's own kernels are predicted with (stream_launch_us):
# NCCL and pk compare like for like. nccl-tests curves A/B are "graph", C-E "one-thread".
DEFAULT_LAUNCH = "eager"
# Ops NCCL (as torch.distributed calls it) runs as grouped point-to-point sends, outside its
# tuner: the -v forms and send/recv among them (their direct program: every message at once).
P2P_OPS = ("all-to-all", "gather", "scatter") + SPLIT_OPS


def program_algorithm(schedule: Schedule) -> str:
    """The pksim program that executes NCCL's algorithm for this op."""
    if schedule.algorithm == "nvls":
        return "in-network"
    if schedule.op in P2P_OPS:
        return "direct"
    if schedule.algorithm in ("tree", "hierarchical"):
        return schedule.algorithm
    return "ring"


def check(system: System, topo: Topology, schedule: Schedule) -> None:
    if topo.virtual:
        raise InfeasibleError("NCCL does not run several ranks on one GPU (virtual ranks)")
    if schedule.algorithm not in NCCL_ALGORITHMS:
        raise InfeasibleError(f"NCCL has no {schedule.algorithm!r} algorithm "
                              f"(it has {', '.join(NCCL_ALGORITHMS)})")
    if schedule.protocol not in PROTOCOLS:
        raise InfeasibleError(f"NCCL protocol must be one of {', '.join(PROTOCOLS)}")
    if schedule.algorithm == "collnet":
        raise InfeasibleError("NCCL CollNet needs SHARP-capable InfiniBand switches, "
                              "which pksim does not model")
    if schedule.algorithm == "tree" and schedule.op != "all-reduce":
        raise InfeasibleError(f"NCCL's tree algorithm is for all-reduce only, not {schedule.op}")
    if schedule.algorithm == "nvls":
        level = topo.span_level()
        tiers = system.domain.switch_tiers
        if (schedule.op not in ("all-reduce", "all-gather", "reduce-scatter") or level == 0
                or not tiers[level - 1].in_switch_reduction):
            raise InfeasibleError(f"NCCL NVLS needs in-switch reduction spanning the ranks "
                                  f"and all-reduce/all-gather/reduce-scatter ({system.name}, "
                                  f"{schedule.op})")
        if schedule.protocol != "Simple":
            raise InfeasibleError("NCCL NVLS runs the Simple protocol only")
    if schedule.algorithm != "nvls" and schedule.op in P2P_OPS \
            and schedule.algorithm != "ring":
        raise InfeasibleError(f"NCCL runs {schedule.op} as point-to-point sends (algorithm ring)")


def link_efficiency(system: System, schedule: Schedule) -> float:
    """Payload share of the wire: NVLS's multimem traffic at the multimem figure (NCCL's own
    NVLS model, docs/decisions/D42.md), the other algorithms' register stores at the
    register figure times the protocol's line format."""
    if schedule.algorithm == "nvls":
        return system.gpu.nvlink.efficiency_multimem
    return system.gpu.nvlink.efficiency_register * PROTO_EFFICIENCY[schedule.protocol]


def _extra(schedule: Schedule, key: str, default=None):
    return dict(schedule.extra).get(key, default)


def issue_capacities(system: System, topo: Topology, schedule: Schedule) -> dict[str, float]:
    """NCCL's channels replace pk's communication SMs: per rank, channels x NCCL's per-channel
    rate (perChMaxRingLL128Bws, nccl-model.md 1.1; over 15/16 for the other protocols, which
    carry more payload per line). llMaxBws is not a rate of the channels: it caps the LL
    entry of the cost table, which ranks (docs/decisions/D41.md); LL's own limit is its line
    format on the wire (link_efficiency)."""
    c = constants(_extra(schedule, "nccl_version"))
    arch = nccl_graph.arch_row(system)
    col = min(len({loc.domain for loc in topo.locations}) - 1, 2)
    rate = schedule.comm_sms * c.ring_ll128_bw[arch][col] * 1e9
    if schedule.protocol != "LL128":
        rate /= PROTO_EFFICIENCY["LL128"]
    caps = {resource("issue", r): rate for r in range(topo.world)}
    if schedule.algorithm == "nvls" and not registered(schedule):
        # NVLS's scatter and gather warps (15 of a channel's 20, all_reduce.h) copy through
        # its buffers beside the reduce warps: at the same channel rate (an estimate: NCCL
        # states no copy rate; docs/decisions/D42.md)
        caps |= {resource("copy", r): rate for r in range(topo.world)}
    return caps


def step_sync_s(system: System, schedule: Schedule, specs) -> float:
    """After a step's last byte: LL and LL128 lines carry their own flag, so the data's
    landing (its path latency is the flows' start delay) is the signal: nothing more. Simple
    posts a flag behind its data: one more path latency and a system-scope flag."""
    if schedule.protocol != "Simple":
        return 0.0
    latency = max((s.latency_s for s in specs), default=0.0)
    return latency + system.gpu.sync.flag_latency_sys_s


def registered(schedule: Schedule) -> bool:
    """Whether NCCL sees the call's buffers registered: a call captured in a CUDA graph
    registers them (NCCL_GRAPH_REGISTER, default 1: enqueue.cc's
    ncclCudaGraphValid(capturingGraph) && ncclParamGraphRegister()); an eager call of
    nccl-tests or a framework does not (docs/decisions/D42.md)."""
    return _extra(schedule, "launch", DEFAULT_LAUNCH) == "graph"


def buffer_bytes(op: str, world: int, nbytes: float) -> tuple[float, float]:
    """(send, receive) buffer bytes of one rank, nbytes as nccl-tests counts it."""
    if op == "all-gather":
        return nbytes / world, nbytes
    if op == "reduce-scatter":
        return nbytes, nbytes / world
    return nbytes, nbytes


def with_buffer_copies(program: StepProgram, schedule: Schedule, nbytes: float) -> StepProgram:
    """NVLS without registered buffers (all_reduce.h and its all-gather / reduce-scatter
    siblings, regUsed = 0): the scatter warps copy the rank's input into its slot of NCCL's
    NVLS buffer before the reduce warps' multimem loads, and the gather warps copy the result
    out of it into the output after the multicast. Registered buffers run zero-copy (the
    scatter and gather warps only exchange the slots' flags). docs/decisions/D42.md."""
    if schedule.algorithm != "nvls" or registered(schedule):
        return program
    w = program.world
    send, recv = buffer_bytes(schedule.op, w, nbytes)
    scatter = Step(("nvls-copy", "scatter", w, send),
                   lambda: [Transfer(r, r, send, "copy") for r in range(w)])
    gather = Step(("nvls-copy", "gather", w, recv),
                  lambda: [Transfer(r, r, recv, "copy") for r in range(w)])
    return StepProgram([scatter] + program.steps + [gather], w)


def cuts_through(schedule: Schedule) -> bool:
    """NCCL's line protocols and NVLS cut through (cut_through); the rest run step by step."""
    return schedule.protocol in ("LL", "LL128") or schedule.algorithm == "nvls"


@dataclass(frozen=True)
class CutThrough:
    """How a lane of a cut-through NCCL schedule runs (pksim_core.collective_model._run_cut_through):
    ``lead_s`` before its first step, a store-and-forward hand-off of ``handoff_s`` after
    each step of ``handoffs`` (indices), ``tail_s`` after its last step. The hand-offs cut
    a lane into segments; ``in_order``: a segment of lane j also waits for the same segment
    of lane j - 1 (its warps take the chunks one after another)."""
    lead_s: float = 0.0
    handoffs: frozenset = frozenset()
    handoff_s: float = 0.0
    tail_s: float = 0.0
    in_order: bool = False


def cut_through(schedule: Schedule, program: StepProgram, sync: dict) -> CutThrough | None:
    """How NCCL runs this schedule's steps, or None for step by step (ring and tree Simple,
    point-to-point). Cut through: a step's flows start once the previous step's first bytes
    have landed. The line protocols forward each line as it lands (LL, LL128: the flag is in
    the line; prims_ll.h, prims_ll128.h); their lanes pay no signal. NVLS reduces a chunk and
    multicasts it in one pass of the same threads (all_reduce.h, directRecvDirectSend), behind
    the Simple protocol's flags: a lane waits for every peer's post of the chunk's slot first
    and posts the landed result last (the Simple signal, ``sync``); without registered
    buffers its scatter copy must end, and be posted, before the reduce reads it, and the
    gather copy starts once the multicast's result is posted. docs/decisions/D41.md, D42.md."""
    if not cuts_through(schedule):
        return None
    if schedule.algorithm != "nvls":
        return CutThrough()
    signal = max(sync.values(), default=0.0)
    keys = [step.key for step in program.costed()]
    if keys and keys[0][0] == "nvls-copy":
        return CutThrough(0.0, frozenset({0, len(keys) - 2}), signal, 0.0, True)
    return CutThrough(signal, frozenset(), 0.0, signal)


def launch_costs(system: System, topo: Topology, mode: str) -> tuple[float, float, dict]:
    """(GPU time of the launch, host floor of back-to-back calls, where each came from).

    nccl-tests times back-to-back calls, so the host's issue overlaps the previous call's
    GPU work: it is a floor on the time per call, not an addition.
    - graph: a kernel node of a CUDA graph (gpu.sync.kernel_launch_us, the graph_100 point of
      validation/microbench/launch_latency.cu); the graph launch's host cost is shared by
      its nodes: no floor.
    - eager: one process per GPU launching on its stream: gpu.sync.stream_launch_us on the
      GPU, one launch call (gpu.sync.launch_api_us) on the host.
    - one-thread: one thread drives the domain's N GPUs (nccl-tests -g N): it issues N launch
      calls one after another, N x launch_api_us. NCCL's own host work per call beyond the
      launch (its enqueue, the group's per-device switch) is not measured: taken as 0
      (estimate; the floor is low by that much).
    """
    sync = system.gpu.sync
    n = topo.world // max(1, len({loc.domain for loc in topo.locations}))
    if mode == "graph":
        return sync.kernel_launch_s, 0.0, {"gpu": "gpu.sync.kernel_launch_us"}
    if mode == "eager":
        return sync.stream_launch_s, sync.launch_api_s, {
            "gpu": "gpu.sync.stream_launch_us", "host": "gpu.sync.launch_api_us"}
    if mode == "one-thread":
        return sync.stream_launch_s, n * sync.launch_api_s, {
            "gpu": "gpu.sync.stream_launch_us", "host": f"{n} x gpu.sync.launch_api_us"}
    raise InfeasibleError(f"NCCL launch mode must be one of {', '.join(LAUNCH_MODES)}")


ALGORITHM = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "hierarchical"}


def choose(system: System, topo: Topology, op: str, nbytes: int, version: str | None = None,
           nvls: bool = True, algo: str | None = None,
           proto: str | None = None) -> nccl_graph.NcclPick | None:
    """NCCL's own pick for this call (None: a point-to-point op, which NCCL runs as sends
    outside its tuner); ``algo`` / ``proto`` (NCCL's table names: ring, nvls, ...; LL,
    LL128, Simple) force them as NCCL_ALGO / NCCL_PROTO do."""
    if topo.virtual:
        raise InfeasibleError("NCCL does not run several ranks on one GPU (virtual ranks)")
    return nccl_graph.pick(system, topo, constants(version), op, nbytes, nvls, algo, proto)


def nccl_schedule(system: System, op: str, nbytes: int, world: int | None = None,
                  domains: int = 1, version: str | None = None,
                  launch: str = DEFAULT_LAUNCH, nvls: bool = True, algo: str | None = None,
                  proto: str | None = None) -> Schedule:
    """The schedule NCCL itself would pick for this call: the tuner's pick, with its channels
    as the issuing units and channels x chunk as the DES's pipeline lane."""
    if launch not in LAUNCH_MODES:
        raise InfeasibleError(f"NCCL launch mode must be one of {', '.join(LAUNCH_MODES)}")
    topo = topology(system, world, domains)
    p = choose(system, topo, op, nbytes, version, nvls, algo, proto)
    extra = {"launch": launch, "nccl_version": constants(version).version}
    if not nvls:
        extra["nvls"] = "off"
    if algo:
        extra["nccl_algo"] = algo
    if proto:
        extra["nccl_proto"] = proto
    if p is None:            # point-to-point: Simple over the execution channels
        g = nccl_graph.derive(system, topo, constants(version))
        return Schedule(op=op, shape=(("bytes", nbytes),), world=topo.world, domains=domains,
                        impl="nccl", algorithm="ring", mechanism="register", protocol="Simple",
                        comm_sms=max(1, g.coll_channels), extra=tuple(sorted(extra.items())))
    extra["nccl_chunk"] = p.chunk_bytes
    return Schedule(op=op, shape=(("bytes", nbytes),), world=topo.world, domains=domains,
                    impl="nccl", algorithm=ALGORITHM[p.algorithm], mechanism="register",
                    protocol=p.protocol, comm_sms=p.channels,
                    chunk_bytes=p.channels * p.chunk_bytes, pipeline_depth=p.pipeline_depth(),
                    extra=tuple(sorted(extra.items())))


def report(system: System, schedule: Schedule, top: int = 8) -> dict:
    """What --json says about NCCL's pick: the pick, the tuner's ranked table, the graph it
    derived, the launch, and which figures came from NCCL's tables."""
    topo = topology(system, schedule.world, schedule.domains)
    version = _extra(schedule, "nccl_version")
    p = choose(system, topo, schedule.op, schedule.dim("bytes"), version,
               _extra(schedule, "nvls") != "off", _extra(schedule, "nccl_algo"),
               _extra(schedule, "nccl_proto"))
    mode = _extra(schedule, "launch", DEFAULT_LAUNCH)
    gpu_s, host_s, launch_src = launch_costs(system, topo, mode)
    out = {"nccl_version": version, "launch": {"mode": mode, "gpu_s": gpu_s,
                                                "host_floor_s": host_s, "from": launch_src}}
    if p is None:
        out["pick"] = {"algorithm": "p2p", "protocol": "Simple", "channels": schedule.comm_sms}
        out["from_nccl_tables"] = ["channels: 2 x ring graph channels (connect.cc:460)"]
        return out
    out["pick"] = {"algorithm": p.algorithm, "protocol": p.protocol, "channels": p.channels,
                   "threads": p.threads, "chunk_bytes": p.chunk_bytes,
                   "forced": {"algo": _extra(schedule, "nccl_algo"),
                              "proto": _extra(schedule, "nccl_proto")}}
    out["run"] = {
        "steps": "cut through" if cuts_through(schedule) else "step by step",
        "buffers": "registered (CUDA graph capture)" if registered(schedule)
                   else "not registered (eager call)",
        "nvls_copies": schedule.algorithm == "nvls" and not registered(schedule)}
    out["tuner_ranked"] = [{"algorithm": a, "protocol": pr, "cost_s": round(t * 1e-6, 12),
                            "latency_s": round(lat * 1e-6, 12), "algbw_GBps": round(bw, 3)}
                           for t, a, pr, lat, bw in p.table[:top]]
    out["graph"] = {(f"{k}_GBps" if "bw" in k else k): v          # NCCL's bw: GB/s
                    for k, v in p.graph.__dict__.items() if k != "notes"}
    out["from_nccl_tables"] = [
        f"pick: argmin of the tuner's cost table (tuning.cc constants of NCCL {p.version})",
        "graph inputs: NVLink per-link bw (topo.h), search speed arrays (search.cc)",
        "channels: per-call reduction of 2 x ring graph channels, or nvlsChannels (enqueue.cc)",
        "chunk_bytes: NCCL buffer steps (init.cc:810-828) / NVLS chunk rule (enqueue.cc)",
        "issue rate per rank: channels x perChMaxRingLL128Bws (tuning.cc)",
        "wire efficiency: LL 1/2, LL128 15/16 (NCCL's line formats)"]
    return out
