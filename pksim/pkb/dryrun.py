"""``pksim pkb check --dry-run``: the check on the CPU, without a GPU.

Everything of the check runs as on a GPU (PKB's inputs at the world, five trials, the
reference on gloo, the solution through ``PksimDist`` and the Communicator's own argument
checks, splits, element-type handling and the model's choice of kernel for every call), except
the generated kernels: ``EmulatedCommunicator`` moves each call's bytes with gloo
(``all_gather_object``) and computes what the kernel of that op would leave on this rank
(reductions added in fp32 and rounded once, as the kernels add). The fused ops run as their
torch.matmul + collective fallback. So a dry run finds what the solutions get wrong around the
kernels (a torch.distributed call the shim maps wrongly, a size or split that pksim.torch
refuses) and what the reference needs, on CPU tensors; it checks no kernel, and the guard on
torch.distributed's data calls does not fire on CPU tensors.
"""
from __future__ import annotations

from typing import Any

import pksim.torch.comm as torch_comm
import pksim.torch.fused as torch_fused
from pksim.pkb import check as pkb_check
from pksim.pkb import shim
from pksim.torch.checks import agree
from pksim.torch.choice import choose, system_named
from pksim.torch.comm import Communicator, HostGroup, need_torch
from pksim.torch.errors import CommError

ELEMENT = {"bf16": "bfloat16", "fp32": "float32"}


def _cpu_check_tensor(op: str, name: str, t: Any, device: Any = None) -> int:
    """checks.check_tensor with CPU tensors taken for the GPU's."""
    if not all(hasattr(t, a) for a in ("dtype", "device", "is_contiguous", "numel", "element_size")):
        raise CommError(f"{op}: {name} must be a torch tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise CommError(f"{op}: {name} is not contiguous (call .contiguous() first)")
    return int(t.numel()) * int(t.element_size())


class EmulatedCommunicator(Communicator):
    """A Communicator whose kernels are gloo exchanges of CPU tensors (see the module)."""

    def __init__(self, group=None, *, system: str | None = None, host_group=None,
                 host_sync: bool | None = None):
        self.torch, dist = need_torch()
        self.host = HostGroup(dist, group, host_group)
        self.rank, self.world, self.ranks = self.host.rank, self.host.world, self.host.ranks
        self.device = self.torch.device("cpu")
        self.placement, self.host_sync = "separate", True
        self.system = system_named(system or "dgx-h100")
        self._bindings: dict = {}
        self._fused_bindings: dict = {}
        self.notes: list[str] = []
        self.calls: list[tuple[str, str]] = []

    def _not_capturing(self, op: str) -> None:
        return None

    def _fused(self, op: str, a, b, m: int, n: int, k: int, coll: str, compose):
        self.calls.append((op, f"emulated: torch.matmul + {coll}"))
        return compose()

    def synchronize(self) -> None:
        return None

    def close(self) -> None:
        self.host.barrier()

    def _call(self, op: str, model_bytes: int, dtype: str, count: int, src, out_bytes: int,
              root: int = 0, splits: list[int] | None = None, reduce_op: str = "sum",
              signature: tuple = ()):
        choice = choose(self.system.name, op, model_bytes, self.world, dtype, reduce_op)
        self.calls.append((op, choice.schedule.label()))
        mine = bytes(src.numpy().tobytes()) if src is not None and src.numel() else b""
        got = self.host.all_gather_object((op, choice.kernel.key(), signature, mine))
        agree(op, "the call (op, kernel, sizes)", [g[:3] for g in got], self.ranks)
        raw = _result(self.torch, op, [g[3] for g in got], self.rank, dtype, count, root, splits,
                      reduce_op)
        out = self.torch.zeros(out_bytes, dtype=self.torch.uint8)
        n = min(out_bytes, raw.numel())
        out[:n] = raw[:n]
        return out


def _result(torch, op: str, srcs: list[bytes], me: int, dtype: str, count: int, root: int,
            splits: list[int] | None, rop: str):
    """This rank's output bytes of ``op`` given every rank's input bytes."""
    world = len(srcs)
    el = getattr(torch, ELEMENT[dtype])
    unit = 4 if dtype == "fp32" else 2
    t = [torch.frombuffer(bytearray(s), dtype=torch.uint8) if s else torch.zeros(0, dtype=torch.uint8)
         for s in srcs]
    if op in ("all-reduce", "reduce", "reduce-scatter"):
        vals = torch.stack([x.view(el).float() for x in t])
        red = {"sum": vals.sum(0), "avg": vals.mean(0), "min": vals.amin(0), "max": vals.amax(0)}[rop]
        red = red.to(el).view(torch.uint8)
        if op == "reduce-scatter":
            return red.view(world, -1)[me]
        return red
    if op in ("all-gather", "gather"):
        return torch.cat(t)
    if op == "broadcast":
        return t[root]
    if op == "scatter":
        return t[root].view(world, -1)[me]
    if op == "all-to-all":
        return torch.cat([x.view(world, -1)[me] for x in t])
    if op == "all-gather-v":
        return torch.cat(t)
    if op in ("all-to-all-v", "send-recv"):
        words = [splits[q * world:(q + 1) * world] for q in range(world)]
        pieces = []
        for q in range(world):
            at = sum(words[q][:me]) * unit
            pieces.append(t[q][at:at + words[q][me] * unit])
        return torch.cat(pieces)
    raise CommError(f"dry run: no emulation of {op}")


def _patch() -> None:
    """Put the emulation in place (in every rank's process: ``worker`` calls it)."""
    torch_comm.check_tensor = _cpu_check_tensor
    torch_fused.check_tensor = _cpu_check_tensor
    shim.Communicator = EmulatedCommunicator


def worker(rank: int, world: int, cfg: dict, port: int) -> None:
    _patch()
    pkb_check.worker(rank, world, cfg, port)


def run(problems: list[dict], results, pkb: str, world: int = 8, trials: int = 5,
        deadline_s: float = 120.0, budget_s: float | None = None, say=print) -> list[dict]:
    """``check.run`` on the CPU with the emulated kernels."""
    return pkb_check.run(problems, results, pkb, world, trials, deadline_s, False, 0, 1, budget_s,
                         say=say, prebuild=False, device="cpu", worker_fn=worker)
