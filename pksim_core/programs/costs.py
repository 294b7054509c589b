"""What one op of a program costs on a system, run alone: the library kernel of a compute op,
NCCL's own collective (the baseline) and pksim's best schedule for each communication op.

- GEMMs, grouped GEMMs and convolutions (as implicit GEMMs) go through the GEMM model
  (``hwmodels.sm.grouped_gemm_time_s``), attention through the attention model
  (``attention_shape_time_s``); element-wise, norm, reduction and the other memory-bound
  kernels stream their bytes at the calibrated HBM rate (``hbm.effective_Bps``), or do their
  FLOP at the FP32 rate if that is longer. Each kernel launched on the stream costs
  ``sync.stream_launch_us`` of GPU time (the collectives' launch, pksim_core.nccl's eager mode).
- Collectives: NCCL's pick (``pksim_core.nccl.nccl_schedule``, its tuner's choice) simulated on the
  topology; pksim's best is the faster of that and the branch-and-bound search over pk's
  schedules (``pksim.search``). A sub-group collective runs as a collective of its group's
  size: on one switch tier, groups of disjoint GPUs share no resource.
- ``-v`` forms: NCCL runs the even collective whose every rank moves what rank 0's busiest
  direction moves off the rank (docs/decisions/D47.md); send/recv batches as their exact
  transfers between the ranks (``pksim_core.programs.p2p``). pk runs both as the kernel codegen
  emits for them (``kernel_call``: the -v kernel, varsize.cuh's send-recv) at their split sizes,
  costed by that kernel's phases (pksim_core.workloads.phases), as every other generated
  collective.
Durations here exclude the host: the issue of launches and host reads is the scheduler's
(``pksim_core.programs.timeline``). Results are cached per system and shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hwmodels.errors import InfeasibleError
from hwmodels.sm import attention_shape_time_s, grouped_gemm_time_s
from hwmodels.system import System
from pksim_core.cache import BoundedCache
from pksim_core.collective_model import build, simulate
from pksim_core.nccl import nccl_schedule
from pksim_core.programs.model import DTYPE_BYTES, Op, ProgramSpec
from pksim_core.programs.check import peer_position
from pksim_core.schedule import DTYPES, Schedule
from pksim_core.search import search, space
from pksim_core.workloads import varsize_ops

# pksim's dtypes of a program's element types, by element size (a collective moves bytes;
# only its element size reaches the kernels' model)
SCHEDULE_DTYPE = {1: "fp8", 2: "bf16", 4: "fp32", 8: "fp32"}
# The tensor-core rate a GEMM of each type runs at. torch leaves TF32 off for FP32 matmuls
# (torch.backends.cuda.matmul.allow_tf32 = False), so FP32 GEMMs run on the FP32 pipes; the
# system files carry no FP64 figure, so FP64 is taken at the FP32 rate (an optimistic
# assumption that the prediction notes).
TENSOR_RATE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "fp32", "fp64": "fp32",
               "c64": "fp32"}
# multimem.ld_reduce (in-switch reduction) and NCCL NVLS: sums of bf16, fp16 and fp32, and
# min/max of bf16 and fp16 (docs/decisions/D47.md); other reductions leave the switch out
IN_SWITCH_REDUCE = {("sum", "bf16"), ("sum", "fp16"), ("sum", "fp32"), ("avg", "bf16"),
                    ("avg", "fp16"), ("avg", "fp32"), ("min", "bf16"), ("min", "fp16"),
                    ("max", "bf16"), ("max", "fp16")}
PK_OPS = {"all-reduce": "all-reduce", "reduce-scatter": "reduce-scatter",
          "all-gather": "all-gather", "all-to-all": "all-to-all", "broadcast": "broadcast",
          "reduce": "reduce", "gather": "gather", "scatter": "scatter",
          "all-gather-v": "all-gather", "all-to-all-v": "all-to-all"}

_RUNS = BoundedCache(4096)


@dataclass(frozen=True)
class CallChoice:
    """How one communication call runs: its time alone (no host issue), its schedule's
    label, and the SMs it keeps busy (NCCL's channels, pk's communication SMs; 0 for copy
    engines)."""
    time_s: float
    label: str
    sms: int
    schedule: Schedule | None = None


@dataclass(frozen=True)
class Call:
    """One collective call as pksim runs it: op, nccl-tests size, ranks, root, whether the
    switch may reduce it; ``extra``: a generated kernel's split sizes (Schedule.extra)."""
    op: str
    nbytes: int
    world: int
    dtype: str
    root: int = 0
    in_switch: bool = True
    extra: tuple = ()


