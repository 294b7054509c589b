"""``Communicator``: generated collectives called on torch tensors, one process per rank.

Made from a torch.distributed process group (the world by default) on every rank of it, it
exchanges each rank's GPU (host, uuid) and so knows whether ranks share a GPU, picks the system
(``choice.system_for_device`` or the name given), and from then on every call:

1. checks its arguments (``checks``: dtype, device, contiguity, sizes; one ``CommError`` line);
2. asks ``choice.choose`` for the kernel of its op, size and element type (the model's fastest
   runnable schedule; a multimem one is replaced, and the note says so once);
3. takes that kernel's binding: symmetric buffers for the call's size on every rank (a torch
   allocation each, mapped by the peers through CUDA IPC, ``ipc.exchange``), flags, error record
   and peer table (validation.runtime.collectives.Collective), made again twice as large when a
   call outgrows it;
4. copies the input into its symmetric buffer on the current stream, runs the kernel, and copies
   the result into a new tensor on the current stream.

Running. Ranks on separate GPUs: one launch per call on the current stream, the ranks meeting on
the device (entry and exit barriers, every wait with a deadline); call ``synchronize()`` to
wait and read the kernels' error records. Ranks sharing one GPU time-slice it, and a kernel
that spins on a peer's flag would wait for the peer's time slice: there every phase of a kernel
is a launch of its own with ``device_sync = 0`` (no device waits), the host waits for it and the
ranks meet on the host between phases (``host_sync``; the communicator says so once). In that
mode every call also compares its sizes across ranks first (the host meeting is there anyway).

CUDA graphs: a generated kernel takes its flag epoch (``pkc_args::seq``) as a launch argument and
its flags only ever grow, so a replayed launch would find its flags already set and not wait:
no call can be captured; one made while the current stream captures raises CommError.

Element types: reductions of bf16 and fp32 run in the generated kernels; other types (and the
product) are gathered by the all-gather kernel and reduced by torch on each rank. Copies move
any type as 4- or 2-byte words; a 1-byte type of odd byte count travels widened to 2 bytes.
"""
from __future__ import annotations

import ctypes
import socket
import warnings
from typing import Any

from pksim.torch.checks import (agree, check_divisible, check_reduce_op, check_root,
                                check_splits, check_tensor, copy_unit, reduce_dtype, row_bytes)
from pksim.torch.choice import KernelChoice, bucket, choose, system_for_device, system_named
from pksim.torch.errors import CommError
from pksim.torch.fused import DEADLINE_S, FusedOps
from pksim.torch.ipc import exchange, placement, runtime
from pksim.torch.kernels import Kernels
from validation.runtime.collectives import Collective, RankLayout, SharedBuffer
from validation.runtime.library import as_pointer, ensure_eager_loading

KERNEL_DTYPE = {4: "fp32", 2: "bf16"}
SHARED_NOTE = ("pksim.torch: ranks share one GPU, which they time-slice: every kernel runs "
               "host-synchronised (one launch per phase, the ranks meet on the host between phases)")


