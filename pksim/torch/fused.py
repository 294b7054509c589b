"""The fused GEMM + communication ops of a communicator: ``gemm_rs``, ``ag_gemm``, ``gemm_ar``
(kernels/fused: the GEMM's tiles move as they are made, intra-SM or from communication SMs).

Shapes (every matrix bf16, row-major, as kernels/fused/abi.h states them):
  gemm_rs(A [M x K], B [K x N])   rank r gets rows [lo(r), lo(r + 1)) of sum_s A_s @ B_s
  gemm_ar(A [M x K], B [K x N])   every rank gets sum_s A_s @ B_s [M x N]
  ag_gemm(a [M_r x K], B [K x N]) every rank gets A @ B_r, A = the ranks' a stacked [M x K]
with lo(r) = floor(r M / world); K and N multiples of 8, M at least the world.

A generated fused kernel launches either every rank's blocks at once or one rank's
(``pkf_args::one_rank``, kernels/fused/abi.h). The ranks copy their operands into their
symmetric buffers (every rank's mapped by the others through CUDA IPC) and meet on the host;
then, where they share one GPU, the communicator's rank 0 launches every rank's blocks in one
launch (their blocks must be co-resident: processes time-slicing a GPU could not wait on each
other's flags) and each communication rank gets at most a quarter of its share of SMs; on
separate GPUs (or ``fused_per_rank=True``) every rank launches its own rank's blocks on its own
stream over every rank's pointers, the store-add outputs zeroed by their owner before the
meeting. Every rank waits for the launch and they meet again (the intra-SM variants have no
device-side meeting: kernels/fused/abi.h) before the results are copied out.
"""
from __future__ import annotations

import os
from typing import Any

from pksim.torch.checks import agree, check_tensor
from pksim.torch.choice import choose_fused
from pksim.torch.errors import CommError
from pksim.torch.ipc import exchange
from validation.runtime.fused import PkfArgs, row_lo
from validation.runtime.library import as_pointer, host_array, wait_for_stream

ABI_VERSION = 3
DEADLINE_S = float(os.environ.get("PKSIM_TORCH_DEADLINE_S", "60"))   # wall clock of one wait


