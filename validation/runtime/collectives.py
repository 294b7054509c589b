"""The GPU runtime for generated collectives: load a library, give every rank its buffers,
run, wait, read the device error record.

Two ways of placing ranks, behind one interface (``RankLayout``):

* ``VirtualRanks(world)``: every rank on this process's GPU, each buffer its own allocation;
  the library runs all of them in one launch (grid = world x blocks per rank, block b serving
  rank b // blocks per rank, co-resident through a cooperative launch); copy engines get one
  stream per rank.
* ``IpcRanks()``: one process per GPU under ``torchrun``; every rank allocates its own
  buffers with torch and the others map them through CUDA IPC handles (allocation base +
  offset, exchanged with ``torch.distributed.all_gather_object``; a process never opens its
  own handle). Two processes on ONE GPU also work (gloo backend), but they time-slice, so only
  host-synchronised runs (``device_sync=False``: no spinning, the host meets between phases)
  make sense there.

``Collective`` ties a library to a ``RankLayout``: it asks the library for its buffer sizes
(``pkc_requirements``), allocates inputs, outputs (with a guard tail checked after every
run), scratch, flag counters and the error record, and runs it. torch is imported lazily;
``CUDA_MODULE_LOADING=EAGER`` is set before CUDA initialises (lazy loading lets the first
launch wait on a module load while other blocks already spin).
"""
from __future__ import annotations

import ctypes
import os
import statistics
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError
from pksim_core.kernel_contract import MAX_RANKS
from validation.runtime.library import (MESSAGE_ARGS, GeneratedLibrary, as_pointer,
                                        ensure_eager_loading, host_array, torch_module,
                                        wait_for_stream)
from validation.runtime.timer import FLUSH_BYTES, flush_buffer, time_calls as _time_fn

ABI_VERSION = 2
DTYPE_CODE = {"fp32": 0, "bf16": 1}
DTYPE_SIZE = {"fp32": 4, "bf16": 2}
GUARD_BYTES = 256
GUARD_VALUE = 0xA5

# ---- the C interface (kernels/collectives/abi.h) ------------------------------------------------

class PkcArgs(ctypes.Structure):
    # in_, out, scratch, flags, rank_streams: host arrays of world pointers (host_array)
    _fields_ = [("abi_version", ctypes.c_int), ("world", ctypes.c_int), ("rank", ctypes.c_int),
                ("dtype", ctypes.c_int), ("count", ctypes.c_ulonglong), ("in_", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("scratch", ctypes.c_void_p), ("flags", ctypes.c_void_p),
                ("in_mc", ctypes.c_void_p), ("out_mc", ctypes.c_void_p),
                ("scratch_bytes", ctypes.c_ulonglong), ("num_flags", ctypes.c_int),
                ("blocks_per_rank", ctypes.c_int), ("err", ctypes.c_void_p),
                ("stream", ctypes.c_void_p), ("rank_streams", ctypes.c_void_p),
                ("table", ctypes.c_void_p), ("table_bytes", ctypes.c_ulonglong),
                ("seq", ctypes.c_uint), ("phase_begin", ctypes.c_int), ("phase_end", ctypes.c_int),
                ("device_sync", ctypes.c_int), ("root", ctypes.c_int),
                ("timeout_cycles", ctypes.c_longlong),
                # the -v forms and send/recv (host array of num_splits), the epilogue's terms
                ("splits", ctypes.c_void_p), ("num_splits", ctypes.c_ulonglong),
                ("alpha", ctypes.c_double), ("bias", ctypes.c_void_p),
                ("bias_count", ctypes.c_ulonglong)]


class PkcReqs(ctypes.Structure):
    _fields_ = [("in_count", ctypes.c_ulonglong), ("out_count", ctypes.c_ulonglong),
                ("scratch_bytes", ctypes.c_ulonglong), ("num_flags", ctypes.c_int),
                ("phases", ctypes.c_int), ("blocks_per_rank", ctypes.c_int),
                ("max_coresident_blocks", ctypes.c_int), ("threads", ctypes.c_int),
                ("smem_bytes", ctypes.c_ulonglong), ("barriers_per_launch", ctypes.c_int),
                ("spins", ctypes.c_int), ("table_bytes", ctypes.c_ulonglong)]


class Library(GeneratedLibrary):
    """A generated collective library (``codegen.build`` output), loaded with ctypes."""

    def __init__(self, path: str | Path):
        super().__init__(path, "pkc", ABI_VERSION, PkcArgs, PkcReqs,
                         "validation/runtime/collectives.py")
        self.algorithm = self.manifest["algorithm"]
        self.mechanism = self.manifest["mechanism"]
        d = self.dll
        d.pkc_ipc_handle.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                     ctypes.POINTER(ctypes.c_ulonglong), *MESSAGE_ARGS]
        d.pkc_ipc_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), *MESSAGE_ARGS]
        d.pkc_ipc_close.argtypes = [ctypes.c_void_p]

    def ipc_handle(self, ptr: int) -> tuple[bytes, int]:
        handle = ctypes.create_string_buffer(64)
        offset = ctypes.c_ulonglong(0)
        self.check(self.dll.pkc_ipc_handle, ctypes.c_void_p(ptr), handle, ctypes.byref(offset))
        return handle.raw, offset.value

    def ipc_open(self, handle: bytes) -> int:
        base = ctypes.c_void_p()
        self.check(self.dll.pkc_ipc_open, bytes(handle), ctypes.byref(base))
        return int(base.value)

    def ipc_close(self, base: int) -> None:
        self.dll.pkc_ipc_close(ctypes.c_void_p(base))


