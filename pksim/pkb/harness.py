"""What ``pksim pkb check`` does around a solution: compare outputs as PKB does, run the
reference's collectives on gloo, and forbid torch.distributed data calls on CUDA tensors.

* ``match(ref, sol)``: PKB's rule (utils/problem_id.py): tensors of equal shape within
  ``torch.allclose(ref.float(), sol.float(), atol, rtol)``, dicts by key, sequences by position,
  anything else by ``==``; here also the largest |difference| and the first mismatch's path.
* ``GlooCuda``: the reference's ``dist`` on one GPU, where NCCL cannot run several ranks: every
  collective's CUDA tensors are copied to the CPU, the call runs on gloo, and what it wrote is
  copied back; an async call completes before it returns. Where gloo lacks a call the
  equivalent is made of calls it has, and where it differs from NCCL it is made to behave as
  NCCL does (``ADAPTATIONS`` names each; the report lists those used): gloo adds bf16 and fp16
  one rank after another, rounding every partial sum, where NCCL and the generated kernels add
  in fp32 and round far less, so those sums run on fp32 copies rounded once; and gloo's reduce
  leaves partial sums on the other ranks, where NCCL leaves their tensor as it was.
* ``forbid_cuda_collectives``: while a solution runs, every torch.distributed data call (the
  module's and distributed_c10d's, where the object collectives call them) raises on a CUDA
  tensor, so a solution that moves data with NCCL fails the check.
"""
from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

from pksim.torch.errors import CommError

DATA_CALLS = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
              "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce",
              "gather", "scatter", "send", "recv", "isend", "irecv", "batch_isend_irecv",
              "all_gather_coalesced", "all_reduce_coalesced", "_all_gather_base",
              "_reduce_scatter_base")
ADAPTATIONS = {
    "reduce_scatter_tensor": "reduce_scatter_tensor as all_reduce of the whole input, then the rank's rows",
    "reduce_scatter": "reduce_scatter (list) as all_reduce of the stacked inputs, then the rank's block",
    "all_gather_into_tensor": "all_gather_into_tensor as all_gather into a list of chunks, then concatenated",
    "all_gather_uneven": "all_gather of tensors of different sizes as one broadcast per member",
    "all_to_all": "all_to_all (lists) as one batch of isend / irecv pairs",
    "fp32_sum": "bf16 / fp16 reductions on fp32 copies, rounded once (gloo rounds every partial sum)",
    "reduce_keeps": "reduce: the ranks other than dst keep their tensor, as NCCL leaves it",
}
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")


def match(ref: Any, sol: Any, atol: float, rtol: float, path: str = "") -> tuple[bool, float, str]:
    """(equal by PKB's rule, largest |ref - sol| over the tensors, first mismatch)."""
    import torch
    if isinstance(ref, dict) and isinstance(sol, dict):
        if set(ref) != set(sol):
            return False, math.inf, f"{path or 'output'}: keys {sorted(map(str, ref))} vs {sorted(map(str, sol))}"
        items = [(f"{path}.{k}", ref[k], sol[k]) for k in sorted(ref, key=str)]
    elif isinstance(ref, (list, tuple)) and isinstance(sol, (list, tuple)):
        if len(ref) != len(sol):
            return False, math.inf, f"{path or 'output'}: length {len(ref)} vs {len(sol)}"
        items = [(f"{path}[{i}]", a, b) for i, (a, b) in enumerate(zip(ref, sol))]
    elif isinstance(ref, torch.Tensor) and isinstance(sol, torch.Tensor):
        a, b = ref.detach().cpu().float(), sol.detach().cpu().float()
        if a.shape != b.shape:
            return False, math.inf, f"{path or 'output'}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        ok = bool(torch.allclose(a, b, atol=atol, rtol=rtol))
        return ok, diff, "" if ok else f"{path or 'output'}: not allclose, max |diff| {diff:.4g}"
    else:
        try:
            ok = bool(ref == sol)
        except Exception as exc:  # noqa: BLE001 - PKB counts a failed compare as a mismatch
            return False, math.inf, f"{path or 'output'}: compare failed: {exc}"
        return ok, 0.0, "" if ok else f"{path or 'output'}: {ref!r} vs {sol!r}"
    worst, first, ok = 0.0, "", True
    for p, a, b in items:
        good, d, why = match(a, b, atol, rtol, p)
        worst = max(worst, d)
        if not good and ok:
            ok, first = False, why
    return ok, worst, first


def _tensors(obj: Any) -> Iterator[Any]:
    import torch
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)
    elif hasattr(obj, "tensor") and hasattr(obj, "op"):      # a P2POp
        yield obj.tensor


def _to_cpu(obj: Any, moved: list, wide: bool = False) -> Any:
    """A CPU copy of every CUDA tensor in ``obj`` (``wide``, a reduction: bf16 and fp16 as fp32,
    and CPU tensors taken too, so that the NCCL-like adaptations cover them)."""
    import torch
    if isinstance(obj, torch.Tensor) and (obj.is_cuda or wide):
        c = obj.detach().cpu()
        if wide and c.dtype in (torch.bfloat16, torch.float16):
            c = c.float()
        moved.append((obj, c))
        return c
    if isinstance(obj, list):
        return [_to_cpu(x, moved, wide) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(x, moved, wide) for x in obj)
    return obj


