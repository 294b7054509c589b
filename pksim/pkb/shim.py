"""``PksimDist``: the part of ``torch.distributed`` that ParallelKernelBench references call,
with every collective on CUDA tensors made by pksim.torch (generated kernels).

A solution runs the reference's own compute with this object in place of the module's
``dist``; so each ``dist.all_reduce(t)`` becomes ``t.copy_(comm.all_reduce(t))`` on the
communicator of that process group (made on first use, one per group, every member calling
it at the same point as a collective requires). What is not data stays torch.distributed's, on
the host: ranks, groups, ``new_group``, object collectives (``all_gather_object`` and the like,
pickled objects over gloo), barriers. Calls with ``async_op=True`` complete before they return
(their Work's ``wait()`` is immediate). Root and peer arguments are global ranks, as in torch;
they are mapped to the group's ranks here.

How each call maps (``Tally`` counts them per problem for the report):

=========================  ======================================================
torch.distributed          pksim.torch
=========================  ======================================================
all_reduce, reduce         all_reduce, reduce (other types and PRODUCT: all-gather
                           kernel + torch reduction)
all_gather(_into_tensor)   all_gather; tensors of different sizes: all_gather_v
reduce_scatter(_tensor)    reduce_scatter
all_to_all_single          all_to_all (with split sizes: the all-to-all-v kernel)
all_to_all (lists)         send_recv (each message its own size; own block copied)
broadcast, gather, scatter broadcast, gather, scatter
batch_isend_irecv          send_recv over the group of its ops (every member calls it)
=========================  ======================================================
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from pksim.torch import Communicator
from pksim.torch.errors import CommError


class Done:
    """The Work of a call that has completed."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self):
        raise CommError("pksim.torch calls complete when they return; there is no future to wait on")


class P2POp:
    """torch.distributed.P2POp, kept as data for batch_isend_irecv."""

    def __init__(self, op, tensor, peer: int | None = None, group=None, tag: int = 0,
                 group_peer: int | None = None):
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag
        self.group_peer = group_peer


