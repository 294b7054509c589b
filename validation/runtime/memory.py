"""What a case of the generated collectives or of the fused kernels allocates on the GPU, its
virtual ranks together, and whether it fits: ``pksim validate --prepare`` leaves out the cases the GPU it will run on
cannot hold (its capacity: the system's, or ``--gpu-memory``), and the GPU run skips a case its
free memory cannot hold, with the reason, rather than fail with an out-of-memory error
(docs/decisions/D70.md).

A rank allocates (``Collective`` in validation/runtime/collectives.py) its input and its output
(with a guard tail of GUARD_BYTES), its flags and its scratch: the kernels' ``scratch_bytes``
(SM mechanisms) or ``ce_scratch_bytes`` (copy engines), written out below from
kernels/collectives/all_reduce.cuh, reduce_scatter.cuh and rhd.cuh (every other kernel has
none); n is the kernel's count, elements. A copy-bandwidth case holds a source and a
destination. A fused case (``fused_case_bytes``: validation/runtime/fused.FusedCall, and the
"none" baseline of validation/run/fused.none_case_steps) holds every rank's A, B and output
(with its guard), the pull kernels' partials or ag-gemm's gathered copy (kernels/fused/entry.cuh
``requirements``: m x n or m x k bf16 per rank), and for a checked case the fp32 reference and
its temporaries (CHECK_COPIES of m x n fp32). Besides the cases, a run holds RESERVED_B: the L2 flush buffer
(validation/runtime/timer.FLUSH_BYTES) and the CUDA context, libraries and allocator slack
(an estimate).
"""
from __future__ import annotations

from typing import Callable

from hwmodels.units import format_bytes
from validation.runtime import reference, reference_comm
from validation.runtime.collectives import GUARD_BYTES
from validation.runtime.timer import FLUSH_BYTES

RESERVED_B = FLUSH_BYTES + (1 << 30)
FLAG_BYTES = 1 << 16             # a rank's flag counters: a few thousand at most


