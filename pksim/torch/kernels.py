"""Generated libraries of a communicator: emitted once into the kernel cache
(``$PKSIM_CACHE``, codegen.build's), built once by nvcc (codegen's content-hash cache) and
loaded once per process.

Several processes of one communicator ask for the same kernel at the same time: a file lock
per kernel makes one of them emit and build it while the others wait, then every process loads
the same binary. ``prebuild`` builds a list of kernels in parallel first (a test script that
knows its calls saves the one-at-a-time builds)."""
from __future__ import annotations

import fcntl
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import codegen
from codegen.build import cache_dir, compile_many, BuildOptions
from codegen.manifest import read_manifest
from hwmodels.errors import PksimError
from hwmodels.system import System
from pksim_core.schedule import Schedule
from pksim.torch.choice import (KERNEL_OPS, choose_fused, likely_kernels, system_for_device,
                                system_named)
from pksim.torch.errors import CommError
from validation.runtime.collectives import Library
from validation.runtime.fused import FusedLib

FUSED_OPS = ("gemm-rs", "ag-gemm", "gemm-ar")


def source_dir(system: System) -> Path:
    return cache_dir() / "pksim-torch" / system.name


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def emitted(system: System, kernel: Schedule) -> Path:
    """The kernel's generated source in the cache (emitted now if it is not there)."""
    where = source_dir(system)
    lock = where / f".{kernel.key()}.lock"
    with _locked(lock):
        found = sorted(where.glob(f"*-{kernel.key()}.cu"))
        if found and found[0].with_suffix(".json").is_file():
            return found[0]
        try:
            return codegen.emit(system, kernel, None, where,
                                command="pksim.torch (kernel of a communicator)").source
        except PksimError as exc:
            raise CommError(f"cannot emit {kernel.op} {kernel.label()}: {exc}") from None


def built(system: System, kernel: Schedule) -> Path:
    source = emitted(system, kernel)
    with _locked(source.with_suffix(".lock")):
        try:
            return codegen.build(source)
        except PksimError as exc:
            raise CommError(f"cannot build {source.name}: {exc}") from None


class Kernels:
    """The libraries one process has loaded, by kernel schedule."""

    def __init__(self, system: System):
        self.system = system
        self._libs: dict[str, Any] = {}

    def library(self, kernel: Schedule):
        key = kernel.key()
        if key not in self._libs:
            path = built(self.system, kernel)
            self._libs[key] = FusedLib(path) if kernel.op in FUSED_OPS else Library(path)
        return self._libs[key]


def prebuild(system: System, kernels: list[Schedule], workers: int | None = None) -> list[str]:
    """Emit and build ``kernels`` in parallel; the failures, one line each."""
    sources = [emitted(system, k) for k in dict.fromkeys(kernels)]
    jobs = [(s, BuildOptions.from_dict(read_manifest(s)["build_options"])) for s in sources]
    results = compile_many(jobs, workers=workers or os.cpu_count())
    return [f"{s.name}: {r}" for s, r in zip(sources, results) if isinstance(r, Exception)]


def _likely(job: tuple[str, str, int]) -> list[Schedule]:
    return likely_kernels(*job)


def prebuild_for(device_name: str, worlds: list[int], workers: int | None = None) -> tuple[int, list[str]]:
    """Build every kernel a communicator of these worlds on this GPU may ask for
    (``choice.likely_kernels`` of every op, on the system ``system_for_device`` picks per
    world), the choices and nvcc on ``workers`` processes; (kernels, failures)."""
    jobs = [(system_for_device(device_name, w), op, w) for w in worlds for op in KERNEL_OPS]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        found = list(pool.map(_likely, jobs))
    for w in worlds:            # the fused ops at square shapes (one binary serves every shape)
        name = system_for_device(device_name, w)
        found.append([choose_fused(name, op, s, s, s, w).kernel for op in FUSED_OPS
                      for s in (512, 1024, 4096)])
        jobs.append((name, "fused", w))
    by_system: dict[str, dict[str, Schedule]] = {}
    for (name, _, _), kernels in zip(jobs, found):
        for k in kernels:
            by_system.setdefault(name, {}).setdefault(k.key(), k)
    failures = []
    for name, kernels in by_system.items():
        failures += prebuild(system_named(name), list(kernels.values()), workers)
    return sum(len(k) for k in by_system.values()), failures
