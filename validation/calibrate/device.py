"""The GPU a calibration measures: what it is (name, SMs, L2, memory, clocks, architecture),
read from the device (``torch.cuda.get_device_properties`` and ``nvidia-smi``) or from the
device record a results file carries, and the catalog system it starts from: the one-GPU
system of that GPU no calibration wrote, or the ``--system`` a user names, refused when it is
another GPU. The calibrated file states the device's own figures (SM count, L2, memory,
clock) so that a fit on an H100 never writes an H200's."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

from hwmodels.catalog import list_systems, load_system
from hwmodels.errors import ConfigError, ValidationError
from hwmodels.system import System

# compute capability (major) -> architecture (hwmodels.system.ARCHITECTURES)
ARCHITECTURE_OF = {8: "ampere", 9: "hopper", 10: "blackwell", 12: "blackwell"}
# the product in a device or GPU model name: H100, H200, B200, GB200, A100, ...
_PRODUCT = re.compile(r"\b(G?[A-Z]\d{3})\b")
_PROBE = """
import json, torch
p = torch.cuda.get_device_properties(0)
print(json.dumps({"name": p.name, "sm_count": p.multi_processor_count,
                  "l2_bytes": getattr(p, "L2_cache_size", None), "global_mem_bytes": p.total_memory,
                  "cc": f"{p.major}.{p.minor}"}))
"""


def product(name: str) -> str | None:
    """The product a device or GPU model name names ("NVIDIA H100 80GB HBM3" -> "H100")."""
    found = _PRODUCT.search(name.replace("NVIDIA ", ""))
    return found.group(1) if found else None


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    cc: str                              # compute capability, "9.0"
    sm_clock_mhz: float | None = None    # the SM clock's maximum (nvidia-smi clocks.max.sm)
    driver: str = ""

    @property
    def architecture(self) -> str | None:
        try:
            return ARCHITECTURE_OF.get(int(self.cc.split(".")[0]))
        except ValueError:
            return None

    @property
    def product(self) -> str | None:
        return product(self.name)

    def describe(self) -> str:
        return (f"{self.name} (compute {self.cc}, {self.sm_count} SMs, "
                f"{self.l2_bytes / 2**20:g} MiB L2, {self.memory_bytes / 1e9:.1f} GB)")


def from_record(device: Mapping[str, Any], where: str) -> DeviceFacts:
    """The facts a results file's ``device`` record holds (validation/microbench/run.py: the
    programs' cudaGetDeviceProperties and nvidia-smi); a one-line error naming ``where`` and
    what is missing."""
    need = ("name", "sm_count", "l2_bytes", "global_mem_bytes", "cc")
    missing = [k for k in need if device.get(k) in (None, "")]
    if missing:
        raise ValidationError(f"{where}: its device record lacks {', '.join(missing)}: cannot "
                              f"tell which GPU it measured; give --system")
    clock = device.get("clock_max_sm_mhz") or (device.get("sm_clock_khz") or 0) / 1000 or None
    return DeviceFacts(str(device["name"]), int(device["sm_count"]), int(device["l2_bytes"]),
                       int(device["global_mem_bytes"]), str(device["cc"]),
                       float(clock) if clock else None,
                       str(device.get("driver_version") or device.get("driver") or ""))


def probe(device: int, python: str) -> DeviceFacts:
    """Read CUDA device ``device``: torch.cuda.get_device_properties (in ``python``, the
    interpreter with torch) and nvidia-smi (its maximum SM clock and the driver)."""
    env_device = {"CUDA_VISIBLE_DEVICES": str(device)}
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             timeout=120, env={**os.environ, **env_device})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValidationError(f"reading the device with {python} failed ({exc})") from None
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValidationError(f"reading the device with {python} failed: {tail}")
    record = json.loads(out.stdout.strip().splitlines()[-1])
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, f"--id={device}", "--query-gpu=clocks.max.sm,driver_version",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=60)
        if q.returncode == 0 and q.stdout.strip():
            clock, driver = (x.strip() for x in q.stdout.strip().splitlines()[0].split(","))
            record.update(clock_max_sm_mhz=clock, driver_version=driver)
    return from_record(record, f"device {device}")


def matches(system: System, facts: DeviceFacts) -> list[str]:
    """How ``system``'s GPU differs from the device (empty: it is that GPU): architecture,
    product and SM count."""
    gpu = system.gpu
    out = []
    if facts.architecture != gpu.architecture:
        out.append(f"architecture {gpu.architecture}, the device's {facts.architecture or facts.cc}")
    model = product(gpu.model)
    if facts.product and model and model != facts.product:
        out.append(f"GPU {gpu.model}, the device is an {facts.product}")
    if gpu.sm.count != facts.sm_count:
        out.append(f"{gpu.sm.count} SMs, the device has {facts.sm_count}")
    return out


def start_system(facts: DeviceFacts, system_name: str | None) -> str:
    """The system a calibration of this device starts from and inherits: ``system_name`` if
    given (refused when it describes another GPU), else the one-GPU catalog system of that GPU
    that no calibration wrote; a clear error naming --system when there is none."""
    if system_name is not None:
        diff = matches(load_system(system_name), facts)
        if diff:
            raise ConfigError(f"--system {system_name} is not the GPU measured "
                              f"({facts.describe()}): {'; '.join(diff)}; give --system a "
                              f"system file for this GPU")
        return system_name
    found = []
    for name in list_systems():
        s = load_system(name)
        if s.domain.gpus_per_domain == 1 and s.calibration is None and not matches(s, facts):
            found.append(name)
    if not found:
        raise ConfigError(f"{facts.describe()} matches no one-GPU system of the catalog "
                          f"(pksim systems list): give --system NAME|FILE, the system the "
                          f"calibration starts from and its file inherits")
    return found[0]


def figure_lines(facts: DeviceFacts) -> dict[str, list[str]]:
    """The device's own figures for the calibrated file, by table: SM count, L2 and memory
    capacity (cudaGetDeviceProperties) and the SM clock's maximum (nvidia-smi), tagged as
    measured on it."""
    source = f"cudaGetDeviceProperties / nvidia-smi on {facts.name} (driver {facts.driver})"

    def line(key: str, value: float) -> str:
        return (f"{key} = {{ value = {value:g}, source = {json.dumps(source)}, "
                f"provenance = \"calibrated\" }}")

    out = {"gpu.sm": [line("count", facts.sm_count)],
           "gpu.l2": [line("capacity_MiB", round(facts.l2_bytes / 2**20, 4))],
           "gpu.hbm": [line("capacity_GB", round(facts.memory_bytes / 1e9, 2))]}
    if facts.sm_clock_mhz:
        out["gpu.sm"].append(line("clock_MHz", facts.sm_clock_mhz))
    return out
