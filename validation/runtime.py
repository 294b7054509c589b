"""The GPU runtime for generated collectives: load a library, give every rank its buffers,
run, wait, read the device error record.

Two ways of placing ranks, behind one interface (``Ranks``):

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

``Collective`` ties a library to a ``Ranks``: it asks the library for its buffer sizes
(``pkc_requirements``), allocates inputs, outputs (with a guard tail checked after every
run), scratch, flag counters and the error record, and runs it. torch is imported lazily;
``CUDA_MODULE_LOADING=EAGER`` is set before CUDA initialises (lazy loading lets the first
launch wait on a module load while other blocks already spin).
"""
from __future__ import annotations

import ctypes
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError

MAX_RANKS = 8
ABI_VERSION = 1
DTYPE_CODE = {"fp32": 0, "bf16": 1}
DTYPE_SIZE = {"fp32": 4, "bf16": 2}
GUARD_BYTES = 256
GUARD_VALUE = 0xA5
STATUS = {0: "ok", 1: "bad argument", 2: "CUDA error", 3: "device timeout", 4: "unsupported"}

# Every timed call follows a write of this many bytes, which evicts the L2 (50 MiB on an H200)
# and is what the host issues a copy-engine collective's calls behind.
FLUSH_BYTES = 256 << 20
# Copy-engine collectives are timed behind a GPU spin of this many clock cycles (about 2 ms at
# the H200's 1.98 GHz) after the flush, longer than the host takes to issue any of their
# calls (validation/data/h200-ce-issue-2026-12-02.jsonl: up to 1.05 ms), so the events time
# the GPU's work alone; the host's calls are a separate question (docs/VALIDATION.md).
CE_LEAD_CYCLES = 4_000_000


def ensure_eager_loading() -> None:
    """CUDA_MODULE_LOADING=EAGER, before CUDA initialises (warns if too late)."""
    if os.environ.get("CUDA_MODULE_LOADING") != "EAGER":
        os.environ["CUDA_MODULE_LOADING"] = "EAGER"
        try:
            import torch
            if torch.cuda.is_initialized():
                import warnings
                warnings.warn("CUDA was initialised before CUDA_MODULE_LOADING=EAGER was set; "
                              "spinning kernels may hang on lazy module loads")
        except ImportError:
            pass


def _torch():
    try:
        import torch
    except ImportError:
        raise ValidationError("the GPU runtime needs torch (pip install 'pksim[validation]')") from None
    return torch


# ---- the C interface (kernels/collectives/abi.h) ------------------------------------------------
VoidArr = ctypes.c_void_p * MAX_RANKS


class PkcArgs(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_int), ("world", ctypes.c_int), ("rank", ctypes.c_int),
                ("dtype", ctypes.c_int), ("count", ctypes.c_ulonglong), ("in_", VoidArr),
                ("out", VoidArr), ("scratch", VoidArr), ("flags", VoidArr),
                ("in_mc", ctypes.c_void_p), ("out_mc", ctypes.c_void_p),
                ("scratch_bytes", ctypes.c_ulonglong), ("num_flags", ctypes.c_int),
                ("blocks_per_rank", ctypes.c_int), ("err", ctypes.c_void_p),
                ("stream", ctypes.c_void_p), ("rank_streams", VoidArr), ("seq", ctypes.c_uint),
                ("phase_begin", ctypes.c_int), ("phase_end", ctypes.c_int),
                ("device_sync", ctypes.c_int), ("root", ctypes.c_int),
                ("timeout_cycles", ctypes.c_longlong)]


class PkcReqs(ctypes.Structure):
    _fields_ = [("in_count", ctypes.c_ulonglong), ("out_count", ctypes.c_ulonglong),
                ("scratch_bytes", ctypes.c_ulonglong), ("num_flags", ctypes.c_int),
                ("phases", ctypes.c_int), ("blocks_per_rank", ctypes.c_int),
                ("max_coresident_blocks", ctypes.c_int), ("threads", ctypes.c_int),
                ("smem_bytes", ctypes.c_ulonglong), ("barriers_per_launch", ctypes.c_int)]


