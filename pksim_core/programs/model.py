"""A whole multi-GPU problem as data: per-rank tensors, process groups, and ops in program order
with their dependencies (docs/programs.md describes the file format).

Every op is one rank's view of an SPMD program (rank 0's unless the program names another,
e.g. the rank with the most work): each rank runs the same ops on its own tensors (their
shapes are that rank's); a collective runs in every group of its partition at once. The
classes are frozen and carry what the model and the checks need: the bytes and FLOP of each op
and, for communication, the size as nccl-tests counts it (``comm_bytes``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Element types a program's tensors may have, and their bytes.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8": 1, "i64": 8, "i32": 4,
               "i16": 2, "i8": 1, "u8": 1, "bool": 1, "c64": 8}

GEMM_KINDS = ("gemm", "grouped-gemm", "conv", "attention")
# Kernels whose cost is the bytes they read and write (and the FLOP they do on CUDA cores).
MEMORY_KINDS = ("elementwise", "norm", "softmax", "reduction", "quantize", "optimizer",
                "permute", "copy", "index", "sort", "fft")
COMPUTE_KINDS = GEMM_KINDS + MEMORY_KINDS
COLLECTIVE_KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "broadcast",
                    "reduce", "gather", "scatter", "all-gather-v", "all-to-all-v",
                    "all-gather-object")
REDUCING = ("all-reduce", "reduce-scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
IN_PLACE = ("all-reduce", "broadcast", "reduce")
# Fused ops of pksim a program may state directly; each is read as its GEMM and its
# collective (the search finds the fusion again).
FUSED_KINDS = ("gemm-rs", "gemm-ar", "ag-gemm")
KINDS = COMPUTE_KINDS + COLLECTIVE_KINDS + ("sendrecv", "host-sync") + FUSED_KINDS
REDUCE_OPS = ("sum", "avg", "min", "max")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    view_of: str = ""             # a view of (part of) another tensor: its uses are that one's

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]

    @property
    def row_elements(self) -> int:
        """Elements of one row along dim 0 (what a split of rows counts)."""
        return math.prod(self.shape[1:])


@dataclass(frozen=True)
class ProcessGroup:
    """A process group as the partition of the ranks it stands for (every rank runs the
    collective in its own part): the world, the rows or columns of a grid, or lists."""
    name: str
    parts: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return len(self.parts[0])

    def of(self, rank: int) -> tuple[int, ...]:
        for part in self.parts:
            if rank in part:
                return part
        return ()


@dataclass(frozen=True)
class P2P:
    """One entry of a send/recv batch: send ``tensor`` to, or receive it from, the member
    ``offset`` places along the group (+1 the next, -1 the previous)."""
    send: bool
    tensor: str
    offset: int


@dataclass(frozen=True)
class Op:
    """One op. ``params`` holds the kind's own keys (docs/programs.md); derived figures
    (FLOP, bytes, sizes) are filled by the checks (``pksim_core.programs.check``)."""
    name: str
    kind: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    after: tuple[str, ...] = ()
    group: str = "world"
    params: tuple[tuple[str, Any], ...] = ()
    p2p: tuple[P2P, ...] = ()
    # derived
    flops: float = 0.0            # as torch's FlopCounterMode counts it (matmul, conv, attention)
    work_flops: float = 0.0       # what has to be computed (a causal mask halves it)
    vector_flops: float = 0.0     # element-wise FLOP on CUDA cores
    nbytes: float = 0.0           # HBM bytes a compute op reads and writes
    comm_bytes: int = 0           # collective: the nccl-tests size; sendrecv: rank 0's sends
    gemm_shapes: tuple[tuple[int, int, int], ...] = ()   # (m, n, k) of each GEMM it runs
    dtype: str = "bf16"           # the element type it computes or moves
    deps: tuple[str, ...] = ()    # explicit and inferred (tensors), in program order
    loop: tuple[str, int] | None = None   # (loop name, iteration) of an expanded loop

    def param(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        return default

    @property
    def is_comm(self) -> bool:
        return self.kind in COLLECTIVE_KINDS or self.kind == "sendrecv"

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @property
    def is_memory(self) -> bool:
        return self.kind in MEMORY_KINDS


@dataclass(frozen=True)
class ProgramSpec:
    name: str
    description: str
    covers: tuple[int, ...]
    world: int
    dtype: str
    tensors: dict[str, Tensor]
    groups: dict[str, ProcessGroup]
    ops: tuple[Op, ...]
    path: str = ""
    source: str = ""
    notes: tuple[str, ...] = ()
    rank: int = 0                 # the rank whose view (shapes, work, splits) the program is
    op_index: dict[str, int] = field(default_factory=dict, compare=False)

    def op(self, name: str) -> Op:
        return self.ops[self.op_index[name]]

    @property
    def comm_ops(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.is_comm)

    def base(self, tensor: str) -> str:
        """The tensor whose memory ``tensor`` is (itself, or what it is a view of): what
        dependencies and fusions follow."""
        return self.tensors[tensor].view_of or tensor

    def group_of(self, op: Op, rank: int = 0) -> tuple[int, ...]:
        return self.groups[op.group].of(rank)

    def summary(self) -> dict[str, Any]:
        """What ``pksim programs list`` shows of a program."""
        comm = self.comm_ops
        return {"name": self.name, "covers": list(self.covers), "world": self.world,
                "ops": len(self.ops), "collectives": len(comm),
                "comm_bytes": sum(op.comm_bytes for op in comm),
                "flops": sum(op.flops for op in self.ops),
                "description": self.description}
