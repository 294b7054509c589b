"""CUDA IPC between the processes of a communicator, through the CUDA runtime (ctypes).

A buffer is named by the IPC handle of its allocation's base (``cudaIpcGetMemHandle``; the
base from the driver's ``cuMemGetAddressRange``, since torch's allocator hands out pieces of
larger segments) and its offset from that base. Every rank publishes (handle, offset) for its
buffer with one ``all_gather_object`` over the host group (``exchange``); a peer opens each
handle once (``cudaIpcOpenMemHandle``, cached by handle: torch reuses segments) and adds the
offset. A process never opens its own handle: its own pointer is used as is. Ranks on one
GPU map each other's memory the same way (the handles are of that device).

``CudaRuntime`` finds the runtime library that torch loaded (or the CUDA toolkit's); the
exchange logic takes any object with ``handle(ptr)`` and ``open(handle)``, so the tests drive it
with a fake one and a fake group."""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Any, Protocol

from pksim.torch.errors import CommError

HANDLE_BYTES = 64
LAZY_ENABLE_PEER_ACCESS = 1          # cudaIpcMemLazyEnablePeerAccess
_RUNTIME_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")


class IpcHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 opaque bytes, passed by value to cudaIpcOpenMemHandle."""
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class HostSide(Protocol):
    """The host side of a communicator: its rank, its size, an object all-gather, a barrier."""
    rank: int
    world: int

    def all_gather_object(self, obj: Any) -> list[Any]: ...

    def barrier(self) -> None: ...


class Ipc(Protocol):
    def handle(self, ptr: int) -> tuple[bytes, int]: ...

    def open(self, handle: bytes) -> int: ...


def runtime_candidates() -> list[str]:
    """Where libcudart may be: loaded already (by soname), the NVIDIA wheels torch depends
    on, $CUDA_HOME and /usr/local/cuda."""
    found = list(_RUNTIME_NAMES)
    for root in sys.path:
        found += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudart.so*")))
        found += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_runtime", "lib", "libcudart.so*")))
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(os.path.join(home, "lib64", "libcudart.so*")))
    return list(dict.fromkeys(found))


def _load(names: list[str], what: str) -> ctypes.CDLL:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CommError(f"pksim.torch needs {what}; none of {', '.join(names[:4])}... loads")


class CudaRuntime:
    """cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle by ctypes."""

    def __init__(self):
        self.rt = _load(runtime_candidates(), "the CUDA runtime (libcudart, as torch ships it)")
        self.drv = _load(["libcuda.so.1", "libcuda.so"], "the CUDA driver (libcuda.so.1)")
        self.rt.cudaGetErrorString.restype = ctypes.c_char_p
        self.rt.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcHandle,
                                                 ctypes.c_uint]
        self.rt.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        self.rt.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(IpcHandle), ctypes.c_void_p]
        self.drv.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                     ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        self._opened: dict[bytes, int] = {}

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            raise CommError(f"{call} failed: {self.rt.cudaGetErrorString(status).decode()}")

    def base_of(self, ptr: int) -> int:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        status = self.drv.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr)
        if status != 0:
            raise CommError(f"cuMemGetAddressRange failed ({status}) for {ptr:#x}: not device memory?")
        return int(base.value)

    def handle(self, ptr: int) -> tuple[bytes, int]:
        base = self.base_of(ptr)
        h = IpcHandle()
        self._check(self.rt.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(base)),
                    "cudaIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(h), HANDLE_BYTES), ptr - base

    def open(self, handle: bytes) -> int:
        if handle not in self._opened:
            out = ctypes.c_void_p()
            h = IpcHandle.from_buffer_copy(handle)
            self._check(self.rt.cudaIpcOpenMemHandle(ctypes.byref(out), h, LAZY_ENABLE_PEER_ACCESS),
                        "cudaIpcOpenMemHandle")
            self._opened[handle] = int(out.value)
        return self._opened[handle]

    def close(self) -> None:
        for base in self._opened.values():
            self.rt.cudaIpcCloseMemHandle(ctypes.c_void_p(base))
        self._opened.clear()


_RUNTIME: list[CudaRuntime] = []


def runtime() -> CudaRuntime:
    """This process's one CudaRuntime: its mappings are shared by every communicator (a handle
    is opened once per process) and stay until the process ends."""
    if not _RUNTIME:
        _RUNTIME.append(CudaRuntime())
    return _RUNTIME[0]


def exchange(group: HostSide, ipc: Ipc, ptr: int) -> list[int]:
    """Every rank's pointer to its buffer, as this process addresses it (one collective)."""
    handle, offset = ipc.handle(ptr)
    everyone = group.all_gather_object((handle, offset))
    if len(everyone) != group.world:
        raise CommError(f"IPC exchange: {len(everyone)} answers from a group of {group.world}")
    return [ptr if r == group.rank else ipc.open(h) + off for r, (h, off) in enumerate(everyone)]


def placement(keys: list[Any]) -> str:
    """How the ranks sit on devices, from each rank's (host, device uuid): "shared" when two
    ranks use one GPU (they time-slice it), else "separate"."""
    return "shared" if len(set(keys)) < len(keys) else "separate"