# ---- where the ranks live ----------------------------------------------------------------------

class SharedBuffer:
    """One buffer per rank: torch tensors for the ranks in this process, pointers for all."""

    def __init__(self, local: dict[int, Any], ptrs: list[int]):
        self.local = local
        self.ptrs = ptrs


class RankLayout:
    """Where the ranks of a collective live. ``rank`` is -1 for virtual ranks."""
    world: int
    rank: int
    local: list[int]

    def alloc(self, nbytes: int, lib: Library) -> SharedBuffer:
        raise NotImplementedError

    def stream(self) -> int:
        return int(torch_module().cuda.current_stream().cuda_stream)

    def rank_streams(self) -> list[int]:
        return []

    def barrier(self) -> None:
        """Host-side meeting of the ranks once this process's stream work has finished."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class VirtualRanks(RankLayout):
    """Every rank on this process's GPU; one stream per rank for copy engines."""

    def __init__(self, world: int, device: int = 0):
        if not 1 <= world <= MAX_RANKS:
            raise ValidationError(f"world {world} is outside 1..{MAX_RANKS}")
        ensure_eager_loading()
        torch = torch_module()
        if not torch.cuda.is_available():
            raise ValidationError("no CUDA device: virtual ranks need one GPU")
        torch.cuda.set_device(device)
        self.world, self.rank, self.local = world, -1, list(range(world))
        self.device = torch.device("cuda", device)
        self._streams: list = []      # one per rank, made when copy engines first ask

    def alloc(self, nbytes: int, lib: Library) -> SharedBuffer:
        torch = torch_module()
        local = {r: torch.empty(max(nbytes, 16), dtype=torch.uint8, device=self.device)
                 for r in range(self.world)}
        return SharedBuffer(local, [int(t.data_ptr()) for t in local.values()])

    def rank_streams(self) -> list[int]:
        if not self._streams:
            torch = torch_module()
            self._streams = [torch.cuda.Stream(device=self.device) for _ in range(self.world)]
        return [int(s.cuda_stream) for s in self._streams]

    def barrier(self) -> None:
        torch_module().cuda.current_stream().synchronize()


class IpcRanks(RankLayout):
    """One process per rank (torchrun); peers' buffers mapped through CUDA IPC."""

    def __init__(self, device: int | None = None):
        ensure_eager_loading()
        torch = torch_module()
        import torch.distributed as dist
        if not dist.is_initialized():
            backend = os.environ.get("PKSIM_DIST_BACKEND", "gloo")
            dist.init_process_group(backend=backend)
        self.dist = dist
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        if self.world > MAX_RANKS:
            raise ValidationError(f"world {self.world} is above {MAX_RANKS}")
        local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        if device is None:
            device = local_rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(device)
        self.device = torch.device("cuda", device)
        self.local = [self.rank]
        self._opened: dict[bytes, int] = {}
        self._lib: Library | None = None

    def alloc(self, nbytes: int, lib: Library) -> SharedBuffer:
        torch = torch_module()
        t = torch.empty(max(nbytes, 16), dtype=torch.uint8, device=self.device)
        ptr = int(t.data_ptr())
        handle, offset = lib.ipc_handle(ptr)
        everyone: list[Any] = [None] * self.world
        self.dist.all_gather_object(everyone, (handle, offset))
        ptrs = []
        for r, (h, off) in enumerate(everyone):
            if r == self.rank:
                ptrs.append(ptr)
                continue
            if h not in self._opened:
                self._opened[h] = lib.ipc_open(h)
                self._lib = lib
            ptrs.append(self._opened[h] + off)
        return SharedBuffer({self.rank: t}, ptrs)

    def barrier(self) -> None:
        torch_module().cuda.current_stream().synchronize()
        self.dist.barrier()

    def close(self) -> None:
        if self._lib is not None:
            for base in self._opened.values():
                self._lib.ipc_close(base)
        self._opened.clear()


