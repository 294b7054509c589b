"""Argument checks of the pksim.torch ops, on anything shaped like a torch tensor (``dtype``,
``device``, ``is_contiguous()``, ``numel()``, ``element_size()``, ``shape``): the tests pass
stand-ins, so none of this imports torch. Every failure is one ``CommError`` line naming the
op, the argument and what was wrong.

Element types: the generated reductions add bf16 and fp32 (``REDUCE_DTYPES``); copies move any
type as 4- or 2-byte words (``copy_unit``); a 1-byte type of odd length is widened first (the
communicator's job). Sizes that must agree between ranks are compared after the ranks have
exchanged them (``agree``)."""
from __future__ import annotations

from typing import Any, Sequence

from pksim.torch.errors import CommError

REDUCE_DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}
REDUCE_OPS = ("sum", "avg", "min", "max", "product")


def dtype_name(t: Any) -> str:
    return str(t.dtype)


def check_tensor(op: str, name: str, t: Any, device: Any = None) -> int:
    """A contiguous CUDA tensor on ``device`` (when given); returns its bytes."""
    if not all(hasattr(t, a) for a in ("dtype", "device", "is_contiguous", "numel", "element_size")):
        raise CommError(f"{op}: {name} must be a torch tensor, got {type(t).__name__}")
    dev = t.device
    if getattr(dev, "type", str(dev)) != "cuda":
        raise CommError(f"{op}: {name} is on {dev}; pksim.torch moves CUDA tensors only")
    if device is not None and str(dev) != str(device) and getattr(dev, "index", None) != getattr(device, "index", -1):
        raise CommError(f"{op}: {name} is on {dev}, this communicator's device is {device}")
    if not t.is_contiguous():
        raise CommError(f"{op}: {name} is not contiguous (call .contiguous() first)")
    return int(t.numel()) * int(t.element_size())


def reduce_dtype(op: str, t: Any) -> str | None:
    """The kernels' name of a tensor's type if the generated reductions add it, else None
    (the communicator then gathers and reduces with torch)."""
    return REDUCE_DTYPES.get(dtype_name(t))


def check_reduce_op(op: str, reduce_op: str) -> str:
    name = str(reduce_op).lower().removeprefix("reduceop.").removeprefix("redopt_type.")
    if name not in REDUCE_OPS:
        raise CommError(f"{op}: reduce op {reduce_op!r} is not one of {', '.join(REDUCE_OPS)}")
    return name


def copy_unit(nbytes: Sequence[int]) -> int:
    """The widest word (4 or 2 bytes) that divides every byte count; 1 when one is odd."""
    for unit in (4, 2):
        if all(n % unit == 0 for n in nbytes):
            return unit
    return 1


def check_root(op: str, root: int, world: int) -> int:
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < world:
        raise CommError(f"{op}: root {root!r} is not a rank of this communicator (0..{world - 1})")
    return root


def check_divisible(op: str, name: str, rows: int, world: int) -> int:
    if rows % world:
        raise CommError(f"{op}: {name} has {rows} rows in dim 0, not a multiple of the world ({world})")
    return rows // world


def check_splits(op: str, name: str, splits: Any, world: int, rows: int | None = None) -> list[int]:
    """``world`` non-negative ints (rows of dim 0 per rank) that add up to ``rows`` when given."""
    try:
        out = [int(s) for s in splits]
    except (TypeError, ValueError):
        raise CommError(f"{op}: {name} must be a list of {world} ints, got {splits!r}") from None
    if len(out) != world or any(s < 0 for s in out) or any(int(s) != s for s in splits):
        raise CommError(f"{op}: {name} must be {world} non-negative ints, got {list(splits)}")
    if rows is not None and sum(out) != rows:
        raise CommError(f"{op}: {name} add up to {sum(out)} rows, the tensor has {rows}")
    return out


def row_bytes(t: Any) -> int:
    """Bytes of one row of dim 0 (a 0-d tensor is one row), whatever the number of rows."""
    return _prod(tuple(t.shape)[1:]) * int(t.element_size())


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def agree(op: str, what: str, values: Sequence[Any], ranks: Sequence[int] | None = None) -> Any:
    """The one value every rank passed, or a CommError naming the first rank that differs."""
    first = values[0]
    for i, v in enumerate(values):
        if v != first:
            r = ranks[i] if ranks else i
            r0 = ranks[0] if ranks else 0
            raise CommError(f"{op}: ranks disagree on {what}: rank {r0} passed {first}, rank {r} {v}")
    return first