class _Done:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class GlooCuda:
    """torch.distributed for a reference on one GPU (see the module)."""

    def __init__(self, dist):
        self._dist = dist
        self.used: Counter = Counter()

    def __getattr__(self, name: str):
        real = getattr(self._dist, name)
        if name not in DATA_CALLS or name in ("isend", "irecv", "send", "recv"):
            return real
        return lambda *a, **k: self._call(name, real, a, k)

    def _call(self, name: str, real, args, kwargs):
        asked_async = bool(kwargs.pop("async_op", False))
        if name == "batch_isend_irecv":
            return self._batch(args[0])
        moved: list = []
        wide = name in REDUCING
        cargs = [_to_cpu(a, moved, wide) for a in args]
        ckw = {k: _to_cpu(v, moved, wide) for k, v in kwargs.items()}
        if any(c.dtype != t.dtype for t, c in moved):
            self.used["fp32_sum"] += 1
        keep = None
        if name == "reduce":
            dst = kwargs.get("dst", args[1] if len(args) > 1 else 0)
            group = kwargs.get("group")
            dst_rank = kwargs.get("group_dst")
            mine = self._dist.get_rank(group) if dst_rank is not None else self._dist.get_rank()
            if mine != (dst_rank if dst_rank is not None else dst):
                keep = [c.clone() for _, c in moved]
                self.used["reduce_keeps"] += 1
        adapted = type(self).__dict__.get(f"_{name}")
        if adapted is not None and adapted(self, *cargs, **ckw):
            pass
        else:
            real(*cargs, **ckw)
        if keep is not None:
            for (_, cpu_t), saved in zip(moved, keep):
                cpu_t.copy_(saved)
        for cuda_t, cpu_t in moved:
            cuda_t.copy_(cpu_t)
        return _Done() if asked_async else None

    def _batch(self, ops):
        moved: list = []
        real = [self._dist.P2POp(op.op, _to_cpu(op.tensor, moved), op.peer, op.group, op.tag)
                for op in ops]
        for work in self._dist.batch_isend_irecv(real):
            work.wait()
        for cuda_t, cpu_t in moved:
            cuda_t.copy_(cpu_t)
        return [_Done() for _ in ops]

    # ---- what gloo lacks (each returns True when it made the call) ------------------------
    def _reduce_scatter_tensor(self, output, input, op=None, group=None, **_):
        d = self._dist
        full = input.clone()
        d.all_reduce(full, op=op or d.ReduceOp.SUM, group=group)
        r = d.get_rank(group)
        n = output.numel()
        output.view(-1).copy_(full.view(-1)[r * n:(r + 1) * n])
        self.used["reduce_scatter_tensor"] += 1
        return True

    def _reduce_scatter(self, output, input_list, op=None, group=None, **_):
        import torch
        d = self._dist
        full = torch.stack([t.reshape(-1) for t in input_list])
        d.all_reduce(full, op=op or d.ReduceOp.SUM, group=group)
        output.view(-1).copy_(full[d.get_rank(group)])
        self.used["reduce_scatter"] += 1
        return True

    def _all_gather_into_tensor(self, output, input, group=None, **_):
        d = self._dist
        w = d.get_world_size(group)
        chunks = list(output.view(w, -1).unbind(0))
        d.all_gather(chunks, input.reshape(-1), group=group)
        self.used["all_gather_into_tensor"] += 1
        return True

    def _all_to_all(self, output_tensor_list, input_tensor_list, group=None, **_):
        d = self._dist
        me = d.get_rank(group)
        ranks = d.get_process_group_ranks(group) if group is not None else list(range(d.get_world_size()))
        ops = []
        for p, peer in enumerate(ranks):
            if p == me:
                output_tensor_list[p].copy_(input_tensor_list[p])
                continue
            ops += [d.P2POp(d.isend, input_tensor_list[p].contiguous(), peer, group),
                    d.P2POp(d.irecv, output_tensor_list[p], peer, group)]
        for work in (d.batch_isend_irecv(ops) if ops else []):
            work.wait()
        self.used["all_to_all"] += 1
        return True

    def _all_gather(self, tensor_list, tensor, group=None, **_):
        if all(t.shape == tensor.shape for t in tensor_list):
            return False
        d = self._dist
        ranks = d.get_process_group_ranks(group) if group is not None else range(d.get_world_size())
        for i, src in enumerate(ranks):
            if i == d.get_rank(group):
                tensor_list[i].copy_(tensor)
            d.broadcast(tensor_list[i], src=src, group=group)
        self.used["all_gather_uneven"] += 1
        return True


@contextmanager
def forbid_cuda_collectives(dist) -> Iterator[None]:
    """torch.distributed's data calls raise on CUDA tensors inside this block (see the module)."""
    c10d = dist.distributed_c10d
    saved = []
    for module in (dist, c10d):
        for name in DATA_CALLS:
            real = getattr(module, name, None)
            if real is None:
                continue
            saved.append((module, name, real))
            setattr(module, name, _guarded(name, real))
    try:
        yield
    finally:
        for module, name, real in saved:
            setattr(module, name, real)


def _guarded(name: str, real):
    def call(*args, **kwargs):
        for t in _tensors(list(args) + list(kwargs.values())):
            if getattr(t, "is_cuda", False):
                raise CommError(f"torch.distributed.{name} on a CUDA tensor while a pksim "
                                f"solution runs (its data must move through pksim.torch)")
        return real(*args, **kwargs)
    call.__name__ = name
    return call
