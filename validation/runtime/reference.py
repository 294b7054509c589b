"""torch references for the generated collectives, the tolerance of their checks, and the
bytes each collective must move (for bandwidth figures).

Sizes follow kernels/collectives: ``count`` is the per-rank shard for all-gather,
reduce-scatter and all-to-all, the whole buffer for all-reduce and broadcast.

Checks: copies (all-gather, all-to-all, broadcast) must be bit-exact. Reductions are compared
with an fp32 reference (fp64 for fp32 data) within ``world x u x sum_r |x_r| + floor``, u the
unit roundoff of the element type (2^-8 bf16, 2^-24 fp32): each of the world - 1 additions of a
ring may round its partial sum to the element type, and the final rounding is one more, so the
bound grows with the world size. One-shot and two-shot sum in fp32 and round once, well inside.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp32": 2.0 ** -24}
FLOOR = 1e-6
ELEM = {"bf16": 2, "fp32": 4}
COPIES = ("all-gather", "all-to-all", "broadcast")


def counts(op: str, world: int, count: int) -> tuple[int, int]:
    """(input, output) elements per rank."""
    if op == "all-gather":
        return count, count * world
    if op == "reduce-scatter":
        return count * world, count
    if op == "all-to-all":
        return count * world, count * world
    if op in ("all-reduce", "broadcast"):
        return count, count
    raise KeyError(op)


def count_for_bytes(op: str, world: int, nbytes: int, dtype: str) -> int:
    """``count`` for an nccl-tests ``--bytes`` (output per rank for all-gather, input per rank
    for reduce-scatter and all-to-all, the buffer for all-reduce and broadcast)."""
    elems = nbytes // ELEM[dtype]
    return max(1, elems // world) if op in ("all-gather", "reduce-scatter", "all-to-all") else max(1, elems)


def nccl_bytes(op: str, world: int, count: int, dtype: str) -> int:
    i, o = counts(op, world, count)
    return (o if op == "all-gather" else i) * ELEM[dtype]


def min_traffic_bytes(op: str, world: int, count: int, dtype: str) -> int:
    """Memory traffic (bytes read + written) that any implementation on ONE GPU (virtual
    ranks) must do: every rank's output written once and every input element that reaches it
    read at least once.

    all-gather      reads W x n (each shard once), writes W x W n
    reduce-scatter  reads W x W n (every input element), writes W x n
    all-reduce      reads W x N, writes W x N
    all-to-all      reads W x W n, writes W x W n
    broadcast       reads N (the root's buffer once), writes W x N
    A device-to-device copy of B bytes moves 2 B the same way, so efficiency against the copy
    bandwidth is (traffic / time) / (2 x copy bytes per second)."""
    e, w, n = ELEM[dtype], world, count
    return e * {
        "all-gather": w * n + w * w * n,
        "reduce-scatter": w * w * n + w * n,
        "all-reduce": 2 * w * n,
        "all-to-all": 2 * w * w * n,
        "broadcast": n + w * n,
    }[op]


def busbw_factor(op: str, world: int) -> float:
    if op == "all-reduce":
        return 2 * (world - 1) / world
    if op in ("all-gather", "reduce-scatter", "all-to-all"):
        return (world - 1) / world
    return 1.0


def fill_inputs(inputs: dict[int, Any], seed: int) -> None:
    """Random normal values in every rank's input (the dtype of the views)."""
    import torch
    gen = torch.Generator(device=next(iter(inputs.values())).device)
    for r in sorted(inputs):
        gen.manual_seed(seed * 1000 + r)
        inputs[r].normal_(generator=gen)


@dataclass
class CheckResult:
    ok: bool
    max_err: float
    bad: int
    detail: str = ""


def _bits(t):
    import torch
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def check(op: str, dtype: str, world: int, count: int, inputs: dict[int, Any],
          outputs: dict[int, Any], root: int = 0) -> CheckResult:
    """Compare every local rank's output with the reference built from ``inputs`` (which must
    hold every rank's input: virtual ranks, or gathered ones). The references of all ranks
    come from one stack of the inputs (a world of 128 checks in a few tensor operations, not
    world x world slices)."""
    import torch
    n = count
    bad = 0
    max_err = 0.0
    notes = []
    stack = torch.stack([inputs[q] for q in range(world)])        # [world, in_count]
    if op in COPIES:
        if op == "all-gather":
            want_of = lambda r: stack.reshape(-1)                  # noqa: E731
        elif op == "all-to-all":
            blocks = stack.reshape(world, world, n).transpose(0, 1)    # [dst r][src q]
            want_of = lambda r: blocks[r].reshape(-1)              # noqa: E731
        else:
            want_of = lambda r: stack[root]                        # noqa: E731
        for r, out in outputs.items():
            diff = _bits(out) != _bits(want_of(r))
            k = int(diff.sum())
            if k:
                bad += k
                first = int(torch.nonzero(diff)[0])
                notes.append(f"rank {r}: {k} elements differ (first at element {first}, block "
                             f"{first // n if op != 'broadcast' else 0})")
        return CheckResult(bad == 0, 0.0 if bad == 0 else float("inf"), bad, "; ".join(notes[:4]))
    acc = torch.float64 if dtype == "fp32" else torch.float32
    u = UNIT_ROUNDOFF[dtype]
    x = stack.to(acc)
    if op == "reduce-scatter":
        ref_all, mag_all = x.reshape(world, world, n).sum(0), x.abs().reshape(world, world, n).sum(0)
        ref_of = lambda r: (ref_all[r], mag_all[r])                # noqa: E731
    else:
        ref, mag = x.sum(0), x.abs().sum(0)
        ref_of = lambda r: (ref, mag)                              # noqa: E731
    for r, out in outputs.items():
        ref, mag = ref_of(r)
        err = (out.to(acc) - ref).abs()
        tol = world * u * mag + FLOOR
        over = err > tol
        k = int(over.sum()) + int((~torch.isfinite(out.to(acc))).sum())
        max_err = max(max_err, float(err.max()))
        if k:
            bad += k
            i = int(torch.argmax((err - tol).to(torch.float64)))
            notes.append(f"rank {r}: {k} elements out of tolerance (element {i}: got "
                         f"{float(out[i]):.6g}, want {float(ref[i]):.6g}, tol {float(tol[i]):.3g})")
    return CheckResult(bad == 0, max_err, bad, "; ".join(notes[:4]))
