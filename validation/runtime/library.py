"""What every ctypes runtime of a generated library shares (collectives: kernels/collectives/
abi.h, ``pkc_``; fused kernels: kernels/fused/abi.h, ``pkf_``): load the .so, check its ABI
version and the sizes of its argument structs against their ctypes mirrors, read its manifest,
call an entry point that writes a message on failure, wait for the stream with a wall-clock
backstop and read the device error record. torch is imported lazily (``torch_module``);
``CUDA_MODULE_LOADING=EAGER`` is set before CUDA initialises (``ensure_eager_loading``: lazy
loading lets the first launch wait on a module load while other blocks already spin)."""
from __future__ import annotations

import ctypes
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError

STATUS = {0: "ok", 1: "bad argument", 2: "CUDA error", 3: "device timeout", 4: "unsupported"}
MESSAGE_ARGS = [ctypes.c_char_p, ctypes.c_size_t]


def host_array(values) -> ctypes.Array:
    """A C array of pointers (the ABI's host arrays of world entries; keep it alive while the
    arguments that point at it are used)."""
    values = [int(v) if v else None for v in values]
    return (ctypes.c_void_p * max(1, len(values)))(*values)


def as_pointer(array: ctypes.Array | None) -> int | None:
    return ctypes.cast(array, ctypes.c_void_p).value if array is not None else None


def torch_module():
    """torch, or a one-line ValidationError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ValidationError("the GPU runtime needs torch (pip install 'pksim[validation]')") from None
    return torch


def ensure_eager_loading() -> None:
    """CUDA_MODULE_LOADING=EAGER, before CUDA initialises (warns if too late)."""
    if os.environ.get("CUDA_MODULE_LOADING") != "EAGER":
        os.environ["CUDA_MODULE_LOADING"] = "EAGER"
        try:
            import torch
            if torch.cuda.is_initialized():
                warnings.warn("CUDA was initialised before CUDA_MODULE_LOADING=EAGER was set; "
                              "spinning kernels may hang on lazy module loads")
        except ImportError:
            pass


class HangError(ValidationError):
    """The kernel did not finish in wall-clock time: the CUDA context is unusable now."""


class GeneratedLibrary:
    """A generated library loaded with ctypes. ``prefix`` names its functions (``pkc`` or
    ``pkf``: <prefix>_abi_version, _args_size, _reqs_size, _manifest, _requirements); the
    error record is read by ``pkc_read_error`` in both. ``args_type`` / ``reqs_type`` are the
    ctypes mirrors of its structs, checked by size here."""

    def __init__(self, path: str | Path, prefix: str, abi_version: int, args_type: type,
                 reqs_type: type, mirror: str):
        self.path = Path(path)
        try:
            d = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise ValidationError(f"cannot load {self.path}: {exc}") from None
        self.dll = d
        fn = lambda name: getattr(d, f"{prefix}_{name}")  # noqa: E731
        fn("abi_version").restype = ctypes.c_int
        fn("args_size").restype = ctypes.c_size_t
        fn("reqs_size").restype = ctypes.c_size_t
        fn("manifest").restype = ctypes.c_char_p
        if fn("abi_version")() != abi_version:
            raise ValidationError(f"{self.path.name}: ABI version {fn('abi_version')()}, "
                                  f"runtime expects {abi_version}")
        sizes = (fn("args_size")(), fn("reqs_size")())
        if sizes != (ctypes.sizeof(args_type), ctypes.sizeof(reqs_type)):
            raise ValidationError(f"{self.path.name}: {prefix}_args/{prefix}_reqs layout differs "
                                  f"from {mirror} (sizes {sizes[0]}/{sizes[1]} vs "
                                  f"{ctypes.sizeof(args_type)}/{ctypes.sizeof(reqs_type)})")
        self.manifest = json.loads(fn("manifest")().decode())
        self.op = self.manifest["op"]
        self.entry_name = self.manifest["entry"]
        self._entry = getattr(d, self.entry_name)
        self._entry.argtypes = [ctypes.POINTER(args_type), *MESSAGE_ARGS]
        self._entry.restype = ctypes.c_int
        self._requirements = fn("requirements")
        self._requirements.argtypes = [ctypes.POINTER(args_type), ctypes.POINTER(reqs_type),
                                       *MESSAGE_ARGS]
        self._requirements.restype = ctypes.c_int
        self._reqs_type = reqs_type
        self._table = fn("table")
        self._table.argtypes = [ctypes.POINTER(args_type), ctypes.c_void_p, ctypes.c_size_t,
                                *MESSAGE_ARGS]
        self._table.restype = ctypes.c_int
        d.pkc_read_error.argtypes = [ctypes.c_void_p, *MESSAGE_ARGS]
        d.pkc_read_error.restype = ctypes.c_int

    def call(self, fn, *args) -> tuple[int, str]:
        """A function's status and message, without raising."""
        buf = ctypes.create_string_buffer(1024)
        status = fn(*args, buf, ctypes.sizeof(buf))
        return status, buf.value.decode(errors="replace")

    def check(self, fn, *args) -> None:
        """Call ``fn``; a ValidationError naming the library, the entry and the status."""
        status, text = self.call(fn, *args)
        if status != 0:
            raise ValidationError(f"{self.path.name} ({self.entry_name}): "
                                  f"{STATUS.get(status, status)}: "
                                  f"{text or STATUS.get(status, 'unknown status')}")

    def requirements(self, args):
        reqs = self._reqs_type()
        self.check(self._requirements, ctypes.byref(args), ctypes.byref(reqs))
        return reqs

    def launch(self, args) -> None:
        self.check(self._entry, ctypes.byref(args))

    def write_table(self, args, device: Any) -> None:
        """Fill the device table (a torch uint8 tensor of reqs.table_bytes, already in
        args.table) for these arguments: the library writes its bytes into host memory
        (<prefix>_table), copied to the device here, once per set of buffers."""
        torch = torch_module()
        host = torch.empty(device.numel(), dtype=torch.uint8)
        self.check(self._table, ctypes.byref(args), ctypes.c_void_p(host.data_ptr()),
                   ctypes.c_size_t(host.numel()))
        device.copy_(host)

    def status_of(self, args) -> tuple[int, str]:
        """The entry point's status and message, without raising (argument checks)."""
        return self.call(self._entry, ctypes.byref(args))

    def check_error(self, err_ptr: int) -> None:
        self.check(self.dll.pkc_read_error, ctypes.c_void_p(err_ptr))


def wait_for_stream(lib: Any, err_ptr: int, deadline_s: float) -> None:
    """Wait for the current stream with a wall-clock backstop (HangError past it), then let
    ``lib`` read the kernel's error record at ``err_ptr`` (raises on a device timeout)."""
    ev = torch_module().cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > deadline_s:
            raise HangError(f"{lib.entry_name}: still running after {deadline_s:.0f} s "
                            f"although every device wait has a deadline")
        time.sleep(0.0002)
    lib.check_error(err_ptr)