def need_torch():
    """torch and torch.distributed, or one CommError line saying what pksim.torch needs."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise CommError("pksim.torch needs torch with torch.distributed (pip install torch) "
                        "and a CUDA GPU") from None
    if not dist.is_available():
        raise CommError("pksim.torch needs a torch build with torch.distributed")
    return torch, dist


class HostGroup:
    """The host side of a process group: rank, world, object all-gather, barrier, and the
    global ranks (a gloo group beside a non-gloo one, for host traffic)."""

    def __init__(self, dist, group=None, host_group=None):
        if not dist.is_initialized():
            raise CommError("pksim.torch: torch.distributed is not initialised "
                            "(torchrun, then torch.distributed.init_process_group)")
        self.dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.ranks = dist.get_process_group_ranks(group) if group is not None \
            else list(range(self.world))
        self.host = host_group
        if host_group is None and dist.get_backend(group) != "gloo":
            if group is not None and self.world != dist.get_world_size():
                raise CommError("pksim.torch: a sub-group of a non-gloo backend needs host_group= "
                                "(a gloo group of the same ranks) for its host traffic")
            self.host = dist.new_group(self.ranks, backend="gloo")
        elif host_group is None:
            self.host = group

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj, group=self.host)
        return out

    def barrier(self) -> None:
        self.dist.barrier(group=self.host)


class _Ranks(RankLayout):
    """This process's rank of a communicator, as validation's Collective allocates on it."""

    def __init__(self, comm: "Communicator"):
        self.comm, self.world, self.rank = comm, comm.world, comm.rank
        self.local, self.device = [comm.rank], comm.device

    def alloc(self, nbytes: int, lib) -> SharedBuffer:
        t = self.comm.torch.empty(max(nbytes, 16), dtype=self.comm.torch.uint8, device=self.device)
        return SharedBuffer({self.rank: t}, exchange(self.comm.host, self.comm.ipc, int(t.data_ptr())))

    def barrier(self) -> None:
        self.comm.torch.cuda.current_stream().synchronize()
        self.comm.host.barrier()


class _Binding:
    """A library bound to the ranks with buffers for up to ``capacity`` elements."""

    def __init__(self, comm: "Communicator", lib, dtype: str, capacity: int, blocks: int,
                 num_splits: int):
        splits = [0] * num_splits if num_splits else None
        self.coll = Collective(lib, comm._ranks, capacity, dtype, blocks_per_rank=blocks,
                               device_sync=not comm.host_sync, splits=splits)
        self.capacity = capacity

    def set_splits(self, splits: list[int]) -> None:
        c = self.coll
        arr = (ctypes.c_ulonglong * len(splits))(*splits)
        c._arrays["splits"] = arr
        c.args.splits, c.args.num_splits = as_pointer(arr), len(splits)
        c.lib.write_table(c.args, c.table)


class Communicator(FusedOps):
    """Generated collectives and fused GEMM kernels over the ranks of a process group."""

    def __init__(self, group=None, *, system: str | None = None, host_group=None,
                 host_sync: bool | None = None, fused_per_rank: bool | None = None):
        ensure_eager_loading()
        self.torch, dist = need_torch()
        torch = self.torch
        if not torch.cuda.is_available():
            raise CommError("pksim.torch needs a CUDA GPU; torch sees none")
        self.host = HostGroup(dist, group, host_group)
        self.rank, self.world, self.ranks = self.host.rank, self.host.world, self.host.ranks
        self.device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.device)
        here = (socket.gethostname(), str(getattr(props, "uuid", "")) or str(self.device))
        self.placement = placement(self.host.all_gather_object(here))
        self.host_sync = self.placement == "shared" if host_sync is None else bool(host_sync)
        # fused kernels: a launch per rank on separate GPUs, one launch of every rank on a shared one
        self.fused_per_rank = self.placement != "shared" if fused_per_rank is None else bool(fused_per_rank)
        self.system = system_named(system or system_for_device(props.name, self.world))
        self.ipc = runtime()
        self.kernels = Kernels(self.system)
        self._ranks = _Ranks(self)
        self._bindings: dict[tuple, _Binding] = {}
        self._fused_bindings: dict[tuple, Any] = {}
        self.notes: list[str] = []
        self.calls: list[tuple[str, str]] = []       # (op, schedule label) of every call
        if self.host_sync and self.world > 1:
            self._say(SHARED_NOTE)

    # ---- plumbing ---------------------------------------------------------------------------
    def _say(self, note: str) -> None:
        if note and note not in self.notes:
            self.notes.append(note)
            if self.rank == 0:
                warnings.warn(note, stacklevel=3)

    def _not_capturing(self, op: str) -> None:
        if self.torch.cuda.is_current_stream_capturing():
            raise CommError(f"{op}: cannot be captured in a CUDA graph: a generated kernel takes "
                            f"its flag epoch as a launch argument (pkc_args::seq), so a replay "
                            f"would not wait for its peers")

    def _u8(self, t):
        return t.reshape(-1).view(self.torch.uint8)

    def _binding(self, choice: KernelChoice, dtype: str, count: int, num_splits: int = 0) -> _Binding:
        key = (choice.kernel.key(), dtype, choice.blocks)
        b = self._bindings.get(key)
        if b is None or b.capacity < count:
            lib = self.kernels.library(choice.kernel)
            cap = max(count, 2 * b.capacity if b else bucket(count))
            b = _Binding(self, lib, dtype, cap, choice.blocks, num_splits)
            self._bindings[key] = b
        return b

    def _call(self, op: str, model_bytes: int, dtype: str, count: int, src, out_bytes: int,
              root: int = 0, splits: list[int] | None = None, reduce_op: str = "sum",
              signature: tuple = ()):
        """Run one collective; returns this rank's output bytes (a new uint8 tensor)."""
        self._not_capturing(op)
        choice = choose(self.system.name, op, model_bytes, self.world, dtype, reduce_op)
        self._say(choice.note)
        self.calls.append((op, choice.schedule.label()))
        b = self._binding(choice, dtype, count, len(splits) if splits is not None else 0)
        c = b.coll
        c.args.count = b.capacity if splits is not None else count
        c.args.root = root
        if splits is not None:
            b.set_splits(splits)
        if src is not None and src.numel():
            c.inb.local[self.rank][: src.numel()].copy_(src)
        if self.host_sync:
            self.torch.cuda.current_stream().synchronize()
            sigs = self.host.all_gather_object((op, choice.kernel.key(), signature))
            agree(op, "the call (op, kernel, sizes)", sigs, self.ranks)
            for p in range(c.reqs.phases):
                self.together(op, lambda: (c.launch_phase(p), c.wait(DEADLINE_S)))
        else:
            c.launch()
        out = self.torch.empty(out_bytes, dtype=self.torch.uint8, device=self.device)
        if out_bytes:
            out.copy_(c.outb.local[self.rank][:out_bytes])
        return out

    def together(self, op: str, step) -> None:
        """Run ``step`` on every rank, then meet: if it failed on any rank, every rank raises
        the same CommError (a rank that raised alone would leave the others waiting)."""
        try:
            step()
            mine = None
        except Exception as exc:  # noqa: BLE001 - told to every rank, raised below
            mine = f"{type(exc).__name__}: {exc}"
        errors = self.host.all_gather_object(mine)
        bad = [(self.ranks[r], e) for r, e in enumerate(errors) if e]
        if bad:
            raise CommError(f"{op}: rank {bad[0][0]} failed: {bad[0][1]}")

    def synchronize(self) -> None:
        """Wait for this rank's stream and read every kernel's error record (raises on a
        device timeout or a failed kernel)."""
        for b in self._bindings.values():
            b.coll.wait(DEADLINE_S)

    def close(self) -> None:
        """Free the symmetric buffers (every rank at once; the peers' mappings stay open for
        the process, ``ipc.runtime``)."""
        self.synchronize()
        for b in self._bindings.values():
            b.coll.free()
        self._bindings.clear()
        self._fused_bindings.clear()
        self.host.barrier()

    # ---- element types ----------------------------------------------------------------------
    def _words(self, t, counts: list[int]):
        """(payload tensor, kernel dtype, word bytes): a 1-byte type of odd counts widened."""
        unit = copy_unit(counts + [int(t.element_size())] if t.element_size() > 1 else counts)
        if unit == 1:
            return t.view(self.torch.uint8).to(self.torch.int16), "bf16", 2
        return t, KERNEL_DTYPE[unit], unit

    def _back(self, raw, like, shape, widened: bool):
        torch = self.torch
        if widened:
            return raw.view(torch.int16).to(torch.uint8).view(like.dtype).view(shape)
        return raw.view(like.dtype).view(shape)

    # ---- collectives ------------------------------------------------------------------------
    def all_reduce(self, x, op: str = "sum"):
        """Every rank's ``x`` reduced (sum, avg, min, max, product); a new tensor."""
        check_tensor("all_reduce", "x", x, self.device)
        rop = check_reduce_op("all_reduce", op)
        if self.world == 1 or x.numel() == 0:
            return x.clone()
        kd = reduce_dtype("all_reduce", x)
        if kd is None or rop == "product":
            return self._reduce_locally(self.all_gather(x.reshape(1, -1)), rop).view(x.shape)
        n, e = x.numel(), x.element_size()
        raw = self._call("all-reduce", n * e, kd, n, self._u8(x), n * e, reduce_op=rop,
                         signature=(n, kd, rop))
        return raw.view(x.dtype).view(x.shape)

    def _reduce_locally(self, stacked, rop: str):
        if stacked.dtype == self.torch.bool:        # NCCL's sum and max of bools: or; min: and
            return stacked.all(0) if rop in ("min", "product") else stacked.any(0)
        if rop == "sum":
            return stacked.sum(0, dtype=stacked.dtype)
        if rop == "avg":
            return (stacked.double().mean(0) if not stacked.is_floating_point()
                    else stacked.float().mean(0)).to(stacked.dtype)
        if rop == "product":
            return stacked.prod(0, dtype=stacked.dtype)
        return stacked.amin(0) if rop == "min" else stacked.amax(0)

    def all_gather(self, x):
        """Every rank's ``x`` concatenated along dim 0 in rank order (a 0-d x: a vector)."""
        check_tensor("all_gather", "x", x, self.device)
        shape = (self.world * (x.shape[0] if x.dim() else 1), *tuple(x.shape)[1:])
        if self.world == 1 or x.numel() == 0:
            return x.reshape(shape).clone()
        nb = x.numel() * x.element_size()
        w, kd, unit = self._words(x, [nb])
        wb = w.numel() * w.element_size()
        raw = self._call("all-gather", wb * self.world, kd, wb // unit, self._u8(w),
                         wb * self.world, signature=(wb, kd))
        return self._back(raw, x, shape, w is not x)

    def all_gather_v(self, x):
        """Every rank's ``x`` concatenated along dim 0 in rank order, the ranks' row counts free
        (the all-gather-v kernel); the types and row shapes must agree."""
        check_tensor("all_gather_v", "x", x, self.device)
        rows = x.shape[0] if x.dim() else 1
        meta = self.host.all_gather_object((rows, str(x.dtype), tuple(x.shape)[1:]))
        agree("all_gather_v", "type and row shape", [m[1:] for m in meta], self.ranks)
        counts = [m[0] for m in meta]
        shape = (sum(counts), *tuple(x.shape)[1:])
        if self.world == 1 or not any(counts):
            return x.reshape(shape).clone() if self.world == 1 else x.new_empty(shape)
        rb = row_bytes(x)
        w, kd, unit = self._words(x, [c * rb for c in counts] + [rb])
        wrb = rb * (w.element_size() // x.element_size())
        shares = [c * wrb // unit for c in counts]
        raw = self._call("all-gather-v", sum(shares) * unit * self.world, kd, sum(shares),
                         self._u8(w), sum(shares) * unit, splits=shares, signature=tuple(shares))
        return self._back(raw, x, shape, w is not x)

    def reduce_scatter(self, x, op: str = "sum"):
        """Rank r gets rows [r n, (r + 1) n) of the reduction of every rank's x (dim 0 = world n)."""
        check_tensor("reduce_scatter", "x", x, self.device)
        rop = check_reduce_op("reduce_scatter", op)
        rows = check_divisible("reduce_scatter", "x", x.shape[0] if x.dim() else 1, self.world)
        shape = (rows, *tuple(x.shape)[1:])
        if self.world == 1 or x.numel() == 0:
            return x.reshape(shape).clone()
        kd = reduce_dtype("reduce_scatter", x)
        if kd is None or rop == "product":
            return self._reduce_locally(self.all_to_all(x).view(self.world, *shape), rop)
        n = x.numel() // self.world
        e = x.element_size()
        raw = self._call("reduce-scatter", x.numel() * e, kd, n, self._u8(x), n * e,
                         reduce_op=rop, signature=(n, kd, rop))
        return raw.view(x.dtype).view(shape)

    def all_to_all(self, x, in_splits=None, out_splits=None):
        """Rows of dim 0 exchanged: without splits, the world equal blocks of x go to the ranks
        in order; with them, ``in_splits[p]`` rows go to rank p and ``out_splits[q]`` rows come
        from rank q (either may be None: it is then taken from the other ranks' splits)."""
        check_tensor("all_to_all", "x", x, self.device)
        rows = x.shape[0] if x.dim() else 1
        if in_splits is None and out_splits is None:
            check_divisible("all_to_all", "x", rows, self.world)
            if self.world == 1 or x.numel() == 0:
                return x.clone()
            nb = x.numel() * x.element_size()
            w, kd, unit = self._words(x, [nb // self.world])
            wb = w.numel() * w.element_size()
            raw = self._call("all-to-all", wb, kd, wb // self.world // unit, self._u8(w), wb,
                             signature=(wb, kd))
            return self._back(raw, x, tuple(x.shape), w is not x)
        ins = check_splits("all_to_all", "in_splits", in_splits, self.world, rows) \
            if in_splits is not None else None
        rb = row_bytes(x)
        matrix = self._matrix("all_to_all", ins, out_splits)
        out_rows = sum(matrix[q][self.rank] for q in range(self.world))
        shape = (out_rows, *tuple(x.shape)[1:])
        return self._splits_call("all-to-all-v", x, matrix, rb, shape)

    def _matrix(self, op: str, ins: list[int] | None, out_splits) -> list[list[int]]:
        """Every rank's in_splits (rows), checked against this rank's out_splits."""
        outs = check_splits(op, "out_splits", out_splits, self.world) if out_splits is not None else None
        rows = self.host.all_gather_object((ins, outs))
        if any(i is None for i, _ in rows):
            cols = [o for _, o in rows]
            if any(c is None for c in cols):
                raise CommError(f"{op}: every rank must pass in_splits or out_splits")
            matrix = [[cols[p][q] for p in range(self.world)] for q in range(self.world)]
        else:
            matrix = [i for i, _ in rows]
        for p, (_, o) in enumerate(rows):
            if o is not None and o != [matrix[q][p] for q in range(self.world)]:
                raise CommError(f"{op}: rank {self.ranks[p]} expects {o} rows from the ranks, they "
                                f"send {[matrix[q][p] for q in range(self.world)]}")
        return matrix

    def _splits_call(self, op: str, x, matrix: list[list[int]], rb: int, shape):
        """An all-to-all-v or send-recv of ``matrix`` rows of ``rb`` bytes (packed in rank order)."""
        w_ = self.world
        if not any(any(r) for r in matrix):
            return x.new_empty(shape)
        if w_ == 1:
            return x.reshape(shape).clone()
        counts = [m * rb for r in matrix for m in r]
        w, kd, unit = self._words(x, counts + [rb])
        wrb = rb * (w.element_size() // x.element_size()) if w is not x else rb
        words = [[m * wrb // unit for m in r] for r in matrix]
        cap = max(max(sum(r) for r in words), max(sum(words[q][p] for q in range(w_)) for p in range(w_)))
        flat = [v for r in words for v in r]
        out_words = sum(words[q][self.rank] for q in range(w_))
        raw = self._call(op, cap * unit, kd, cap, self._u8(w), out_words * unit,
                         splits=flat, signature=(kd, tuple(flat)))
        return self._back(raw, x, shape, w is not x)

    def broadcast(self, x, root: int = 0):
        """The root's ``x`` on every rank (every rank passes a tensor of that shape and type)."""
        check_tensor("broadcast", "x", x, self.device)
        root = check_root("broadcast", root, self.world)
        if self.world == 1 or x.numel() == 0:
            return x.clone()
        nb = x.numel() * x.element_size()
        w, kd, unit = self._words(x, [nb])
        wb = w.numel() * w.element_size()
        raw = self._call("broadcast", wb, kd, wb // unit, self._u8(w) if self.rank == root else None,
                         wb, root=root, signature=(wb, kd, root))
        return self._back(raw, x, tuple(x.shape), w is not x)

    def reduce(self, x, root: int = 0, op: str = "sum"):
        """The reduction of every rank's ``x`` on the root (None elsewhere)."""
        check_tensor("reduce", "x", x, self.device)
        root = check_root("reduce", root, self.world)
        rop = check_reduce_op("reduce", op)
        kd = reduce_dtype("reduce", x)
        if self.world == 1 or x.numel() == 0:
            return x.clone()
        if kd is None or rop == "product":
            got = self.gather(x.reshape(1, -1), root)
            return self._reduce_locally(got, rop).view(x.shape) if got is not None else None
        n, e = x.numel(), x.element_size()
        raw = self._call("reduce", n * e, kd, n, self._u8(x), n * e, root=root, reduce_op=rop,
                         signature=(n, kd, root, rop))
        return raw.view(x.dtype).view(x.shape) if self.rank == root else None

    def gather(self, x, root: int = 0):
        """Every rank's ``x`` concatenated along dim 0 on the root (None elsewhere)."""
        check_tensor("gather", "x", x, self.device)
        root = check_root("gather", root, self.world)
        shape = (self.world * (x.shape[0] if x.dim() else 1), *tuple(x.shape)[1:])
        if self.world == 1 or x.numel() == 0:
            return x.reshape(shape).clone() if self.rank == root else None
        nb = x.numel() * x.element_size()
        w, kd, unit = self._words(x, [nb])
        wb = w.numel() * w.element_size()
        raw = self._call("gather", wb * self.world, kd, wb // unit, self._u8(w),
                         wb * self.world if self.rank == root else 0, root=root,
                         signature=(wb, kd, root))
        return self._back(raw, x, shape, w is not x) if self.rank == root else None

    def scatter(self, x, root: int = 0):
        """Rank r gets the r-th of the world equal blocks of the root's ``x`` (dim 0); on the
        other ranks ``x`` only gives the shape of one block and the type."""
        check_tensor("scatter", "x", x, self.device)
        root = check_root("scatter", root, self.world)
        if self.rank == root:
            rows = check_divisible("scatter", "x (on the root)", x.shape[0] if x.dim() else 1, self.world)
            shard = (rows, *tuple(x.shape)[1:])
            nb = x.numel() * x.element_size() // self.world
        else:
            shard = tuple(x.shape)
            nb = x.numel() * x.element_size()
        if self.world == 1:
            return x.reshape(shard).clone()
        if nb == 0:
            return x.new_empty(shard)
        w, kd, unit = self._words(x, [nb])
        wb = nb * (w.element_size() // x.element_size()) if w is not x else nb
        raw = self._call("scatter", wb * self.world, kd, wb // unit,
                         self._u8(w) if self.rank == root else None, wb, root=root,
                         signature=(wb, kd, root))
        return self._back(raw, x, shard, w is not x)

    def send_recv(self, sends: dict[int, Any], recvs: dict[int, Any] | None = None) -> dict[int, Any]:
        """Point-to-point as one call of every rank of the communicator (the send-recv kernel,
        torch's batch_isend_irecv): ``sends[p]`` goes to rank p; ``recvs[q]``, when given, is
        filled with what rank q sends (its byte size must match). Returns {q: the bytes received
        from q} (uint8). Ranks with nothing to send or receive pass {} (they take part in the
        launch only). Messages travel padded to 4-byte words."""
        for p, t in sends.items():
            check_root("send_recv", p, self.world)
            check_tensor("send_recv", f"sends[{p}]", t, self.device)
        for q, t in (recvs or {}).items():
            check_root("send_recv", q, self.world)
            check_tensor("send_recv", f"recvs[{q}]", t, self.device)
        row = [sends[p].numel() * sends[p].element_size() if p in sends else 0
               for p in range(self.world)]
        matrix = self.host.all_gather_object(row)
        for q, t in (recvs or {}).items():
            want = t.numel() * t.element_size()
            if matrix[q][self.rank] != want:
                raise CommError(f"send_recv: recvs[{q}] holds {want} bytes, rank {self.ranks[q]} "
                                f"sends {matrix[q][self.rank]}")
        torch, w_, me = self.torch, self.world, self.rank
        own = self._u8(sends[me]).clone() if me in sends else None
        matrix = [[0 if p == q else b for p, b in enumerate(r)] for q, r in enumerate(matrix)]
        row = matrix[me]
        out = {}
        if own is not None and own.numel():
            out[me] = own
            if recvs and me in recvs:
                self._u8(recvs[me]).copy_(own)
        if not any(any(r) for r in matrix):
            return out
        pad = [[-(-b // 4) * 4 for b in r] for r in matrix]
        flat_in = [torch.nn.functional.pad(self._u8(sends[p]), (0, pad[self.rank][p] - row[p]))
                   for p in range(w_) if row[p]]
        x = torch.cat(flat_in) if flat_in else torch.empty(0, dtype=torch.uint8, device=self.device)
        words = [v // 4 for r in pad for v in r]
        cap = max(max(sum(r) for r in pad), max(sum(pad[q][p] for q in range(w_)) for p in range(w_))) // 4
        got_bytes = sum(pad[q][self.rank] for q in range(w_))
        if w_ == 1:
            raw = x.clone()
        else:
            raw = self._call("send-recv", cap * 4, "fp32", cap, x, got_bytes, splits=words,
                             signature=tuple(words))
        at = 0
        for q in range(w_):
            if pad[q][self.rank]:
                out[q] = raw[at:at + matrix[q][self.rank]]
                if recvs and q in recvs:
                    self._u8(recvs[q]).copy_(out[q])
                at += pad[q][self.rank]
        return out
