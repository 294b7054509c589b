"""torch references for the rooted collectives (reduce, gather, scatter), the ones with split sizes
(all-to-all-v, all-gather-v, reduce-scatter-v, send-recv) and the reducing kernels with a reduce
op and an epilogue (kernels/collectives/rooted.cuh, varsize.cuh, epilogue.cuh).

Sizes: ``count`` as the kernels take it: the whole buffer (reduce), a rank's shard (gather,
scatter), every rank's buffer (the split-size ops, whose sizes are ``splits``, elements, as
pkc_args::splits: world x world row-major, or world shares). Buffers are packed in rank order.

Checks: copies bit-exact. Reductions against an fp32 reference (fp64 for fp32 data) of
``finish(op over ranks)``: out = op(x_r) [x 1/world: avg] [x alpha] [+ bias[i % len(bias)]], i the
element's index in the reduced buffer, within ``world x u x (|scale| x m + |bias|) + floor``, m the
sum of |x_r| for sums (each addition may round, as reference.py says) and |op(x_r)| for min and max
(exact before the epilogue; only the final rounding), u the unit roundoff of the dtype.
"""
from __future__ import annotations

from typing import Any

from validation.runtime.reference import ELEM, FLOOR, UNIT_ROUNDOFF, CheckResult, _bits

ROOTED = ("reduce", "gather", "scatter")
MATRIX = ("all-to-all-v", "send-recv")
VECTOR = ("all-gather-v", "reduce-scatter-v")
OPS = ROOTED + MATRIX + VECTOR
REDUCE_OPS = ("sum", "avg", "min", "max")


def counts(op: str, world: int, count: int) -> tuple[int, int]:
    """(input, output) elements per rank."""
    if op == "gather":
        return count, count * world
    if op == "scatter":
        return count * world, count
    return count, count            # reduce; the split-size ops: every rank's buffer


def _matrix(splits: list[int], world: int) -> list[list[int]]:
    return [splits[r * world:(r + 1) * world] for r in range(world)]


def _disp(sizes: list[int]) -> list[int]:
    out, at = [], 0
    for s in sizes:
        out.append(at)
        at += s
    return out


def traffic_bytes(op: str, world: int, count: int, dtype: str, splits: list[int] | None = None) -> int:
    """Memory traffic (read + written) any implementation on one GPU must do: every output
    element written once, every input element that reaches one read once."""
    e, w, n = ELEM[dtype], world, count
    if op == "reduce":
        return e * (w * n + n)
    if op in ("gather", "scatter"):
        return e * 2 * w * n
    if op in MATRIX:
        return e * 2 * sum(splits)
    total = sum(splits)
    if op == "all-gather-v":
        return e * (total + w * total)
    return e * (w * total + total)             # reduce-scatter-v


def nccl_bytes(op: str, world: int, count: int, dtype: str, splits: list[int] | None = None) -> int:
    """The op's size as nccl-tests counts it: the buffer (reduce), the gathered or scattered
    buffer (gather, scatter), every rank's buffer (the split-size ops)."""
    e = ELEM[dtype]
    return e * (count * world if op in ("gather", "scatter") else count)


def _finish(x, i0: int, reduce_op: str, world: int, alpha: float | None, bias):
    import torch
    if reduce_op == "avg":
        x = x / world
    if alpha is not None:
        x = x * alpha
    if bias is not None:
        idx = (torch.arange(x.numel(), device=x.device) + i0) % bias.numel()
        x = x + bias.to(x.dtype)[idx]
    return x


def _reduce_ref(xs: list, reduce_op: str, acc):
    import torch
    stack = torch.stack([x.to(acc) for x in xs])
    if reduce_op in ("sum", "avg"):
        return stack.sum(0), stack.abs().sum(0)
    value = stack.min(0).values if reduce_op == "min" else stack.max(0).values
    return value, value.abs()