def _round16(x: int) -> int:
    return -(-x // 16) * 16


def _slot(n: int, elem: int) -> int:                       # slot_elems_bytes
    return _round16(n * elem)


def _chunk_slot(n: int, world: int, elem: int) -> int:     # chunk_slot_bytes
    return _round16(-(-n // world) * elem)


def scratch_bytes(op: str, algorithm: str, mechanism: str, n: int, world: int,
                  elem: int) -> int:
    """One rank's scratch, as the kernel's (ce_)scratch_bytes(n, world, elem) gives it."""
    ce = mechanism == "copy-engine"
    if op == "all-reduce":
        if algorithm == "direct":
            return world * _slot(n, elem) if ce else 0
        if algorithm == "two-shot":
            return world * _chunk_slot(n, world, elem) if ce else 0
        if algorithm == "ring":
            return (world if ce else world - 1) * _chunk_slot(n, world, elem)
        if algorithm == "rhd":
            return _round16(n * elem) if world > 2 else 0
    if op == "reduce-scatter":
        if algorithm == "direct":
            return world * _slot(n, elem) if ce else 0
        if algorithm == "ring":
            return (world if ce else world - 1) * _slot(n, elem)
        if algorithm == "rhd":
            return world // 2 * n * elem if world > 2 else 0
    return 0


BF16 = 2
FUSED_GUARD = 1024 * BF16        # validation/runtime/fused.GUARD elements after every output
FUSED_TABLE = 1 << 20            # the device table, flags and error record: a few KiB at most
CHECK_COPIES = 3                 # the fp32 reference, a rank's product and the difference


def fused_case_bytes(case: dict) -> int:
    """The GPU memory a fused case (kind fused, timeout or none) allocates, its ranks
    together; 0 for an argument check (no buffers)."""
    kind = case.get("kind")
    if kind not in ("fused", "timeout", "none") or \
            not all(x in case for x in ("op", "world", "m", "n", "k")):
        return 0
    op = case["op"]
    w, m, n, k = (int(case[x]) for x in ("world", "m", "n", "k"))
    b = w * k * n * BF16
    check = CHECK_COPIES * m * n * 4 if case.get("check", True) else 0
    if kind == "none":
        algorithm, _, mechanism = case.get("collective", "direct/register").partition(" ")[2] \
            .partition("/")
        if op == "ag-gemm":                     # A gathered by all-gather, one C per rank
            coll = {"op": "all-gather", "count": -(-m // w) * k}
            rest = m * k * BF16 + w * m * n * BF16
        else:                                   # the partial products reduced in place
            coll = {"op": "reduce-scatter" if op == "gemm-rs" else "all-reduce",
                    "count": m * n // w if op == "gemm-rs" else m * n}
            rest = w * m * k * BF16
        coll.update(world=w, algorithm=algorithm or "direct", mechanism=mechanism or "register",
                    dtype="bf16")
        return b + rest + case_bytes(coll) + check
    a = 2 * m * k * BF16 if op == "ag-gemm" else w * m * k * BF16
    out = (m * n * BF16 if op == "gemm-rs" else w * m * n * BF16) + w * FUSED_GUARD
    inter = case.get("overlap") == "inter-sm"
    partial = w * m * n * BF16 if inter and op in ("gemm-rs", "gemm-ar") else 0
    gathered = w * m * k * BF16 if inter and op == "ag-gemm" else 0
    return a + b + out + partial + gathered + w * FUSED_TABLE + check


def needed_bytes(case: dict) -> int:
    """What ``case`` allocates: a fused case's (``fused_case_bytes``) or a collective's."""
    if case.get("kind") in ("fused", "timeout", "none", "arg_check"):
        return fused_case_bytes(case)
    return case_bytes(case)


def case_bytes(case: dict) -> int:
    """The GPU memory a case allocates (every virtual rank's buffers together)."""
    if case.get("kind") == "copy_bw":
        return 2 * int(case["bytes"])
    op, world, count = case["op"], int(case["world"]), int(case["count"])
    elem = reference.ELEM[case.get("dtype", "bf16")]
    ins, outs = (reference_comm if op in reference_comm.OPS else reference).counts(op, world,
                                                                                     count)
    scratch = scratch_bytes(op, case["algorithm"], case["mechanism"], count, world, elem)
    return world * (ins * elem + outs * elem + GUARD_BYTES + scratch + FLAG_BYTES)


def too_big(case: dict, capacity_B: float, what: str) -> str | None:
    """Why ``case`` cannot run in ``capacity_B`` bytes of GPU memory (None if it can), with
    RESERVED_B kept for the run itself; ``what`` names the memory (e.g. "the 80 GB of an H100")."""
    need = needed_bytes(case)
    if need + RESERVED_B <= capacity_B:
        return None
    return (f"needs {format_bytes(need)} of GPU memory (+ {format_bytes(RESERVED_B)} for the "
            f"run), more than {what}")


def fitting(cases: list[dict], capacity_B: float, what: str) -> tuple[list[dict], list[dict]]:
    """(the cases that fit, [{"id", "reason"} of those left out])."""
    kept, left = [], []
    for case in cases:
        why = too_big(case, capacity_B, what) if case.get("op") or case.get("kind") else None
        if why is None:
            kept.append(case)
        else:
            left.append({"id": case["id"], "reason": why})
    return kept, left


def free_bytes(torch) -> int:
    """What this process can still allocate on its GPU: the driver's free memory and what
    torch's allocator holds freed (reserved, not allocated)."""
    free, _total = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


def skip_reason(case: dict, free_B: int) -> str | None:
    """Why the GPU run skips ``case`` (None: it runs): its buffers do not fit the ``free_B``
    bytes free now."""
    need = needed_bytes(case)
    if need <= free_B:
        return None
    return (f"skipped: needs {format_bytes(need)} of GPU memory, {format_bytes(free_B)} free "
            f"(validation.runtime.memory)")



def memory_skip(case: dict, free: Callable[[], int]) -> dict | None:
    """The GPU step's check before each case: the row's fields if the memory ``free()``
    reports now (``free_bytes`` of torch on the GPU; a stand-in in tests) cannot hold
    ``case`` (ok False, skipped True, the reason; the report counts it as not run), else
    None. A case that allocates nothing never asks."""
    if needed_bytes(case) == 0:
        return None
    why = skip_reason(case, free())
    if why is None:
        return None
    return {"ok": False, "skipped": True, "memory_skip": True, "error": why, "wall_s": 0.0}
