"""The GPU runtime of the fused GEMM + communication kernels (kernels/fused): load a library,
give every virtual rank its buffers, run, wait, read the device error record, check against
torch.

* ``FusedLib``: a generated fused library loaded with ctypes; the C structs of
  kernels/fused/abi.h are mirrored here and checked by size at load.
* ``FusedCall``: one op on one shape with every buffer it needs, on this process's GPU (virtual
  ranks: every rank's buffers are separate allocations, one launch runs all ranks). Inputs are
  random normal bf16; outputs are filled with NaN and followed by a NaN guard tail, so an
  unwritten element or a stray write fails the check. ``check()`` compares every rank's
  output with the fp32 reference: sum over ranks of A_r @ B_r (gemm-rs: the owner's rows;
  gemm-ar: everything, on every rank) or A @ B_r (ag-gemm).

Tolerance (docs/decisions/D62.md). Each rank's product is rounded to bf16 before or while it
is summed (a bf16 partial, or a bf16 store-add), and the sum is rounded again: an element
passes when ``|out - ref| <= 2^-7 |ref| + S sqrt(K) / 64 + Z sigma_run`` with S = world for
the reductions (each of the world roundings of a partial of size ~sqrt(K) costs up to 2^-9 of
it, summed order-free) and S = 1 for ag-gemm. ``sigma_run`` (``running_sum_sigma``, 0 for
ag-gemm) is the rounding noise of a bf16 running sum of the world partials added in a random
order, the store-add kernels' way: a rounding of the running sum s_j costs up to half its ulp
(at most 2^-7 |s_j|), uniform, variance 2^-14 s_j^2 / 12, and over a random order E sum_j s_j^2
= (world + 1) (sum_r p_r^2 / 6 + ref^2 / 3); Z = RUN_Z. A lost or doubled partial (error of
order sqrt(K) in most elements of a tile) still fails in a few per cent of a tile's elements.
The relative Frobenius error and the largest |error| / tolerance are reported beside it.

torch is imported lazily; ``CUDA_MODULE_LOADING=EAGER`` is set before CUDA initialises.
"""
from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Any

from validation.runtime.library import (GeneratedLibrary, as_pointer, host_array, torch_module,
                                        wait_for_stream)

ABI_VERSION = 3
GUARD = 1024              # bf16 elements of NaN after every output
RUN_Z = 8                 # standard deviations of the running sum's roundings (D62)


class PkfArgs(ctypes.Structure):
    # a, b, out, partial, gathered, flags: host arrays of world pointers (host_array)
    _fields_ = [("abi_version", ctypes.c_int), ("world", ctypes.c_int), ("M", ctypes.c_int),
                ("N", ctypes.c_int), ("K", ctypes.c_int), ("a", ctypes.c_void_p),
                ("b", ctypes.c_void_p), ("out", ctypes.c_void_p), ("partial", ctypes.c_void_p),
                ("gathered", ctypes.c_void_p),
                ("partial_mc", ctypes.c_void_p), ("out_mc", ctypes.c_void_p),
                ("flags", ctypes.c_void_p), ("num_flags", ctypes.c_int),
                ("gemm_blocks", ctypes.c_int),
                ("comm_blocks", ctypes.c_int), ("tile_order", ctypes.c_int),
                ("group_m", ctypes.c_int), ("zero_output", ctypes.c_int), ("seq", ctypes.c_uint),
                ("err", ctypes.c_void_p), ("stream", ctypes.c_void_p),
                ("table", ctypes.c_void_p), ("table_bytes", ctypes.c_ulonglong),
                ("timeout_cycles", ctypes.c_longlong),
                ("one_rank", ctypes.c_int), ("rank", ctypes.c_int)]


class PkfReqs(ctypes.Structure):
    _fields_ = [("partial_bytes", ctypes.c_ulonglong), ("gathered_bytes", ctypes.c_ulonglong),
                ("num_flags", ctypes.c_int), ("gemm_blocks", ctypes.c_int),
                ("comm_blocks", ctypes.c_int), ("threads", ctypes.c_int),
                ("smem_bytes", ctypes.c_ulonglong), ("max_coresident_blocks", ctypes.c_int),
                ("spins", ctypes.c_int), ("table_bytes", ctypes.c_ulonglong)]