# ---- one collective on some ranks ---------------------------------------------------------------

class Collective:
    """A library bound to ranks, a size and a dtype, with every buffer it needs."""

    def __init__(self, lib: Library, ranks: RankLayout, count: int, dtype: str = "bf16", root: int = 0,
                 blocks_per_rank: int = 0, device_sync: bool = True,
                 timeout_cycles: int = 1 << 32, seq: int = 0, splits: list[int] | None = None,
                 alpha: float = 1.0, bias_count: int = 0):
        """``splits``: the -v forms' and send/recv's split sizes (pkc_args::splits, elements);
        ``alpha`` and ``bias_count``: an epilogue's scale and bias (a device vector of that many
        elements of the dtype, ``self.bias``, filled by the caller before a run)."""
        torch = torch_module()
        if dtype not in DTYPE_CODE:
            raise ValidationError(f"dtype {dtype!r} is neither fp32 nor bf16")
        self.lib, self.ranks, self.count, self.dtype = lib, ranks, int(count), dtype
        self.root = root
        self.device_sync = device_sync
        self.elem = DTYPE_SIZE[dtype]
        self.torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
        a = PkcArgs()
        a.abi_version, a.world, a.rank = ABI_VERSION, ranks.world, ranks.rank
        a.dtype, a.count, a.blocks_per_rank = DTYPE_CODE[dtype], self.count, blocks_per_rank
        a.device_sync, a.root, a.timeout_cycles = int(device_sync), root, timeout_cycles
        a.phase_begin, a.phase_end, a.seq = 0, -1, seq
        a.alpha = alpha
        self.splits = list(splits) if splits is not None else None
        self.bias = None
        if bias_count:
            self.bias = torch.zeros(bias_count, dtype=self.torch_dtype, device=ranks.device)
            a.bias, a.bias_count = int(self.bias.data_ptr()), bias_count
        self.reqs = lib.requirements(a)
        r = self.reqs  # (a launch that spins checks co-residency itself, with the limit)
        self.in_bytes = r.in_count * self.elem
        self.out_bytes = r.out_count * self.elem
        self.inb = ranks.alloc(self.in_bytes, lib)
        self.outb = ranks.alloc(self.out_bytes + GUARD_BYTES, lib)
        self.scratchb = ranks.alloc(r.scratch_bytes, lib) if r.scratch_bytes else None
        self.flagb = ranks.alloc(4 * r.num_flags, lib)
        for t in self.flagb.local.values():
            t.zero_()
        for t in self.outb.local.values():
            t.fill_(GUARD_VALUE)
        self.err = torch.zeros(64, dtype=torch.uint8, device=ranks.device)
        # the host arrays the arguments point at (kept alive with the arguments)
        self._arrays = {"in_": host_array(self.inb.ptrs), "out": host_array(self.outb.ptrs),
                        "flags": host_array(self.flagb.ptrs)}
        if self.scratchb:
            self._arrays["scratch"] = host_array(self.scratchb.ptrs)
        if self.splits is not None:
            self._arrays["splits"] = (ctypes.c_ulonglong * len(self.splits))(*self.splits)
            a.num_splits = len(self.splits)
        if lib.mechanism == "copy-engine" and ranks.rank < 0:
            self._arrays["rank_streams"] = host_array(ranks.rank_streams())
        for name, arr in self._arrays.items():
            setattr(a, name, as_pointer(arr))
        a.scratch_bytes = r.scratch_bytes
        a.num_flags = r.num_flags
        a.err = int(self.err.data_ptr())
        a.stream = ranks.stream()
        self.table = None
        if r.table_bytes:     # world > PKC_INLINE_RANKS: the device peer table (abi.h)
            self.table = torch.empty(r.table_bytes, dtype=torch.uint8, device=ranks.device)
            a.table, a.table_bytes = int(self.table.data_ptr()), r.table_bytes
            lib.write_table(a, self.table)
        self.args = a
        ranks.barrier()  # every rank's zeroed flags before anyone signals

    # ---- views ---------------------------------------------------------------------------
    def inputs(self) -> dict[int, Any]:
        return {r: t[: self.in_bytes].view(self.torch_dtype) for r, t in self.inb.local.items()}

    def outputs(self) -> dict[int, Any]:
        return {r: t[: self.out_bytes].view(self.torch_dtype) for r, t in self.outb.local.items()}

    def guards_intact(self) -> bool:
        return all(bool((t[self.out_bytes:] == GUARD_VALUE).all())
                   for t in self.outb.local.values())

    # ---- running ------------------------------------------------------------------------
    def launch(self) -> None:
        """Enqueue one device-synchronised call (all phases) on the current stream."""
        self.args.stream = self.ranks.stream()
        self.lib.launch(self.args)
        self.args.seq += 1

    def launch_phase(self, phase: int) -> None:
        a = self.args
        a.stream = self.ranks.stream()
        a.device_sync, a.phase_begin, a.phase_end = 0, phase, phase + 1
        try:
            self.lib.launch(a)
        finally:
            a.device_sync, a.phase_begin, a.phase_end = int(self.device_sync), 0, -1

    def run(self, deadline_s: float = 60.0) -> None:
        """One complete call, waited for; raises ValidationError on any failure."""
        if self.device_sync:
            self.launch()
            self.wait(deadline_s)
            return
        self.ranks.barrier()
        for p in range(self.reqs.phases):
            self.launch_phase(p)
            self.wait(deadline_s)
            self.ranks.barrier()

    def wait(self, deadline_s: float = 60.0) -> None:
        """Wait for the stream with a wall-clock backstop, then read the error record."""
        wait_for_stream(self.lib, int(self.err.data_ptr()), deadline_s)

    def free(self) -> None:
        for b in (self.inb, self.outb, self.scratchb, self.flagb):
            if b is not None:
                b.local.clear()
        self.table = None


