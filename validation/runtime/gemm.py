"""The Hopper GEMM library (kernels/gemm, built by validation/run/gemm.py) loaded with ctypes:
its entry points and ``Runner``, which calls it on torch's current stream (the GEMM of the
fused kernels' unfused baseline, validation/run/fused.py, and the GEMM runner)."""
from __future__ import annotations

import ctypes
from pathlib import Path

# Negative status codes of kernels/gemm/gemm_host.cuh (pk::gemm::status).
STATUS = {0: "OK", -1: "ERR_NULL_POINTER", -2: "ERR_BAD_SHAPE", -3: "ERR_K_ALIGNMENT",
          -4: "ERR_N_ALIGNMENT", -5: "ERR_PTR_ALIGNMENT", -6: "ERR_BAD_GRID",
          -7: "ERR_BAD_VARIANT", -8: "ERR_TENSOR_MAP"}


def load_library(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.pk_gemm_bf16.argtypes = [vp, vp, vp, i, i, i, i, vp]
    lib.pk_gemm_bf16.restype = i
    lib.pk_gemm_bf16_ex.argtypes = [vp, vp, vp, i, i, i, i, i, i, i, i, vp]
    lib.pk_gemm_bf16_ex.restype = i
    lib.pk_gemm_num_variants.restype = i
    lib.pk_gemm_variant_name.argtypes = [i]
    lib.pk_gemm_variant_name.restype = ctypes.c_char_p
    lib.pk_gemm_strerror.argtypes = [i]
    lib.pk_gemm_strerror.restype = ctypes.c_char_p
    lib.pk_gemm_abi_version.restype = i
    return lib


def variant_names(lib) -> list[str]:
    return [lib.pk_gemm_variant_name(v).decode() for v in range(lib.pk_gemm_num_variants())]


class Runner:
    """Calls into the library on torch's current stream; raises on a non-zero status."""

    def __init__(self, lib, torch):
        self.lib, self.torch = lib, torch
        self.flags = 0

    def gemm(self, a, b, c, variant=0, sms=0, first_block=0, group_m=0):
        M, K = a.shape
        N = b.shape[1]
        stream = self.torch.cuda.current_stream().cuda_stream
        rc = self.lib.pk_gemm_bf16_ex(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, variant,
                                      sms, first_block, group_m, self.flags, stream)
        if rc != 0:
            raise RuntimeError(f"pk_gemm_bf16_ex returned {rc}: "
                               f"{self.lib.pk_gemm_strerror(rc).decode()}")