class Library:
    """A generated collective library (``codegen.build`` output), loaded with ctypes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.dll = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise ValidationError(f"cannot load {self.path}: {exc}") from None
        d = self.dll
        d.pkc_abi_version.restype = ctypes.c_int
        d.pkc_args_size.restype = ctypes.c_size_t
        d.pkc_reqs_size.restype = ctypes.c_size_t
        d.pkc_manifest.restype = ctypes.c_char_p
        if d.pkc_abi_version() != ABI_VERSION:
            raise ValidationError(f"{self.path.name}: ABI version {d.pkc_abi_version()}, "
                                  f"runtime expects {ABI_VERSION}")
        if d.pkc_args_size() != ctypes.sizeof(PkcArgs) or d.pkc_reqs_size() != ctypes.sizeof(PkcReqs):
            raise ValidationError(f"{self.path.name}: pkc_args/pkc_reqs layout differs from "
                                  f"validation/runtime.py (sizes {d.pkc_args_size()}/"
                                  f"{d.pkc_reqs_size()} vs {ctypes.sizeof(PkcArgs)}/"
                                  f"{ctypes.sizeof(PkcReqs)})")
        self.manifest = json.loads(d.pkc_manifest().decode())
        self.op = self.manifest["op"]
        self.algorithm = self.manifest["algorithm"]
        self.mechanism = self.manifest["mechanism"]
        self.entry_name = self.manifest["entry"]
        self._entry = getattr(d, self.entry_name)
        msg_args = [ctypes.c_char_p, ctypes.c_size_t]
        self._entry.argtypes = [ctypes.POINTER(PkcArgs), *msg_args]
        self._entry.restype = ctypes.c_int
        d.pkc_requirements.argtypes = [ctypes.POINTER(PkcArgs), ctypes.POINTER(PkcReqs), *msg_args]
        d.pkc_read_error.argtypes = [ctypes.c_void_p, *msg_args]
        d.pkc_ipc_handle.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                     ctypes.POINTER(ctypes.c_ulonglong), *msg_args]
        d.pkc_ipc_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), *msg_args]
        d.pkc_ipc_close.argtypes = [ctypes.c_void_p]

    def _call(self, fn, *args) -> None:
        msg = ctypes.create_string_buffer(1024)
        status = fn(*args, msg, ctypes.sizeof(msg))
        if status != 0:
            text = msg.value.decode(errors="replace") or STATUS.get(status, "unknown status")
            raise ValidationError(f"{self.path.name} ({self.entry_name}): "
                                  f"{STATUS.get(status, status)}: {text}")

    def requirements(self, args: PkcArgs) -> PkcReqs:
        reqs = PkcReqs()
        self._call(self.dll.pkc_requirements, ctypes.byref(args), ctypes.byref(reqs))
        return reqs

    def launch(self, args: PkcArgs) -> None:
        self._call(self._entry, ctypes.byref(args))

    def check_error(self, err_ptr: int) -> None:
        self._call(self.dll.pkc_read_error, ctypes.c_void_p(err_ptr))

    def ipc_handle(self, ptr: int) -> tuple[bytes, int]:
        handle = ctypes.create_string_buffer(64)
        offset = ctypes.c_ulonglong(0)
        self._call(self.dll.pkc_ipc_handle, ctypes.c_void_p(ptr), handle, ctypes.byref(offset))
        return handle.raw, offset.value

    def ipc_open(self, handle: bytes) -> int:
        base = ctypes.c_void_p()
        self._call(self.dll.pkc_ipc_open, bytes(handle), ctypes.byref(base))
        return int(base.value)

    def ipc_close(self, base: int) -> None:
        self.dll.pkc_ipc_close(ctypes.c_void_p(base))


# ---- where the ranks live ----------------------------------------------------------------------

class SharedBuffer:
    """One buffer per rank: torch tensors for the ranks in this process, pointers for all."""

    def __init__(self, local: dict[int, Any], ptrs: list[int]):
        self.local = local
        self.ptrs = ptrs


class Ranks:
    """Where the ranks of a collective live. ``rank`` is -1 for virtual ranks."""
    world: int
    rank: int
    local: list[int]

    def alloc(self, nbytes: int, lib: Library) -> SharedBuffer:
        raise NotImplementedError

    def stream(self) -> int:
        return int(_torch().cuda.current_stream().cuda_stream)

    def rank_streams(self) -> list[int]:
        return []

    def barrier(self) -> None:
        """Host-side meeting of the ranks once this process's stream work has finished."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class VirtualRanks(Ranks):
    """Every rank on this process's GPU; one stream per rank for copy engines."""

    def __init__(self, world: int, device: int = 0):
        if not 1 <= world <= MAX_RANKS:
            raise ValidationError(f"world {world} is outside 1..{MAX_RANKS}")
        ensure_eager_loading()
        torch = _torch()
        if not torch.cuda.is_available():
            raise ValidationError("no CUDA device: virtual ranks need one GPU")
        torch.cuda.set_device(device)
        self.world, self.rank, self.local = world, -1, list(range(world))
        self.device = torch.device("cuda", device)
        self._streams = [torch.cuda.Stream(device=self.device) for _ in range(world)]

    def alloc(self, nbytes: int, lib: Library) -> SharedBuffer:
        torch = _torch()
        local = {r: torch.empty(max(nbytes, 16), dtype=torch.uint8, device=self.device)
                 for r in range(self.world)}
        return SharedBuffer(local, [int(t.data_ptr()) for t in local.values()])

    def rank_streams(self) -> list[int]:
        return [int(s.cuda_stream) for s in self._streams]

    def barrier(self) -> None:
        _torch().cuda.current_stream().synchronize()