def compute_s(system: System, op: Op) -> float:
    """Body time of a compute op (no launch)."""
    gpu = system.gpu
    elem = DTYPE_BYTES[op.dtype]
    if op.kind in ("gemm", "grouped-gemm", "conv"):
        return grouped_gemm_time_s(gpu, list(op.gemm_shapes), TENSOR_RATE.get(op.dtype, "fp32"),
                                   elem)
    if op.kind == "attention":
        p = op.param
        return attention_shape_time_s(gpu, p("batch"), p("heads"), p("q_seq"),
                                      p("kv_seq", p("q_seq")), p("head_dim"),
                                      bool(p("causal", False)), TENSOR_RATE.get(op.dtype, "fp32"),
                                      elem, p("kv_heads"), p("v_head_dim"))
    return memory_s(system, op.nbytes, op.vector_flops)


def memory_s(system: System, nbytes: float, flops: float = 0.0) -> float:
    """A memory-bound kernel: its bytes at the HBM's effective rate, or its FLOP at the FP32
    rate if longer."""
    gpu = system.gpu
    return max(nbytes / gpu.hbm.effective_Bps, flops / gpu.tensor.flops_fp32)


def calls(program: ProgramSpec, op: Op) -> list[Call]:
    """The collective calls a communication op makes (an object all-gather makes two: the
    lengths, then the padded pickles)."""
    n = program.groups[op.group].size
    dtype = SCHEDULE_DTYPE[DTYPE_BYTES[op.dtype]]
    in_switch = op.kind not in ("reduce-scatter", "all-reduce", "reduce") or (
        op.param("reduce", "sum"), op.dtype) in IN_SWITCH_REDUCE
    if op.kind == "all-gather-object":
        return [Call("all-gather", 8 * n, n, "fp32"),
                Call("all-gather", n * op.param("object_bytes"), n, "fp8")]
    nbytes = op.comm_bytes
    if op.kind in ("all-gather-v", "all-to-all-v"):
        nbytes = even_bytes(program, op)
    return [Call(PK_OPS[op.kind], max(1, nbytes), n, dtype, op.param("root", 0), in_switch)]


def off_rank_bytes(program: ProgramSpec, op: Op) -> tuple[float, float]:
    """(bytes the program's rank sends to other ranks, bytes it receives from them) in a -v
    collective."""
    t = program.tensors
    group = program.groups[op.group]
    me = group.of(program.rank).index(program.rank)
    if op.kind == "all-gather-v":
        row = t[op.writes[0]].row_elements * DTYPE_BYTES[op.dtype]
        splits = op.param("splits")
        # every rank receives the others' rows; the largest share misses the smallest own part
        return (len(splits) - 1) * max(splits) * row, (sum(splits) - min(splits)) * row
    row = t[op.reads[0]].row_elements * DTYPE_BYTES[op.dtype]
    sent = (sum(op.param("in_splits")) - op.param("in_splits")[me]) * row
    received = (sum(op.param("out_splits")) - op.param("out_splits")[me]) * row
    return sent, received


def even_bytes(program: ProgramSpec, op: Op) -> int:
    """The nccl-tests size of the even collective a -v one runs as: every rank moves off the
    rank what rank 0's (for all-gather-v: the busiest rank's) busiest direction moves, n / (n - 1)
    of it in all (docs/decisions/D47.md)."""
    n = program.groups[op.group].size
    if n == 1:
        return op.comm_bytes
    sent, received = off_rank_bytes(program, op)
    busiest = received if op.kind == "all-gather-v" else max(sent, received)
    return int(math.ceil(busiest * n / (n - 1) / 16)) * 16


def kernel_dtype(op: Op) -> str:
    """The elements a copy kernel moves an op's data in: 4-byte where the type's size is a
    multiple of 4, else 2-byte (a copy moves any type; codegen.program)."""
    return "fp32" if DTYPE_BYTES[op.dtype] % 4 == 0 else "bf16"


def _elems(nbytes: float, dtype: str) -> int:
    return math.ceil(nbytes / DTYPES[dtype])


