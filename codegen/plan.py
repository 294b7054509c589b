"""Stage 1 of codegen: Schedule -> Plan.

A Plan is everything the renderer needs and nothing it has to decide: which kernel skeleton
(``kernels/collectives/<op>.cuh``) and which algorithm struct in it, the launch constants
(threads, blocks per rank, TMA stage size and count, peer order), the nvcc target and the
preprocessor switches. It is frozen and JSON-able (``to_dict``), so every stage can be dumped.

Which skeleton, struct and mechanisms each (op, schedule algorithm) has is its row in
pksim_core.algorithms (header, kernel, struct, mechanisms, epilogue_kernel, extended).

The rooted, -v and send/recv kernels (rooted.cuh, varsize.cuh) and the reducing kernels given
a reduce op or an epilogue (Schedule.extra "reduce_op", "epilogue": those with an
``epilogue_kernel`` then come from epilogue.cuh) are *extended*: their config names the reduce
op and the epilogue, their globals add the split table and the epilogue's terms
(pkc_args::splits, alpha, bias).

What can be emitted is pksim_core.kernel_contract's (``emit_reason``: the search marks the same
schedules); make_plan raises InfeasibleError with that reason. Worlds run to one NVLink domain
(576 ranks). A hierarchical schedule over several domains emits its NVLink part, a ring over
each domain's ranks, and names the scale-out part, NCCL's collective among the ranks of one
local index, in the plan (``scale_out``, ``calls``: the manifest's sequence); nothing crosses
domains in generated code. ``in-network`` goes with ``multimem`` only (NVLink multicast): those
kernels are compiled (``-DPK_ENABLE_MULTIMEM=1``) but never run here. The nvcc target is the
system's; a system later than Blackwell without one gets the newest target nvcc offers
(``arch_note`` says so).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from codegen.build import newest_target
from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core import algorithms as kernel_rows
from pksim_core.kernel_contract import (BLOCK_THREADS, HIERARCHICAL_PARTS,
                                   MAX_RANKS,
                                   RUNNABLE_MECHANISMS, TARGETS, TMA_STAGE_BYTES, TMA_STAGES,
                                   emit_reason, epilogue_of, in_network_chunk_bytes, plain_extra,
                                   reduce_op_of, target_for)
from pksim_core.schedule import Schedule

# The kernels: pksim_core.algorithms' rows with mechanisms (header, C++ name and struct, the
# epilogue form of a reducing kernel).
OPS = tuple(dict.fromkeys(r.op for r in kernel_rows.kernels()))
MECHANISM_CPP = {"tma": "tma", "register": "reg", "copy-engine": "copy_engine", "multimem": "multimem"}
ARCHS = TARGETS


def algorithms(op: str) -> tuple[str, ...]:
    """Schedule algorithms codegen implements for ``op`` inside one domain (and, over several
    domains, hierarchical: its NVLink part)."""
    return tuple(r.algorithm for r in kernel_rows.of_op(op) if r.mechanisms)


def mechanisms(algorithm: str, op: str | None = None, extra=()) -> tuple[str, ...]:
    """Mechanisms of ``op``'s ``algorithm`` kernel (of every op's, without ``op``; none where
    codegen has no such kernel); with a schedule's ``extra``, a reduce op or an epilogue, on SMs
    only: a copy engine cannot apply them."""
    rows = [r for r in kernel_rows.kernels() if r.algorithm == algorithm and op in (None, r.op)]
    mechs = tuple(dict.fromkeys(m for r in rows for m in r.mechanisms))
    return mechs if plain_extra(extra) else tuple(m for m in mechs if m != "copy-engine")


@dataclass(frozen=True)
class KernelPlan:
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
    # (the schedule's chunk_bytes, else pksim_core.kernel_contract.in_network_chunk_bytes); 0 else.
    chunk_bytes: int = 0
    # In-network kernels built with -DPKC_EMULATE_MULTIMEM=1 (peer loads and stores in place of
    # multimem; runnable as virtual ranks): schedule.extra "multimem" = "emulated".
    emulated: bool = False
    # The nvcc target when it is not the system's own (a system later than Blackwell).
    arch_note: str = ""
    # Hierarchical schedules over several NVLink domains: the domains, the scale-out part
    # (NCCL's collective among the ranks of one local index, named, never emitted) and the
    # calls of one collective in order; world is then the ranks of one domain.
    domains: int = 1
    scale_out: tuple[tuple[str, object], ...] = ()
    calls: tuple[str, ...] = ()
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
        out["scale_out"] = dict(self.scale_out) or None
        out["calls"] = list(self.calls)
        return out


def _c_name(text: str) -> str:
    return text.replace("-", "_")


def check_target(system: System) -> tuple[str, str]:
    """The nvcc target for ``system`` and a note when it is not the system's own: a system
    later than Blackwell without a public target gets the newest one this nvcc offers."""
    arch = target_for(system)
    if arch:
        return arch, ""
    if arch == "":
        raise InfeasibleError(emit_reason(system, Schedule(op="all-gather", shape=(("bytes", 16),),
                                                           world=2)) or system.name)
    newest, nvcc = newest_target()
    return newest, (f"{system.name} ({system.gpu.architecture}) has no public nvcc target; built "
                    f"for {newest}, the newest data-center target this nvcc offers ({nvcc})")


def _hierarchy(s: Schedule, m: int) -> tuple[tuple[tuple[str, object], ...], tuple[str, ...]]:
    """The scale-out part (NCCL's, not emitted) of a hierarchical schedule over s.domains
    domains of m ranks, and the calls of one collective in order."""
    D = s.domains
    nccl = HIERARCHICAL_PARTS[s.op][1]
    comm = (f"ranks d x {m} + i, d = 0 .. {D - 1}: one communicator per local index i "
            f"(ncclCommSplit by i)")
    scale_out = (("impl", "nccl"), ("op", nccl), ("ranks", D), ("communicator", comm),
                 ("emitted", False))
    if s.op == "all-reduce":
        calls = (f"pk all-reduce ring over the domain's {m} ranks, phases [0, {m}) (its "
                 f"reduce-scatter): rank i ends with chunk i of the domain's sum in its output",
                 f"NCCL {nccl}, in place, of that chunk among the {D} ranks of local index i",
                 f"pk all-reduce ring, phases [{m}, {2 * m - 1}) (its all-gather), with the same "
                 f"seq (abi.h: a split call)")
    elif s.op == "reduce-scatter":
        calls = (f"for e = 0 .. {D - 1}: pk reduce-scatter ring over the domain with the shard "
                 f"count c, input + e x {m} x c, output staging + e x c",
                 f"NCCL {nccl} of the staging ({D} x c) among the {D} ranks of local index i, "
                 f"into the output")
    else:
        calls = (f"NCCL {nccl} of the input (c) among the {D} ranks of local index i into a "
                 f"staging buffer ({D} x c)",
                 f"for e = 0 .. {D - 1}: pk all-gather ring over the domain, input staging + e x c, "
                 f"output + e x {m} x c")
    return scale_out, calls


def make_plan(system: System, schedule: Schedule) -> KernelPlan:
    """Schedule -> Plan, or InfeasibleError naming what codegen cannot express."""
    s = schedule
    why = emit_reason(system, s)
    if why:
        raise InfeasibleError(why)
    world = s.world // s.domains
    scale_out, calls = ((), ())
    if s.domains > 1:            # hierarchical: the NVLink part, a ring over each domain
        scale_out, calls = _hierarchy(s, world)
        part = s.with_(algorithm="ring", world=world, domains=1, chunk_bytes=0, pipeline_depth=1)
    else:
        part = s
    arch, arch_note = check_target(system)
    row = kernel_rows.find(part.op, part.algorithm)
    streamed = row.streamed
    emulated = dict(part.extra).get("multimem") == "emulated"
    header, kalg, struct, extended = row.header, row.kernel, row.cpp_struct, row.extended
    if not plain_extra(part.extra) and row.epilogue_kernel:
        kalg = row.epilogue_kernel
        header, struct, extended = "epilogue.cuh", f"{_c_name(part.op)}_{kalg}", True
    topo = Topology.build(system, world, 1)
    if part.mechanism == "copy-engine":
        # Copy engines take no SMs; the blocks are those of the local reduction kernels:
        # the schedule's comm_sms, else all of a rank's SMs (pksim_core.mechanisms.flow.ce_kernel_sms).
        blocks = max(1, part.comm_sms or topo.sms_per_rank())
    else:
        blocks = max(1, part.comm_sms)
    stage = TMA_STAGE_BYTES if part.mechanism == "tma" else 0
    mech = part.mechanism
    kernel = f"{_c_name(part.op)}_{kalg}_{_c_name(mech) if mech != 'register' else 'reg'}"
    defines = (("PK_ENABLE_MULTIMEM", "1"),) if mech == "multimem" else ()
    if emulated:
        defines = (("PKC_EMULATE_MULTIMEM", "1"),)
    chunk = in_network_chunk_bytes(blocks, part.chunk_bytes) if streamed else 0
    return KernelPlan(op=part.op, algorithm=s.algorithm, kernel_algorithm=kalg, mechanism=mech,
                header=f"collectives/{header}", struct=f"pkc::{struct}", kernel=kernel,
                entry=f"pk_{kernel}",
                threads=BLOCK_THREADS["register" if mech == "register" else "tma"],
                blocks_per_rank=blocks, stage_bytes=stage,
                stages=TMA_STAGES if stage else 1, staggered=part.peer_order != "sequential",
                arch=arch, defines=defines, dtype=s.dtype, world=world, root=s.root,
                schedule_key=s.key(), system=system.name, chunk_bytes=chunk, emulated=emulated,
                arch_note=arch_note, domains=s.domains, scale_out=scale_out, calls=calls,
                extended=extended, reduce_op=reduce_op_of(part.extra),
                epilogue=epilogue_of(part.extra))
