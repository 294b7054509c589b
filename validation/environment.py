"""What this machine offers pksim, and what each command needs (``pksim env``).

Every probe is cheap and never fails: a missing tool is a finding, not an error. torch is
looked up, not imported (importing it takes seconds); the GPU, driver and NVLink come from
nvidia-smi, multicast support from the driver's device attribute (queried, never used:
NVLink multicast stays off, ARCHITECTURE.md). The GPU commands call ``require`` before
any build starts, so a missing piece is one line that points here.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import shutil
import subprocess

from codegen.build import cache_dir, find_nvcc, nvcc_version
from hwmodels.errors import CompileError, ConfigError
from hwmodels.resources import KERNELS_ENV, find_kernels_dir, import_root

CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
# What each command needs, by the probes' names (the commands not listed need the simulator's
# Python dependencies only).
NEEDS: dict[str, tuple[str, ...]] = {
    "codegen": ("kernels",),
    "codegen --build": ("kernels", "nvcc"),
    "calibrate": ("gpu", "kernels", "nvcc"),
    "calibrate --from-json": (),
    "calibrate --ranks": ("gpu", "torch", "nvcc"),
    "run --virtual": ("gpu", "torch", "kernels", "nvcc"),
    "validate": ("gpu", "torch", "kernels", "nvcc"),
    "validate --prepare": ("kernels", "nvcc"),
    "validate --report": (),
    "predict, search, whatif, systems": ("simpy",),
}
WHAT = {"gpu": "an NVIDIA GPU (nvidia-smi)", "torch": "torch (pip install torch)",
        "kernels": f"the kernel sources (install pksim, or set ${KERNELS_ENV})",
        "nvcc": "nvcc (on PATH, $NVCC or /usr/local/cuda/bin/nvcc)", "simpy": "simpy"}


def _run(cmd: list[str], timeout: float = 30) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_gpus() -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"ok": False, "detail": "nvidia-smi not found", "gpus": []}
    out = _run([smi, "--query-gpu=index,name,driver_version,memory.total",
                "--format=csv,noheader"])
    gpus = [dict(zip(("index", "name", "driver", "memory"), (x.strip() for x in line.split(","))))
            for line in (out or "").splitlines() if line.strip()]
    if not gpus:
        return {"ok": False, "detail": "nvidia-smi lists no GPU", "gpus": []}
    return {"ok": True, "detail": f"{len(gpus)} x {gpus[0]['name']}, driver {gpus[0]['driver']}",
            "gpus": gpus}


def probe_nvlink() -> dict:
    smi = shutil.which("nvidia-smi")
    out = _run([smi, "nvlink", "--status", "-i", "0"]) if smi else None
    if out is None:
        return {"ok": False, "detail": "unknown (no nvidia-smi nvlink)", "links": 0}
    links = sum(1 for line in out.splitlines() if "GB/s" in line and "inactive" not in line.lower())
    return {"ok": links > 0, "detail": f"{links} active link(s) on GPU 0", "links": links}


def probe_multicast() -> dict:
    """CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED of device 0 (read only)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, value = ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
            return {"ok": False, "detail": "unknown (the CUDA driver has no device)"}
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                     dev) != 0:
            return {"ok": False, "detail": "unknown (the driver does not report it)"}
    except (OSError, AttributeError):
        return {"ok": False, "detail": "unknown (no CUDA driver library)"}
    ok = bool(value.value)
    return {"ok": ok, "detail": ("supported" if ok else "not supported") +
            " by device 0 (pksim never enables it on a GPU)"}


def probe_nvcc() -> dict:
    nvcc = find_nvcc()
    if nvcc is None:
        return {"ok": False, "detail": "not found (PATH, $NVCC, /usr/local/cuda/bin/nvcc)"}
    try:
        return {"ok": True, "detail": f"{nvcc} ({nvcc_version(nvcc)})", "path": nvcc}
    except CompileError as exc:
        return {"ok": False, "detail": str(exc), "path": nvcc}


def probe_package(dist: str, module: str) -> dict:
    if importlib.util.find_spec(module) is None:
        return {"ok": False, "detail": "not installed"}
    return {"ok": True, "detail": _version(dist) or "installed (version unknown)"}


def probe_kernels() -> dict:
    found = find_kernels_dir()
    return {"ok": found is not None, "detail": str(found) if found else
            f"not found (package pksim_kernels, ${KERNELS_ENV})"}


def probe_cache() -> dict:
    where = cache_dir()
    entries = [p for p in where.glob("*") if p.is_dir()] if where.is_dir() else []
    size = sum(f.stat().st_size for p in entries for f in p.glob("*") if f.is_file())
    return {"ok": True, "detail": f"{where}: {len(entries)} binaries, {size / 2**20:.1f} MiB",
            "path": str(where), "entries": len(entries), "size_bytes": size,
            "bytes": size}               # the old name, for one release (docs/outputs.md)


def probe_all() -> dict[str, dict]:
    return {"gpu": probe_gpus(), "nvcc": probe_nvcc(), "torch": probe_package("torch", "torch"),
            "simpy": probe_package("simpy", "simpy"), "nvlink": probe_nvlink(),
            "multicast": probe_multicast(), "kernels": probe_kernels(), "cache": probe_cache(),
            "install": {"ok": True, "detail": f"pksim {_version('pksim') or '?'} from "
                                              f"{import_root()}"}}


def missing_for(command: str, probes: dict[str, dict] | None = None) -> list[str]:
    """What ``command`` (a key of NEEDS) needs that this machine lacks, one phrase each."""
    probes = probes or {}
    lookup = {"gpu": probe_gpus, "nvcc": probe_nvcc, "kernels": probe_kernels,
              "torch": lambda: probe_package("torch", "torch"),
              "simpy": lambda: probe_package("simpy", "simpy")}
    out = []
    for need in NEEDS[command]:
        found = probes.get(need) or lookup[need]()
        if not found["ok"]:
            out.append(f"{WHAT[need]}: {found['detail']}")
    return out


def require(command: str, hint: str = "") -> None:
    """Raise one ConfigError naming what ``command`` lacks here, before anything is built."""
    missing = missing_for(command)
    if missing:
        extra = f"; {hint}" if hint else ""
        raise ConfigError(f"pksim {command} needs {'; '.join(missing)}{extra} "
                          f"(`pksim env` shows what this machine offers)")