def running_sum_sigma(ref, sum_sq, world: int):
    """Standard deviation of the roundings of a bf16 running sum of ``world`` partials whose
    exact sum is ``ref`` and whose squares sum to ``sum_sq``, added in a random order (D62):
    sqrt(2^-14 / 12 x (world + 1) (sum_sq / 6 + ref^2 / 3)). Works on tensors and floats."""
    return ((world + 1) * (sum_sq / 6 + ref * ref / 3) * (2.0 ** -14 / 12)) ** 0.5


def row_lo(r: int, m: int, world: int) -> int:
    """First row owned by rank r (kernels/fused/fused.cuh: floor(r M / world))."""
    return r * m // world


class FusedLib(GeneratedLibrary):
    """A generated fused library (codegen.fused + codegen.build), loaded with ctypes."""

    def __init__(self, path: str | Path):
        super().__init__(path, "pkf", ABI_VERSION, PkfArgs, PkfReqs,
                         "validation/runtime/fused.py")
        self.overlap = self.manifest["overlap"]


class FusedCall:
    """One fused op on one shape, every rank's buffers allocated on the current GPU."""

    def __init__(self, lib: FusedLib, world: int, m: int, n: int, k: int, *, comm_blocks: int = 0,
                 gemm_blocks: int = 0, tile_order: int = -1, group_m: int = 0, seed: int = 1,
                 timeout_cycles: int = 1 << 32, seq: int = 0):
        torch = torch_module()
        self.lib, self.op = lib, lib.op
        self.world, self.m, self.n, self.k = world, m, n, k
        dev = torch.device("cuda", torch.cuda.current_device())
        g = torch.Generator(device=dev).manual_seed(seed)
        bf16 = torch.bfloat16
        self.lo = [row_lo(r, m, world) for r in range(world + 1)]
        if self.op == "ag-gemm":
            self.a_full = torch.randn(m, k, device=dev, dtype=bf16, generator=g)
            self.a = [self.a_full[self.lo[r]:self.lo[r + 1]].clone() for r in range(world)]
        else:
            self.a = [torch.randn(m, k, device=dev, dtype=bf16, generator=g) for _ in range(world)]
        self.b = [torch.randn(k, n, device=dev, dtype=bf16, generator=g) for _ in range(world)]
        self.out_rows = [self.lo[r + 1] - self.lo[r] if self.op == "gemm-rs" else m
                         for r in range(world)]
        self.out_buf = [torch.full((rows * n + GUARD,), float("nan"), device=dev, dtype=bf16)
                        for rows in self.out_rows]
        self.out = [buf[: rows * n].view(rows, n) for buf, rows in zip(self.out_buf, self.out_rows)]
        a = PkfArgs()
        a.abi_version, a.world, a.M, a.N, a.K = ABI_VERSION, world, m, n, k
        a.comm_blocks, a.gemm_blocks, a.tile_order, a.group_m = comm_blocks, gemm_blocks, \
            tile_order, group_m
        a.zero_output, a.seq, a.timeout_cycles = 1, seq, timeout_cycles
        self._arrays = {"a": host_array([t.data_ptr() for t in self.a]),
                        "b": host_array([t.data_ptr() for t in self.b]),
                        "out": host_array([t.data_ptr() for t in self.out])}
        for name, arr in self._arrays.items():
            setattr(a, name, as_pointer(arr))
        self.reqs = lib.requirements(a)
        q = self.reqs
        u8 = torch.uint8
        self.partial = [torch.empty(q.partial_bytes, device=dev, dtype=u8)
                        for _ in range(world)] if q.partial_bytes else []
        self.gathered = [torch.empty(q.gathered_bytes, device=dev, dtype=u8)
                         for _ in range(world)] if q.gathered_bytes else []
        self.flags = [torch.zeros(max(q.num_flags, 1), device=dev, dtype=torch.int32)
                      for _ in range(world)]
        self.err = torch.zeros(64, device=dev, dtype=u8)
        for name, bufs in (("partial", self.partial), ("gathered", self.gathered),
                           ("flags", self.flags)):
            if bufs:
                self._arrays[name] = host_array([t.data_ptr() for t in bufs])
                setattr(a, name, as_pointer(self._arrays[name]))
        a.num_flags = q.num_flags
        a.err = self.err.data_ptr()
        # the device table (fused/abi.h): tensor maps and arrays, written once for these buffers
        self.table = torch.empty(q.table_bytes + 64, device=dev, dtype=u8)
        off = (-self.table.data_ptr()) % 64
        self.table_view = self.table[off:off + q.table_bytes]
        a.table, a.table_bytes = self.table_view.data_ptr(), q.table_bytes
        lib.write_table(a, self.table_view)
        self.args = a

    # ---- running ----------------------------------------------------------------------------
    def launch(self) -> None:
        self.args.stream = torch_module().cuda.current_stream().cuda_stream
        self.lib.launch(self.args)
        self.args.seq += 1

    def wait(self, deadline_s: float = 30.0) -> None:
        """Wait with a wall-clock backstop, then read the error record (raises on failure)."""
        wait_for_stream(self.lib, int(self.err.data_ptr()), deadline_s)

    def run(self, deadline_s: float = 30.0) -> None:
        self.launch()
        self.wait(deadline_s)

    # ---- checking ---------------------------------------------------------------------------
    def reference(self, r: int):
        """fp32 reference of rank r's output (TF32 off)."""
        return self._reference(r)[0]

    def _reference(self, r: int):
        """Rank r's reference and, for the reductions, the sum of its partials' squares."""
        torch = torch_module()
        torch.backends.cuda.matmul.allow_tf32 = False
        if self.op == "ag-gemm":
            return self.a_full.float() @ self.b[r].float(), None
        if not hasattr(self, "_sum"):
            self._sum, self._sq = 0.0, 0.0
            for q in range(self.world):
                p = self.a[q].float() @ self.b[q].float()
                self._sum = self._sum + p
                self._sq = self._sq + p * p
                del p
        if self.op == "gemm-rs":
            rows = slice(self.lo[r], self.lo[r + 1])
            return self._sum[rows], self._sq[rows]
        return self._sum, self._sq

    def check(self) -> dict[str, Any]:
        torch = torch_module()
        s = 1 if self.op == "ag-gemm" else self.world
        atol = s * math.sqrt(self.k) / 64
        bad, max_err, ratio, num, den, guards = 0, 0.0, 0.0, 0.0, 0.0, True
        for r in range(self.world):
            ref, sq = self._reference(r)
            tol = 2.0 ** -7 * ref.abs() + atol
            if sq is not None:
                tol = tol + RUN_Z * running_sum_sigma(ref, sq, self.world)
            err = torch.nan_to_num((self.out[r].float() - ref).abs(), nan=float("inf"))
            bad += int((err > tol).sum().item())
            max_err = max(max_err, float(err.max().item()))
            ratio = max(ratio, float((err / tol).max().item()))
            num += float(err.clamp(max=1e30).pow(2).sum().item())
            den += float(ref.pow(2).sum().item())
            guards = guards and bool(torch.isnan(self.out_buf[r][self.out_rows[r] * self.n:]).all())
            del ref, sq, err, tol
        for name in ("_sum", "_sq"):
            if hasattr(self, name):
                delattr(self, name)
        rel = math.sqrt(num / den) if den else float("inf")
        return {"ok": bad == 0 and guards, "bad": bad, "max_abs_err": max_err,
                "max_err_over_tol": ratio, "rel_err": rel, "atol": atol, "rtol": 2.0 ** -7,
                "run_z": RUN_Z if s > 1 else 0, "guards_ok": guards}

    def free(self) -> None:
        for name in ("a", "b", "out", "out_buf", "partial", "gathered", "flags"):
            setattr(self, name, [])
        self.table = self.table_view = None
        self.a_full = None
