"""Stage 1 of codegen: Schedule -> Plan.

A Plan is everything the renderer needs and nothing it has to decide: which kernel skeleton
(``kernels/collectives/<op>.cuh``) and which algorithm struct in it, the launch constants
(threads, blocks per rank, TMA stage size and count, peer order), the nvcc target and the
preprocessor switches. It is frozen and JSON-able (``to_dict``), so every stage can be dumped.

Mapping from the Schedule IR (the names the simulator uses) to the skeletons:

==============  ==================================  =====================================
op              schedule algorithm -> kernel        mechanisms
==============  ==================================  =====================================
all-gather      direct, ring, in-network, rhd       tma, register, copy-engine; multimem
reduce-scatter  direct, ring, in-network, rhd       tma, register, copy-engine; multimem
all-reduce      direct (= one-shot), two-shot,      tma, register, copy-engine; multimem
                ring, in-network, rhd
all-to-all      direct                              tma, register, copy-engine
broadcast       direct, in-network                  tma, register, copy-engine; multimem
reduce          direct, two-shot                    tma, register
gather          direct                              tma, register, copy-engine
scatter         direct                              tma, register, copy-engine
==============  ==================================  =====================================

and, with split sizes (run-time, pkc_args::splits): all-to-all-v, all-gather-v and send-recv
direct on tma, register, copy-engine; reduce-scatter-v direct on tma, register.

The rooted, -v and send/recv kernels (rooted.cuh, varsize.cuh, p2p.cuh) and the reducing
kernels given a reduce op or an epilogue (Schedule.extra "reduce_op", "epilogue": the one-shot
and two-shot all-reduce and the direct reduce-scatter then come from epilogue.cuh) are
*extended*: their config names the reduce op and the epilogue, their globals add the split table
and the epilogue's terms (pkc_args::splits, alpha, bias).

``in-network`` goes with ``multimem`` only (NVLink multicast): those kernels are compiled
(``-DPK_ENABLE_MULTIMEM=1``) but never run here. Anything else raises InfeasibleError with
the reason, as do systems without an nvcc target for the primitives.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim.kernel_contract import (BLOCK_THREADS, EPILOGUE_KERNELS, EPILOGUES,
                                   IN_NETWORK_STREAMED_OPS as STREAMED_OPS, MAX_RANKS, REDUCE_OPS,
                                   RUNNABLE_MECHANISMS, TMA_STAGE_BYTES, TMA_STAGES, epilogue_of,
                                   in_network_chunk_bytes, reduce_op_of)
from pksim.schedule import Schedule

# (op, schedule algorithm) -> (header, kernel algorithm name used in C++ identifiers)
KERNELS: dict[tuple[str, str], tuple[str, str]] = {
    ("all-gather", "direct"): ("all_gather.cuh", "direct"),
    ("all-gather", "ring"): ("all_gather.cuh", "ring"),
    ("all-gather", "in-network"): ("in_network.cuh", "in_network"),
    ("all-gather", "rhd"): ("rhd.cuh", "rhd"),
    ("reduce-scatter", "direct"): ("reduce_scatter.cuh", "direct"),
    ("reduce-scatter", "ring"): ("reduce_scatter.cuh", "ring"),
    ("reduce-scatter", "in-network"): ("in_network.cuh", "in_network"),
    ("reduce-scatter", "rhd"): ("rhd.cuh", "rhd"),
    ("all-reduce", "direct"): ("all_reduce.cuh", "one_shot"),
    ("all-reduce", "two-shot"): ("all_reduce.cuh", "two_shot"),
    ("all-reduce", "ring"): ("all_reduce.cuh", "ring"),
    ("all-reduce", "in-network"): ("in_network.cuh", "in_network"),
    ("all-reduce", "rhd"): ("rhd.cuh", "rhd"),
    ("all-to-all", "direct"): ("all_to_all.cuh", "direct"),
    ("broadcast", "direct"): ("broadcast.cuh", "direct"),
    ("broadcast", "in-network"): ("in_network.cuh", "in_network"),
    ("reduce", "direct"): ("rooted.cuh", "direct"),
    ("reduce", "two-shot"): ("rooted.cuh", "two_shot"),
    ("gather", "direct"): ("rooted.cuh", "direct"),
    ("scatter", "direct"): ("rooted.cuh", "direct"),
    ("all-to-all-v", "direct"): ("varsize.cuh", "direct"),
    ("all-gather-v", "direct"): ("varsize.cuh", "direct"),
    ("reduce-scatter-v", "direct"): ("varsize.cuh", "direct"),
    ("send-recv", "direct"): ("p2p.cuh", "direct"),
}
EXTENDED_HEADERS = ("rooted.cuh", "varsize.cuh", "p2p.cuh", "epilogue.cuh")
# The reducing kernels of the extended headers: no copy-engine form (a copy engine cannot apply
# the op); the copies of those headers run on every mechanism.
SM_ONLY = (("reduce", "direct"), ("reduce", "two-shot"), ("reduce-scatter-v", "direct"))
# An all-reduce or reduce-scatter with a reduce op or an epilogue: its kernel in epilogue.cuh.
EPILOGUE_STRUCTS = {("all-reduce", "direct"): "one_shot_ep", ("all-reduce", "two-shot"): "two_shot_ep",
                    ("reduce-scatter", "direct"): "direct_ep"}
OPS = tuple(dict.fromkeys(op for op, _ in KERNELS))
MECHANISM_CPP = {"tma": "tma", "register": "reg", "copy-engine": "copy_engine", "multimem": "multimem"}
# nvcc targets on which every pk primitive exists (TMA bulk copies, mbarriers, multimem).
ARCHS = ("sm_90a", "sm_100a", "sm_103a")


def algorithms(op: str) -> tuple[str, ...]:
    """Schedule algorithms codegen implements for ``op``."""
    return tuple(alg for (o, alg) in KERNELS if o == op)


def mechanisms(algorithm: str, op: str | None = None, extra=()) -> tuple[str, ...]:
    """Mechanisms of ``algorithm`` (of ``op``, with a schedule's ``extra``: a reduce op or an
    epilogue runs on SMs only)."""
    if (op, algorithm) in SM_ONLY or (op and not _plain(extra)):
        return ("tma", "register")
    if algorithm == "in-network":
        return ("multimem",)
    if algorithm == "rhd":       # no copy-engine form (kernels/collectives/rhd.cuh)
        return ("tma", "register")
    return RUNNABLE_MECHANISMS


@dataclass(frozen=True)
class Plan:
    """What the renderer emits: one kernel skeleton specialised by constants."""
    op: str
    algorithm: str              # the schedule's name (direct, two-shot, ring, in-network)
    kernel_algorithm: str       # the C++ name (one_shot, two_shot, ring, direct, in_network)
    mechanism: str              # tma, register, copy-engine, multimem
    header: str                 # collectives/<op>.cuh
    struct: str                 # pkc::<op>_<algorithm>
    kernel: str                 # <op>_<algorithm>_<mechanism>, the __global__ name
    entry: str                  # pk_<kernel>, the extern "C" entry point
    threads: int
    blocks_per_rank: int
    stage_bytes: int            # 0 when the mechanism stages nothing in shared memory
    stages: int
    staggered: bool             # peer order: rank, rank+1, ... (else 0, 1, ...)
    arch: str                   # nvcc target, e.g. sm_90a
    defines: tuple[tuple[str, str], ...]
    dtype: str                  # the schedule's dtype (both fp32 and bf16 are instantiated)
    world: int                  # the schedule's world (a run-time argument of the kernel)
    root: int
    schedule_key: str
    system: str
    # Streamed in-network kernels (all-reduce, reduce-scatter, all-gather): a rank's chunk
    # (the schedule's chunk_bytes, else pksim.kernel_contract.in_network_chunk_bytes); 0 else.
    chunk_bytes: int = 0
    # In-network kernels built with -DPKC_EMULATE_MULTIMEM=1 (peer loads and stores in place of
    # multimem; runnable as virtual ranks): schedule.extra "multimem" = "emulated".
    emulated: bool = False
    # The extended kernels (module text): the reduce op and the epilogue of their config.
    extended: bool = False
    reduce_op: str = "sum"
    epilogue: str = "none"

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes + 128 if self.stage_bytes else 0

    @property
    def name(self) -> str:
        """File stem: <op>-<schedule key>."""
        return f"{self.op}-{self.schedule_key}"

    @property
    def mechanism_label(self) -> str:
        """The mechanism as the manifest names it: multimem-emulated for the emulated build."""
        return "multimem-emulated" if self.emulated else self.mechanism

    def to_dict(self) -> dict:
        out = asdict(self)
        out["defines"] = {k: v for k, v in self.defines}
        out["smem_bytes"] = self.smem_bytes
        return out


def _plain(extra) -> bool:
    return reduce_op_of(extra) == "sum" and epilogue_of(extra) == "none"


def _c_name(text: str) -> str:
    return text.replace("-", "_")


def check_target(system: System, mechanism: str) -> str:
    """The nvcc target for ``system``; InfeasibleError where the primitives do not exist."""
    arch = system.gpu.sm_arch
    if not arch:
        raise InfeasibleError(f"{system.name}: no nvcc target is known for {system.gpu.model} "
                              f"({system.gpu.architecture}); generated kernels need one of "
                              f"{', '.join(ARCHS)}")
    if arch not in ARCHS:
        raise InfeasibleError(f"{system.name}: the pk primitives (TMA bulk copies, mbarriers, "
                              f"system-scope release/acquire) need {', '.join(ARCHS)}; "
                              f"{system.gpu.model} is {arch}")
    if mechanism == "tma" and not system.gpu.transfer.tma:
        raise InfeasibleError(f"{system.name}: {system.gpu.model} has no TMA")
    return arch


def make_plan(system: System, schedule: Schedule) -> Plan:
    """Schedule -> Plan, or InfeasibleError naming what codegen cannot express."""
    s = schedule
    if s.impl != "pk":
        raise InfeasibleError(f"codegen emits pk kernels; impl {s.impl!r} is NCCL's own")
    key = (s.op, s.algorithm)
    if key not in KERNELS:
        have = ", ".join(algorithms(s.op)) or "none"
        raise InfeasibleError(f"codegen has no {s.algorithm} {s.op} kernel "
                              f"(implemented for {s.op}: {have})")
    if s.mechanism not in mechanisms(s.algorithm, s.op, s.extra):
        raise InfeasibleError(f"{s.algorithm} {s.op} runs on "
                              f"{', '.join(mechanisms(s.algorithm, s.op, s.extra))}, not {s.mechanism}")
    reduce_op, epilogue = reduce_op_of(s.extra), epilogue_of(s.extra)
    if reduce_op not in REDUCE_OPS or epilogue not in EPILOGUES:
        raise InfeasibleError(f"reduce op {reduce_op!r} / epilogue {epilogue!r}: the kernels take "
                              f"{', '.join(REDUCE_OPS)} / {', '.join(EPILOGUES)}")
    if not _plain(s.extra) and key not in EPILOGUE_KERNELS:
        raise InfeasibleError(f"a reduce op or an epilogue needs a reducing kernel "
                              f"({', '.join(f'{o} {a}' for o, a in EPILOGUE_KERNELS)}), not {s.algorithm} {s.op}")
    arch = check_target(system, s.mechanism)
    if s.world < 2 or s.world > MAX_RANKS:
        raise InfeasibleError(f"generated kernels address 2..{MAX_RANKS} ranks, not {s.world}")
    if s.domains != 1:
        raise InfeasibleError("generated kernels run inside one NVLink domain (domains = 1)")
    if s.overlap != "none":
        raise InfeasibleError(f"overlap {s.overlap!r} needs a fused kernel; codegen emits "
                              f"collectives only")
    streamed = s.algorithm == "in-network" and s.op in STREAMED_OPS
    if s.chunk_bytes and not streamed:
        raise InfeasibleError("pipelined chunks (chunk_bytes > 0) are implemented by the "
                              "streamed in-network kernels only; use chunk_bytes = 0")
    emulated = dict(s.extra).get("multimem") == "emulated"
    if emulated and not streamed:
        raise InfeasibleError(f"the multimem emulation (schedule.extra multimem = emulated) "
                              f"exists for the in-network {', '.join(STREAMED_OPS)} only")
    if s.dtype not in ("bf16", "fp32"):
        raise InfeasibleError(f"generated kernels handle bf16 and fp32, not {s.dtype}")
    header, kalg = KERNELS[key]
    if not _plain(s.extra) and key in EPILOGUE_STRUCTS:
        header, kalg = "epilogue.cuh", EPILOGUE_STRUCTS[key]
    topo = Topology.build(system, s.world, 1)
    if s.mechanism == "copy-engine":
        # Copy engines take no SMs; the blocks are those of the local reduction kernels:
        # the schedule's comm_sms, else all of a rank's SMs (pksim.flows.ce_kernel_sms).
        blocks = max(1, s.comm_sms or topo.sms_per_rank())
    else:
        blocks = max(1, s.comm_sms)
    stage = TMA_STAGE_BYTES if s.mechanism == "tma" else 0
    if stage and TMA_STAGES * stage + 128 > system.gpu.sm.shared_memory_B:
        raise InfeasibleError(f"{system.name}: {TMA_STAGES} x {stage} B TMA stages exceed the "
                              f"SM's shared memory")
    struct = f"pkc::{_c_name(s.op)}_{kalg}"
    kernel = f"{_c_name(s.op)}_{kalg}_{_c_name(s.mechanism) if s.mechanism != 'register' else 'reg'}"
    defines = (("PK_ENABLE_MULTIMEM", "1"),) if s.mechanism == "multimem" else ()
    if emulated:
        defines = (("PKC_EMULATE_MULTIMEM", "1"),)
    chunk = in_network_chunk_bytes(blocks, s.chunk_bytes) if streamed else 0
    return Plan(op=s.op, algorithm=s.algorithm, kernel_algorithm=kalg, mechanism=s.mechanism,
                header=f"collectives/{header}", struct=struct, kernel=kernel, entry=f"pk_{kernel}",
                threads=BLOCK_THREADS["register" if s.mechanism == "register" else "tma"],
                blocks_per_rank=blocks, stage_bytes=stage,
                stages=TMA_STAGES if stage else 1, staggered=s.peer_order != "sequential",
                arch=arch, defines=defines, dtype=s.dtype, world=s.world, root=s.root,
                schedule_key=s.key(), system=system.name, chunk_bytes=chunk, emulated=emulated,
                extended=header in EXTENDED_HEADERS, reduce_op=reduce_op, epilogue=epilogue)