class PksimDist:
    """torch.distributed with its data collectives made by pksim.torch (see the module)."""

    def __init__(self, dist, system: str | None = None):
        self._dist = dist
        self._system = system
        self._comms: dict[int, tuple[Any, Communicator]] = {}
        self._twins: dict[int, Any] = {}
        self.tally: Counter = Counter()
        self.P2POp = P2POp

    def __getattr__(self, name: str):
        return getattr(self._dist, name)

    # ---- groups -------------------------------------------------------------------------------
    def new_group(self, ranks=None, *args, **kwargs):
        group = self._dist.new_group(ranks, *args, **kwargs)
        # a gloo twin for the host traffic, made by every rank (new_group is a call of the whole
        # world; a rank outside ``ranks`` gets a non-member and must not ask for its backend)
        backend = kwargs.get("backend") or (args[1] if len(args) > 1 else None) or self._dist.get_backend()
        if str(backend).lower() != "gloo":
            twin = self._dist.new_group(ranks, backend="gloo")
            if ranks is None or self._dist.get_rank() in ranks:
                self._twins[id(group)] = twin
        return group

    def comm(self, group=None) -> Communicator:
        key = id(group) if group is not None else 0
        if group is not None and group is self._dist.group.WORLD:
            key = 0
        if key not in self._comms:
            g = None if key == 0 else group
            self._comms[key] = (group, Communicator(g, system=self._system,
                                                    host_group=self._twins.get(key)))
        return self._comms[key][1]

    def _grank(self, group, rank: int) -> int:
        if group is None or group is self._dist.group.WORLD:
            return rank
        return self._dist.get_group_rank(group, rank)

    def _done(self, name: str, async_op: bool):
        self.tally[name] += 1
        return Done() if async_op else None

    # ---- collectives --------------------------------------------------------------------------
    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        tensor.copy_(self.comm(group).all_reduce(tensor, _op(op)))
        return self._done("all_reduce", async_op)

    def all_reduce_div(self, tensor, divisor, op=None, group=None, async_op=False):
        """``all_reduce(tensor, op, group); tensor.div_(divisor)`` as pksim.pkb.folds writes it:
        one generated all-reduce with the average's epilogue when ``divisor`` is the group's
        size and the op a sum of bf16 / fp32, else the two calls as written."""
        c = self.comm(group)
        if _op(op) == "sum" and not hasattr(divisor, "shape") and divisor == c.world \
                and tensor.dtype in (c.torch.bfloat16, c.torch.float32):
            tensor.copy_(c.all_reduce(tensor, "avg"))
            return self._done("all_reduce_div (avg epilogue)", async_op)
        self.all_reduce(tensor, op, group)
        tensor.div_(divisor)
        self.tally["all_reduce_div (not folded)"] += 1
        return Done() if async_op else None

    def reduce_scatter_tensor_div(self, output, input, divisor, op=None, group=None, async_op=False):
        """``reduce_scatter_tensor(output, input, op, group); output.div_(divisor)`` as
        pksim.pkb.folds writes it: the generated reduce-scatter with the average's epilogue
        when ``divisor`` is the group's size and the op a sum of bf16 / fp32."""
        c = self.comm(group)
        if _op(op) == "sum" and not hasattr(divisor, "shape") and divisor == c.world \
                and input.dtype in (c.torch.bfloat16, c.torch.float32):
            output.view(-1).copy_(c.reduce_scatter(input.reshape(c.world, -1), "avg").view(-1))
            return self._done("reduce_scatter_tensor_div (avg epilogue)", async_op)
        self.reduce_scatter_tensor(output, input, op, group)
        output.div_(divisor)
        self.tally["reduce_scatter_tensor_div (not folded)"] += 1
        return Done() if async_op else None

    def reduce(self, tensor, dst=None, op=None, group=None, async_op=False, group_dst=None):
        root = group_dst if group_dst is not None else self._grank(group, dst or 0)
        got = self.comm(group).reduce(tensor, root, _op(op))
        if got is not None:
            tensor.copy_(got)
        return self._done("reduce", async_op)

    def broadcast(self, tensor, src=None, group=None, async_op=False, group_src=None):
        root = group_src if group_src is not None else self._grank(group, src or 0)
        tensor.copy_(self.comm(group).broadcast(tensor, root))
        return self._done("broadcast", async_op)

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):
        c = self.comm(group)
        if all(tuple(t.shape) == tuple(tensor.shape) for t in tensor_list):
            got = c.all_gather(tensor.reshape(1, -1)).view(c.world, -1)
            for t, row in zip(tensor_list, got):
                t.view(-1).copy_(row)
        else:
            flat = c.all_gather_v(tensor.reshape(-1))
            at = 0
            for t in tensor_list:
                t.view(-1).copy_(flat[at:at + t.numel()])
                at += t.numel()
        return self._done("all_gather", async_op)

    def all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
        got = self.comm(group).all_gather(input_tensor.reshape(-1))
        output_tensor.view(-1).copy_(got)
        return self._done("all_gather_into_tensor", async_op)

    def reduce_scatter_tensor(self, output, input, op=None, group=None, async_op=False):
        c = self.comm(group)
        output.view(-1).copy_(c.reduce_scatter(input.reshape(c.world, -1), _op(op)).view(-1))
        return self._done("reduce_scatter_tensor", async_op)

    def reduce_scatter(self, output, input_list, op=None, group=None, async_op=False):
        c = self.comm(group)
        stacked = c.torch.stack([t.reshape(-1) for t in input_list])
        output.view(-1).copy_(c.reduce_scatter(stacked, _op(op)).view(-1))
        return self._done("reduce_scatter", async_op)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          group=None, async_op=False):
        c = self.comm(group)
        if output_split_sizes is None and input_split_sizes is None:
            got = c.all_to_all(input.reshape(c.world, -1))
        else:                  # a split not given is an equal split, as torch has it
            rows_in = input.shape[0] if input.dim() else 1
            rows_out = output.shape[0] if output.dim() else 1
            ins = input_split_sizes if input_split_sizes is not None else [rows_in // c.world] * c.world
            outs = output_split_sizes if output_split_sizes is not None else [rows_out // c.world] * c.world
            got = c.all_to_all(input.contiguous(), list(ins), list(outs))
        output.view(-1).copy_(got.reshape(-1))
        return self._done("all_to_all_single", async_op)

    def all_to_all(self, output_tensor_list, input_tensor_list, group=None, async_op=False):
        c = self.comm(group)
        sends = {p: t.contiguous() for p, t in enumerate(input_tensor_list) if t.numel()}
        recvs = {q: t for q, t in enumerate(output_tensor_list) if t.numel()}
        c.send_recv(sends, recvs)
        return self._done("all_to_all", async_op)

    def gather(self, tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
        c = self.comm(group)
        root = group_dst if group_dst is not None else self._grank(group, dst or 0)
        got = c.gather(tensor.reshape(1, -1), root)
        if got is not None and gather_list is not None:
            for t, row in zip(gather_list, got):
                t.view(-1).copy_(row)
        return self._done("gather", async_op)

    def scatter(self, tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
        c = self.comm(group)
        root = group_src if group_src is not None else self._grank(group, src or 0)
        if c.rank == root:
            x = c.torch.stack([t.reshape(-1) for t in scatter_list])
        else:
            x = tensor.reshape(1, -1)
        tensor.view(-1).copy_(c.scatter(x, root).view(-1))
        return self._done("scatter", async_op)

    def batch_isend_irecv(self, p2p_op_list):
        """One send_recv of every op of the batch (every member of the group calls it). Several
        ops with one peer travel as one message: the sends concatenated in the batch's order,
        the bytes received split over the receives in theirs (both sides list them alike)."""
        if not p2p_op_list:
            return []
        group = p2p_op_list[0].group
        c = self.comm(group)
        sends: dict[int, list] = {}
        recvs: dict[int, list] = {}
        for op in p2p_op_list:
            peer = op.group_peer if op.group_peer is not None else self._grank(group, op.peer)
            name = getattr(op.op, "__name__", str(op.op))
            (sends if name in ("isend", "send") else recvs).setdefault(peer, []).append(op.tensor)
        u8 = c.torch.uint8
        packed = {p: c.torch.cat([t.contiguous().reshape(-1).view(u8) for t in ts])
                  for p, ts in sends.items()}
        got = c.send_recv(packed)
        for q, ts in recvs.items():
            at = 0
            for t in ts:
                n = t.numel() * t.element_size()
                if q not in got or got[q].numel() < at + n:
                    raise CommError(f"batch_isend_irecv: rank {q} sends fewer bytes than the "
                                    f"receives from it hold")
                t.copy_(got[q][at:at + n].clone().view(t.dtype).view(t.shape))
                at += n
        self.tally["batch_isend_irecv"] += 1
        return [Done() for _ in p2p_op_list]

    def isend(self, tensor, dst=None, group=None, tag=0, group_dst=None):
        raise CommError("isend outside batch_isend_irecv: pksim.torch moves point-to-point data "
                        "as one call of every rank (send_recv)")

    def irecv(self, tensor, src=None, group=None, tag=0, group_src=None):
        raise CommError("irecv outside batch_isend_irecv: pksim.torch moves point-to-point data "
                        "as one call of every rank (send_recv)")

    def close(self) -> None:
        """Free every communicator's buffers (each group's members at once)."""
        for _, c in self._comms.values():
            c.close()
        self._comms.clear()

    def notes(self) -> list[str]:
        return sorted({n for _, c in self._comms.values() for n in c.notes})

    def calls(self) -> list[tuple[str, str]]:
        return [call for _, c in self._comms.values() for call in c.calls]


class NnFunctional:
    """torch.distributed.nn.functional's all_gather and all_to_all (they return their outputs)
    over any torch.distributed-like object: a PksimDist for a solution, the check's gloo
    adapter for a reference. Autograd is not kept: PKB's references run under no_grad."""

    def __init__(self, dist_like, real):
        self._d, self._real = dist_like, real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def all_gather(self, tensor, group=None):
        import torch
        out = [torch.empty_like(tensor) for _ in range(self._d.get_world_size(group))]
        self._d.all_gather(out, tensor.contiguous(), group=group)
        return tuple(out)

    def all_to_all(self, output_tensor_list, input_tensor_list, group=None):
        outs = list(output_tensor_list)
        self._d.all_to_all(outs, [t.contiguous() for t in input_tensor_list], group=group)
        return tuple(outs)


def replace_dist(module, dist_like) -> None:
    """Put ``dist_like`` in place of a reference module's ``dist`` (and of ``distF``, its
    torch.distributed.nn.functional, where it has one)."""
    module.dist = dist_like
    if hasattr(module, "distF"):
        module.distF = NnFunctional(dist_like, module.distF)


def _op(op) -> str:
    """A torch ReduceOp (or None: sum) as pksim.torch names it."""
    if op is None:
        return "sum"
    name = getattr(op, "name", None) or str(op)
    return str(name).split(".")[-1].lower()