# A timing whose median is over DISTURBED x its fastest call was disturbed (another process,
# a clock change): most of its calls ran slow. One session had three such cases,
# with medians 1.6-5.8x their fastest call, where no case of three sessions before had one over
# 1.5x (docs/decisions/D27.md).
DISTURBED = 1.5


def spread(times: list[float]) -> float:
    """Median over fastest call of one timing: over DISTURBED, it was disturbed."""
    return statistics.median(times) / min(times)


def settled(timings: list[list[float]]) -> int:
    """Index of the attempt to keep among repeated timings of one case: the first that was
    not disturbed, else the least disturbed (smallest spread)."""
    for i, t in enumerate(timings):
        if spread(t) <= DISTURBED:
            return i
    return min(range(len(timings)), key=lambda i: spread(timings[i]))


def time_settled(coll: Collective, iters: int, warmup: int = 2, attempts: int = 3,
                 lead_cycles: int = 0) -> tuple[list[float], int, float]:
    """The calls of a case timed in two halves (time_in_halves), timed again (``attempts`` in
    all at most) while disturbed: the calls of the attempt ``settled`` keeps, how many
    attempts were made, and its time (the mean of its halves' medians)."""
    timings = [time_in_halves(coll, iters, warmup, lead_cycles)]
    while len(timings) < attempts and spread(timings[-1][0]) > DISTURBED:
        timings.append(time_in_halves(coll, iters, warmup, lead_cycles))
    times, med = timings[settled([t for t, _ in timings])]
    return times, len(timings), med


def time_in_halves(coll: Collective, iters: int, warmup: int = 2,
                   lead_cycles: int = 0) -> tuple[list[float], float]:
    """The calls of one timing in two halves, each with its warm-up. Whole timings of a
    4 KiB collective alternate, every other one 7-9 % slower, whatever the allocator cache or
    the flush buffer (validation/experiments/parity.py at commit 7cc519e; docs/decisions/D27.md); two halves in a row see
    both, as the experiment measured. (A half of warm-up + n calls after n flushes is an odd
    number of launches: a state that flipped with every launch would do this; nothing shows
    which.) Their calls, and the mean of the two halves' medians. An even warm-up gets one
    call more to keep the count odd."""
    warmup += 1 - warmup % 2
    first = time_calls(coll, iters // 2, warmup, lead_cycles=lead_cycles) if iters > 1 else []
    second = time_calls(coll, iters - len(first), warmup, lead_cycles=lead_cycles)
    meds = [statistics.median(h) for h in (first, second) if h]
    return first + second, sum(meds) / len(meds)


def time_calls(coll: Collective, iters: int, warmup: int = 2, flush_bytes: int = FLUSH_BYTES,
               deadline_s: float = 120.0, lead_cycles: int = 0) -> list[float]:
    """Seconds per call by CUDA events (validation/runtime/timer.py), each call after writing
    ``flush_bytes`` (cold L2) and, with ``lead_cycles``, a GPU spin that long before the first
    event; the waits have the wall-clock backstop of ``Collective.wait``."""
    flush = flush_buffer(coll.ranks.device, flush_bytes) if flush_bytes else None
    return _time_fn(coll.launch, iters, warmup, flush=flush, lead_cycles=lead_cycles,
                    wait=lambda: coll.wait(deadline_s))