class IpcRanks(Ranks):
    """One process per rank (torchrun); peers' buffers mapped through CUDA IPC."""

    def __init__(self, device: int | None = None):
        ensure_eager_loading()
        torch = _torch()
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
        torch = _torch()
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
        _torch().cuda.current_stream().synchronize()
        self.dist.barrier()

    def close(self) -> None:
        if self._lib is not None:
            for base in self._opened.values():
                self._lib.ipc_close(base)
        self._opened.clear()


# ---- one collective on some ranks ---------------------------------------------------------------

class Collective:
    """A library bound to ranks, a size and a dtype, with every buffer it needs."""

    def __init__(self, lib: Library, ranks: Ranks, count: int, dtype: str = "bf16", root: int = 0,
                 blocks_per_rank: int = 0, device_sync: bool = True,
                 timeout_cycles: int = 1 << 32, seq: int = 0):
        torch = _torch()
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
        for i in range(ranks.world):
            a.in_[i] = self.inb.ptrs[i]
            a.out[i] = self.outb.ptrs[i]
            a.flags[i] = self.flagb.ptrs[i]
            if self.scratchb:
                a.scratch[i] = self.scratchb.ptrs[i]
        a.scratch_bytes = r.scratch_bytes
        a.num_flags = r.num_flags
        a.err = int(self.err.data_ptr())
        a.stream = ranks.stream()
        for i, s in enumerate(ranks.rank_streams()):
            a.rank_streams[i] = s
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


class HangError(ValidationError):
    """The kernel did not finish in wall-clock time: the CUDA context is unusable now."""


def wait_for_stream(lib: Any, err_ptr: int, deadline_s: float) -> None:
    """Wait for the current stream with a wall-clock backstop (HangError past it), then let
    ``lib`` read the kernel's error record at ``err_ptr`` (raises on a device timeout).
    Shared by the collectives and the fused kernels (validation/fused_runtime.py)."""
    ev = _torch().cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > deadline_s:
            raise HangError(f"{lib.entry_name}: still running after {deadline_s:.0f} s "
                            f"although every device wait has a deadline")
        time.sleep(0.0002)
    lib.check_error(err_ptr)


# A timing whose median is over DISTURBED x its fastest call was disturbed (another process,
# a clock change): most of its calls ran slow. Run 14 (2026-12-03) had three such cases, with
# medians 1.6-5.8x their fastest call, where no case of runs 9, 11 and 13 had one over 1.5x.
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
    the flush buffer (validation/experiments/parity.py, 2026-12-03); two halves in a row see
    both, as the experiment measured. (A half of warm-up + n calls after n flushes is an odd
    number of launches: a state that flipped with every launch would do this; nothing shows
    which.) Their calls, and the mean of the two halves' medians. An even warm-up gets one
    call more to keep the count odd."""
    warmup += 1 - warmup % 2
    first = time_calls(coll, iters // 2, warmup, lead_cycles=lead_cycles) if iters > 1 else []
    second = time_calls(coll, iters - len(first), warmup, lead_cycles=lead_cycles)
    meds = [statistics.median(h) for h in (first, second) if h]
    return first + second, sum(meds) / len(meds)


_FLUSH: dict = {}


def flush_buffer(device: Any, nbytes: int) -> Any:
    """The buffer whose write flushes the L2 before each timed call: one per device and size
    for the whole process rather than one from the allocator per timing (the same times:
    validation/experiments/parity.py, run 2)."""
    key = (str(device), nbytes)
    if key not in _FLUSH:
        _FLUSH[key] = _torch().empty(nbytes, dtype=_torch().uint8, device=device)
    return _FLUSH[key]


def time_calls(coll: Collective, iters: int, warmup: int = 2, flush_bytes: int = FLUSH_BYTES,
               deadline_s: float = 120.0, lead_cycles: int = 0) -> list[float]:
    """Seconds per call by CUDA events, each call after writing ``flush_bytes`` (cold L2)
    and, with ``lead_cycles``, a GPU spin that long before the first event."""
    torch = _torch()
    flush = flush_buffer(coll.ranks.device, flush_bytes) if flush_bytes else None
    for _ in range(warmup):
        coll.launch()
    coll.wait(deadline_s)
    pairs = []
    for _ in range(iters):
        if flush is not None:
            flush.zero_()
        if lead_cycles:
            torch.cuda._sleep(lead_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        coll.launch()
        end.record()
        pairs.append((start, end))
    coll.wait(deadline_s)
    return [s.elapsed_time(e) / 1e3 for s, e in pairs]