def _check_reduced(got, xs: list, i0: int, dtype: str, world: int, reduce_op: str,
                   alpha: float | None, bias, where: str, notes: list) -> tuple[int, float]:
    import torch
    acc = torch.float64 if dtype == "fp32" else torch.float32
    ref, mag = _reduce_ref(xs, reduce_op, acc)
    want = _finish(ref, i0, reduce_op, world, alpha, bias)
    scale = (1.0 / world if reduce_op == "avg" else 1.0) * abs(alpha if alpha is not None else 1.0)
    bmag = 0.0 if bias is None else _finish(torch.zeros_like(ref), i0, "sum", world, None, bias).abs()
    tol = world * UNIT_ROUNDOFF[dtype] * (scale * mag + bmag) + FLOOR
    err = (got.to(acc) - want).abs()
    over = (err > tol) | ~torch.isfinite(got.to(acc))
    k = int(over.sum())
    if k:
        i = int(torch.argmax((err - tol).to(torch.float64)))
        notes.append(f"{where}: {k} elements out of tolerance (element {i}: got {float(got[i]):.6g}, "
                     f"want {float(want[i]):.6g}, tol {float(tol[i]):.3g})")
    return k, float(err.max()) if err.numel() else 0.0


def _check_copy(got, want, where: str, notes: list) -> int:
    if got.numel() == want.numel() and bool((_bits(got) == _bits(want)).all()):
        return 0
    k = int((_bits(got) != _bits(want)).sum()) if got.numel() == want.numel() else want.numel()
    notes.append(f"{where}: {k} elements differ")
    return k


def check(op: str, dtype: str, world: int, count: int, inputs: dict[int, Any],
          outputs: dict[int, Any], root: int = 0, splits: list[int] | None = None,
          reduce_op: str = "sum", alpha: float | None = None, bias=None) -> CheckResult:
    """Compare every rank's output with the reference built from every rank's ``inputs``
    (virtual ranks). ``alpha``/``bias``: the epilogue's terms when it has them (None: none).
    Also the all-reduce and reduce-scatter with a reduce op or an epilogue."""
    w, n = world, count
    bad, max_err, notes = 0, 0.0, []
    red = dict(dtype=dtype, world=w, reduce_op=reduce_op, alpha=alpha, bias=bias, notes=notes)
    if op == "reduce":
        k, e = _check_reduced(outputs[root][:n], [inputs[q][:n] for q in range(w)], 0,
                              where=f"root {root}", **red)
        bad, max_err = k, e
    elif op == "all-reduce":
        for r in range(w):
            k, e = _check_reduced(outputs[r][:n], [inputs[q][:n] for q in range(w)], 0,
                                  where=f"rank {r}", **red)
            bad, max_err = bad + k, max(max_err, e)
    elif op in ("reduce-scatter", "reduce-scatter-v"):
        c = splits if op == "reduce-scatter-v" else [n] * w
        d = _disp(c)
        for r in range(w):
            xs = [inputs[q][d[r]:d[r] + c[r]] for q in range(w)]
            k, e = _check_reduced(outputs[r][:c[r]], xs, d[r], where=f"rank {r}", **red)
            bad, max_err = bad + k, max(max_err, e)
    elif op == "gather":
        for q in range(w):
            bad += _check_copy(outputs[root][q * n:(q + 1) * n], inputs[q][:n], f"root slot {q}", notes)
    elif op == "scatter":
        for r in range(w):
            bad += _check_copy(outputs[r][:n], inputs[root][r * n:(r + 1) * n], f"rank {r}", notes)
    elif op in MATRIX:
        s = _matrix(splits, w)
        for r in range(w):
            sd = _disp(s[r])
            for p in range(w):
                if not s[r][p]:
                    continue
                rd = sum(s[q][p] for q in range(r))
                bad += _check_copy(outputs[p][rd:rd + s[r][p]], inputs[r][sd[p]:sd[p] + s[r][p]],
                                   f"rank {p} from {r}", notes)
    elif op == "all-gather-v":
        d = _disp(splits)
        for q in range(w):
            for r in range(w):
                bad += _check_copy(outputs[q][d[r]:d[r] + splits[r]], inputs[r][:splits[r]],
                                   f"rank {q} share {r}", notes)
    else:
        raise KeyError(op)
    if op not in ("reduce", "all-reduce", "reduce-scatter", "reduce-scatter-v") and bad:
        max_err = float("inf")
    return CheckResult(bad == 0, max_err, bad, "; ".join(notes[:4]))