def split_matrix(program: ProgramSpec, op: Op) -> list[list[int]]:
    """S[p][q]: the kernel's elements member p of the described rank's group sends to member q,
    in an all-to-all-v or a send/recv batch.

    all-to-all-v: the program knows the described rank's row (``in_splits``, what it sends)
    and column (``out_splits``, what it receives); the busier of the two is made circulant,
    so that every member sends and receives what the described rank's busier direction moves,
    in its block sizes (as NCCL's even collective, docs/decisions/D47.md). send/recv: every
    member's sends at the batch's offsets (dropped past an end without ``wrap``)."""
    t = program.tensors
    n = program.groups[op.group].size
    dtype = kernel_dtype(op)
    if op.kind == "sendrecv":
        wrap = op.param("wrap", True)
        s = [[0] * n for _ in range(n)]
        for p in range(n):
            for e in op.p2p:
                q = peer_position(p, e.offset, n, wrap) if e.send else None
                if q is not None:
                    s[p][q] += _elems(t[e.tensor].nbytes, dtype)
        return s
    me = program.groups[op.group].of(program.rank).index(program.rank)
    row = t[op.reads[0]].row_elements * DTYPE_BYTES[op.dtype]
    sent = [_elems(r * row, dtype) for r in op.param("in_splits")]
    received = [_elems(r * row, dtype) for r in op.param("out_splits")]
    if sum(sent) >= sum(received):      # row me is what it sends
        return [[sent[(q - p + me) % n] for q in range(n)] for p in range(n)]
    return [[received[(p - q + me) % n] for q in range(n)] for p in range(n)]   # column me


def kernel_call(program: ProgramSpec, op: Op) -> Call | None:
    """The generated kernel pk runs for a -v collective or a send/recv batch, at its split
    sizes: what pksim's best costs and ``pksim codegen --program`` emits (None for other ops,
    groups of one rank and batches that send nothing)."""
    n = program.groups[op.group].size
    if n < 2 or op.kind not in ("all-gather-v", "all-to-all-v", "sendrecv"):
        return None
    dtype = kernel_dtype(op)
    if op.kind == "all-gather-v":
        row = program.tensors[op.writes[0]].row_elements * DTYPE_BYTES[op.dtype]
        shares = [_elems(r * row, dtype) for r in op.param("splits")]
        if not any(shares):
            return None
        kop, text = "all-gather-v", ",".join(map(str, shares))
    else:
        s = split_matrix(program, op)
        if not any(map(any, s)):
            return None
        kop = "send-recv" if op.kind == "sendrecv" else "all-to-all-v"
        text = ";".join(",".join(map(str, row)) for row in s)
    extra = (("splits", text),)
    return Call(kop, varsize_ops.schedule_bytes(kop, extra, n, DTYPES[dtype]), n, dtype, extra=extra)


def _without_floor(system: System, schedule: Schedule) -> float:
    """NCCL's time without the host floor of back-to-back calls: the program's scheduler
    issues the calls on the host itself."""
    model = build(system, schedule)
    model = replace(model, host_floor_s=0.0)
    return simulate(model).time_s


def nccl_call(system: System, call: Call) -> CallChoice:
    """NCCL's own pick for ``call``, simulated (NVLS left out where the switch cannot reduce
    the call's type and operation)."""
    key = (id(system), "nccl", call)
    hit = _RUNS.lookup(system, key)
    if hit is not None:
        return hit
    if call.world == 1:
        choice = CallChoice(system.gpu.sync.stream_launch_s + memory_s(system, 2 * call.nbytes),
                        "local copy (group of 1)", 0)
        return _RUNS.store(system, key, choice)
    sched = nccl_schedule(system, call.op, call.nbytes, call.world, nvls=True)
    if sched.algorithm == "nvls" and not call.in_switch:
        sched = nccl_schedule(system, call.op, call.nbytes, call.world, nvls=False)
    sched = sched.with_(root=call.root, dtype=call.dtype)
    choice = CallChoice(_without_floor(system, sched), sched.label(), sched.comm_sms, sched)
    return _RUNS.store(system, key, choice)


def pk_call(system: System, call: Call) -> CallChoice | None:
    """pk's best schedule for ``call`` (None if no pk schedule runs it)."""
    key = (id(system), "pk", call)
    hit = _RUNS.lookup(system, key)
    if hit is not None:
        return hit
    if call.world == 1:
        return _RUNS.store(system, key, nccl_call(system, call))
    cands = [c.with_(root=call.root, dtype=call.dtype)
             for c in space(system, call.op, call.nbytes, call.world, extra=call.extra)
             if call.in_switch or c.mechanism != "multimem"]
    try:
        best = search(system, cands, top=1).ranked[0]
    except InfeasibleError:
        return _RUNS.store(system, key, None)
    sms = 0 if best.schedule.mechanism == "copy-engine" else best.schedule.comm_sms
    choice = CallChoice(best.time_s, best.schedule.label(), sms, best.schedule)
    return _RUNS.store(system, key, choice)


def best_call(system: System, call: Call, kernel: Call | None = None) -> CallChoice:
    """The faster of pk's best schedule and NCCL's pick; ``kernel``: pk's call where it runs
    another kernel than NCCL's (kernel_call)."""
    nccl = nccl_call(system, call)
    pk = pk_call(system, kernel or call)
    return pk if pk is not None and pk.time_s < nccl.time_s else nccl
