"""What a case of the generated collectives allocates on the GPU, its virtual ranks together,
and whether it fits: ``pksim validate --prepare`` leaves out the cases the GPU it will run on
cannot hold (its capacity: the system's, or ``--gpu-memory``), and the GPU run skips a case its
free memory cannot hold, with the reason, rather than fail with an out-of-memory error
(docs/decisions/D70.md).

A rank allocates (``Collective`` in validation/runtime/collectives.py) its input and its output
(with a guard tail of GUARD_BYTES), its flags and its scratch: the kernels' ``scratch_bytes``
(SM mechanisms) or ``ce_scratch_bytes`` (copy engines), written out below from
kernels/collectives/all_reduce.cuh, reduce_scatter.cuh and rhd.cuh (every other kernel has
none); n is the kernel's count, elements. A copy-bandwidth case holds a source and a
destination. Besides the cases, a run holds RESERVED_B: the L2 flush buffer
(validation/runtime/timer.FLUSH_BYTES) and the CUDA context, libraries and allocator slack
(an estimate).
"""
from __future__ import annotations

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
    need = case_bytes(case)
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
    need = case_bytes(case)
    if need <= free_B:
        return None
    return (f"skipped: needs {format_bytes(need)} of GPU memory, {format_bytes(free_B)} free "
            f"(validation.runtime.memory)")

