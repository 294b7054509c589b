"""The communication-aware roofline of a program: a closed form of its bytes and FLOP and the
system's peaks, with nothing from a search or a simulation (docs/design/programs.md gives
the formulas and why each is a lower bound; docs/decisions/D48.md).

Each op's work must pass through a GPU's tensor cores, its CUDA cores, its HBM and its NVLink
ports, each at its peak; ops may overlap perfectly, so the program takes at least the largest
of the per-resource sums:

- tensor: sum over GEMM, convolution and attention ops of the FLOP that must be computed (a
  causal mask's kept share) over the dense peak of their type;
- vector: the element-wise FLOP over the FP32 peak;
- hbm: the bytes compute ops read and write over the HBM's peak, leaving out the tensors a
  collective produces or consumes directly (a fused kernel may keep them out of its memory);
- nvlink: per rank, the sum over communication ops of the bytes that must leave or reach that
  GPU (the larger direction) over its NVLink bandwidth per direction; the busiest rank;
- latency: the longest dependency chain of communication ops, one NVLink hop each.
"""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core.programs.costs import IN_SWITCH_REDUCE, TENSOR_RATE, off_rank_bytes
from pksim_core.programs.model import DTYPE_BYTES, GEMM_KINDS, Op, ProgramSpec
from pksim_core.programs.p2p import per_rank

RESOURCES = ("tensor", "vector", "hbm", "nvlink", "latency")


@dataclass(frozen=True)
class Roofline:
    time_s: float
    resource: str                                    # the binding term
    terms: dict[str, float]                          # seconds per resource
    per_op: dict[str, tuple[float, str]]             # op -> (its own roofline, binding term)


def in_switch(system: System, group_size: int) -> tuple[bool, bool]:
    """(in-switch reduction, multicast) of the switch tier that spans a group of this size."""
    topo = Topology.build(system, group_size)
    level = topo.span_level()
    if topo.virtual or level == 0:
        return False, False
    tier = system.domain.switch_tiers[level - 1]
    return tier.in_switch_reduction, tier.multicast


def link_bytes(system: System, program: ProgramSpec, op: Op) -> list[float]:
    """Per rank of the world: the bytes ``op`` must move over that GPU's NVLink in its busier
    direction (the formulas of docs/design/programs.md)."""
    world = program.world
    out = [0.0] * world
    if op.kind == "sendrecv":
        return [max(s, r) for s, r in per_rank(program, op)]
    group = program.groups[op.group]
    n = group.size
    if n == 1:
        return out
    b = float(op.comm_bytes)
    share = (n - 1) / n
    reducer, _ = in_switch(system, n)
    for part in group.parts:
        for position, rank in enumerate(part):
            if op.kind == "all-reduce":
                fits = reducer and (op.param("reduce"), op.dtype) in IN_SWITCH_REDUCE
                out[rank] = share * b * (1 if fits else 2)
            elif op.kind in ("reduce-scatter", "all-gather", "all-to-all", "all-gather-object"):
                out[rank] = share * b
            elif op.kind in ("broadcast", "reduce"):
                out[rank] = b
            elif op.kind in ("gather", "scatter"):
                out[rank] = share * b if position == op.param("root", 0) else b / n
            elif op.kind == "all-gather-v":
                splits = op.param("splits")
                row = program.tensors[op.writes[0]].row_elements * DTYPE_BYTES[op.dtype]
                out[rank] = (sum(splits) - splits[position]) * row
            elif op.kind == "all-to-all-v":      # every rank taken as rank 0 (D47)
                out[rank] = max(off_rank_bytes(program, op))
    return out


def roofline(system: System, program: ProgramSpec) -> Roofline:
    gpu = system.gpu
    bw = gpu.nvlink.bandwidth_Bps
    hop = gpu.nvlink.latency_s
    producers = _comm_tensors(program)
    terms = dict.fromkeys(RESOURCES, 0.0)
    per_rank_link = [0.0] * program.world
    per_op: dict[str, tuple[float, str]] = {}
    chain: dict[str, float] = {}
    for op in program.ops:
        mine = dict.fromkeys(RESOURCES, 0.0)
        if op.kind in GEMM_KINDS:
            mine["tensor"] = op.work_flops / gpu.tensor.flops(TENSOR_RATE.get(op.dtype, "fp32"))
        if op.is_compute:
            kept = op.nbytes - sum(program.tensors[t].nbytes
                                   for t in set(op.reads + op.writes) if (op.name, t) in producers)
            mine["hbm"] = max(0.0, kept) / gpu.hbm.bandwidth_Bps
            mine["vector"] = op.vector_flops / gpu.tensor.flops_fp32
        if op.is_comm:
            loads = link_bytes(system, program, op)
            per_rank_link = [a + x / bw for a, x in zip(per_rank_link, loads)]
            mine["nvlink"] = max(loads) / bw
            mine["latency"] = hop if program.groups[op.group].size > 1 else 0.0
        chain[op.name] = mine["latency"] + max((chain[d] for d in op.deps), default=0.0)
        for key in ("tensor", "vector", "hbm"):
            terms[key] += mine[key]
        binding = max(RESOURCES, key=lambda r: mine[r])
        per_op[op.name] = (mine[binding], binding)
    terms["nvlink"] = max(per_rank_link, default=0.0)
    terms["latency"] = max(chain.values(), default=0.0)
    binding = max(RESOURCES, key=lambda r: terms[r])
    return Roofline(terms[binding], binding, terms, per_op)


def _comm_tensors(program: ProgramSpec) -> set[tuple[str, str]]:
    """(compute op, tensor) pairs where the tensor comes straight from a communication op or
    goes straight into one: a fused kernel may keep those bytes out of HBM."""
    out: set[tuple[str, str]] = set()
    last_writer: dict[str, str] = {}
    for op in program.ops:
        for t in op.reads:
            writer = last_writer.get(program.base(t))
            if writer is not None and op.is_compute and program.op(writer).is_comm:
                out.add((op.name, t))
            if writer is not None and op.is_comm and program.op(writer).is_compute:
                out.update((writer, w) for w in program.op(writer).writes
                           if program.base(w) == program.base(t))
        for t in op.writes:
            last_writer[program.base(t)] = op.name
    return out