def shared_comm_blocks(blocks: int, sms: int, world: int) -> int:
    """Communication blocks per rank when every rank's blocks share one GPU's ``sms`` (one
    launch, one block per SM): the schedule's, at most a quarter of a rank's share."""
    return max(1, min(blocks, sms // world // 4))


class _FusedBinding:
    """One fused library, shape and block split with every rank's operands in symmetric
    buffers; the launch arguments over all of them are rank 0's (one launch of every rank) or
    every rank's own (``per_rank``: a launch of its rank's blocks)."""

    def __init__(self, comm, lib, op: str, m: int, n: int, k: int, comm_blocks: int,
                 per_rank: bool):
        torch, world, rank = comm.torch, comm.world, comm.rank
        self.comm, self.lib, self.op = comm, lib, op
        lo = [row_lo(r, m, world) for r in range(world + 1)]
        mine = lo[rank + 1] - lo[rank]
        self.a_rows = mine if op == "ag-gemm" else m
        self.out_rows = mine if op == "gemm-rs" else m
        bf16 = torch.bfloat16

        def sym(rows: int, cols: int):
            t = torch.empty(max(rows * cols, 8), dtype=bf16, device=comm.device)
            return t, exchange(comm.host, comm.ipc, int(t.data_ptr()))

        (self.a, pa), (self.b, pb), (self.out, po) = sym(self.a_rows, k), sym(k, n), sym(self.out_rows, n)
        self.args, self.per_rank = None, per_rank
        if rank != 0 and not per_rank:
            return
        a = PkfArgs()
        a.abi_version, a.world, a.M, a.N, a.K = ABI_VERSION, world, m, n, k
        a.one_rank, a.rank = (1, rank) if per_rank else (0, 0)
        a.comm_blocks = comm_blocks if lib.overlap == "inter-sm" else 0
        a.gemm_blocks, a.tile_order, a.group_m = 0, -1, 0
        a.zero_output = 0 if per_rank else 1       # per rank: each owner zeroes before the meeting
        a.timeout_cycles = 1 << 33
        self._arrays = {"a": host_array(pa), "b": host_array(pb), "out": host_array(po)}
        for name, arr in self._arrays.items():
            setattr(a, name, as_pointer(arr))
        q = lib.requirements(a)
        u8, dev = torch.uint8, comm.device
        self._keep = {}
        for name, nbytes in (("partial", q.partial_bytes), ("gathered", q.gathered_bytes),
                             ("flags", 4 * q.num_flags)):
            if not nbytes:
                continue
            # one process over every rank: all of them here; per rank: its own, then exchanged
            bufs = [torch.zeros(nbytes, dtype=u8, device=dev) for _ in range(1 if per_rank else world)]
            self._keep[name] = bufs
            ptrs = exchange(comm.host, comm.ipc, int(bufs[0].data_ptr())) if per_rank \
                else [t.data_ptr() for t in bufs]
            self._arrays[name] = host_array(ptrs)
            setattr(a, name, as_pointer(self._arrays[name]))
        a.num_flags = q.num_flags
        self.err = torch.zeros(64, dtype=u8, device=dev)
        a.err = self.err.data_ptr()
        self.table = torch.empty(q.table_bytes + 64, dtype=u8, device=dev)
        off = (-self.table.data_ptr()) % 64
        view = self.table[off:off + q.table_bytes]
        a.table, a.table_bytes = view.data_ptr(), q.table_bytes
        lib.write_table(a, view)
        self.args = a

    def run(self, deadline_s: float) -> None:
        comm, torch = self.comm, self.comm.torch
        if self.per_rank:
            self.out.zero_()
        torch.cuda.current_stream().synchronize()
        comm.host.barrier()

        def leader():
            if self.args is not None:
                self.args.stream = torch.cuda.current_stream().cuda_stream
                self.lib.launch(self.args)
                self.args.seq += 1
                wait_for_stream(self.lib, int(self.err.data_ptr()), deadline_s)
        comm.together(self.op, leader)


class FusedOps:
    """The fused ops of ``Communicator`` (a mixin: it brings torch, host, ranks and kernels)."""

    def _check_gemm(self, op: str, a, b) -> tuple[int, int, int]:
        for name, t in (("A", a), ("B", b)):
            check_tensor(op, name, t, self.device)
            if str(t.dtype) != "torch.bfloat16" or t.dim() != 2:
                raise CommError(f"{op}: {name} must be a 2-D bfloat16 matrix, got {t.dtype} "
                                f"{tuple(t.shape)}")
        rows, k = a.shape
        if b.shape[0] != k:
            raise CommError(f"{op}: A is {tuple(a.shape)} and B {tuple(b.shape)}: inner dimensions differ")
        n = int(b.shape[1])
        if k % 8 or n % 8:
            raise CommError(f"{op}: K = {k} and N = {n} must be multiples of 8 (16-byte rows for TMA)")
        return int(rows), int(k), n

    def _fused(self, op: str, a, b, m: int, n: int, k: int, coll: str, compose):
        self._not_capturing(op)
        if self.host_sync:
            sigs = self.host.all_gather_object((op, m, n, k, int(a.shape[0])))
            agree(op, "M, N, K", [s[:4] for s in sigs], self.ranks)
            if op == "ag-gemm":
                want = [row_lo(r + 1, m, self.world) - row_lo(r, m, self.world) for r in range(self.world)]
                got = [s[4] for s in sigs]
                if got != want:
                    raise CommError(f"ag_gemm: the ranks hold {got} rows of A; the kernel's partition "
                                    f"of M = {m} is {want} (rank r: rows floor(r M / world) on)")
        if m < self.world:
            raise CommError(f"{op}: M = {m} is below the world ({self.world}): some rank would own no rows")
        if self.world == 1:
            self.calls.append((op, f"torch.matmul + {coll}"))
            return compose()
        choice = choose_fused(self.system.name, op, m, n, k, self.world)
        self._say(choice.note)
        per_rank = self.fused_per_rank
        self.calls.append((op, choice.schedule.label() + (" (a launch per rank)" if per_rank else "")))
        blocks = choice.blocks if per_rank else shared_comm_blocks(
            choice.blocks, self.torch.cuda.get_device_properties(self.device).multi_processor_count,
            self.world)
        if blocks != choice.blocks and choice.schedule.overlap == "inter-sm":
            self._say(f"pksim.torch: {op} on one GPU: the ranks share its SMs, so each runs "
                      f"{blocks} communication blocks where the schedule has {choice.blocks}")
        key = (choice.kernel.key(), m, n, k, blocks)
        fb = self._fused_bindings.get(key)
        if fb is None:
            fb = _FusedBinding(self, self.kernels.library(choice.kernel), op, m, n, k, blocks,
                               per_rank)
            self._fused_bindings[key] = fb
        fb.a.view(-1)[: a.numel()].copy_(a.reshape(-1))
        fb.b.view(-1)[: b.numel()].copy_(b.reshape(-1))
        fb.run(DEADLINE_S)
        return fb.out.view(-1)[: fb.out_rows * n].view(fb.out_rows, n).clone()

    def gemm_rs(self, a, b):
        """rows [lo(r), lo(r + 1)) of sum over ranks of A_r @ B_r (see the module)."""
        m, k, n = self._check_gemm("gemm_rs", a, b)
        return self._fused("gemm-rs", a, b, m, n, k, "reduce-scatter",
                           lambda: self.reduce_scatter(self._matmul(a, b)))

    def gemm_ar(self, a, b):
        """sum over ranks of A_r @ B_r on every rank."""
        m, k, n = self._check_gemm("gemm_ar", a, b)
        return self._fused("gemm-ar", a, b, m, n, k, "all-reduce",
                           lambda: self.all_reduce(self._matmul(a, b)))

    def ag_gemm(self, a, b):
        """(every rank's a stacked) @ B_r."""
        rows, k, n = self._check_gemm("ag_gemm", a, b)
        m = sum(self.host.all_gather_object(rows)) if self.host_sync else rows * self.world
        return self._fused("ag-gemm", a, b, m, n, k, "all-gather",
                           lambda: self._matmul(self.all_gather(a), b))

    def _matmul(self, a, b) -> Any:
        return self.torch.matmul(a, b)
