"""``pksim validate``, the preparing half: emit and build the suite's kernels, predict every
candidate schedule on the (calibrated) system, and write the cases files that
``validation/run/collectives.py`` (collectives) and ``validation/run/fused.py`` (fused GEMM +
communication kernels) run on the GPU (validation/run/supervisor.run_bundle runs both).

A prepared bundle (``DIR``) holds ``cases.json`` (the list validation/run/collectives.py reads: one case per
candidate with its schedule, blocks per rank, timing and ``predicted_s``, or ``not_predicted``
with the simulator's reason), ``prepare.json`` (suite, system, calibration inputs, counts,
estimated GPU time), ``suite.toml`` (the suite as read), ``src/`` and ``lib/``; with a fused
part, ``fused/``: ``cases.json`` in validation/run/fused.py's format (one timed and checked case per
candidate, with ``predicted_s`` or ``not_predicted``), ``libs.json``, ``memcheck_libs.txt``
(one library per (op, overlap), for compute-sanitizer), ``src/`` and ``lib/``. The GPU runs
append to ``DIR/measured.jsonl`` and ``DIR/fused-measured.jsonl``;
``validation/report/data.py`` joins them with the cases.

The whole kernels judged here are never calibration inputs: the calibration of the system
is fitted to validation/microbench primitives only, and ``prepare.json`` records which.
"""
from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from codegen.build import find_nvcc
from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.resources import import_root
from hwmodels.system import System
from hwmodels.units import format_bytes
from validation.layout import CASES, FUSED_DIR, PREPARE
from validation.prepare import collectives as matrix_cases
from validation.prepare.collectives import build_libs, runnable
from validation.prepare.estimate import WORKER_START_S, estimate_case_s
from validation.prepare.fused import prepare_fused
from validation.prepare.predict import predict_candidate
from validation.runtime import reference
from validation.runtime.memory import fitting
from validation.suites.suite import Suite

COPY_CASE = {"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1 << 30, "iters": 10}

def calibration_inputs(system: System) -> dict:
    """What the system's calibration was fitted to: microbenchmark groups, never kernels."""
    cal = dict(system.calibration or {})
    benches = sorted(cal.get("residual", {}))
    return {"calibrated": dict(system.calibrated or {}), "results": cal.get("results"),
            "command": cal.get("command"), "benchmarks": benches,
            "measured_only": sorted(cal.get("measured_only", {}))}


def source_state() -> dict:
    """The commit the bundle is prepared from, and whether model or kernel files differ from
    it (a prediction or library from an uncommitted tree cannot be reproduced)."""
    root = import_root()             # a checkout's root; site-packages (no git) for a wheel
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pksim", "hwmodels",
                                "codegen", "kernels/collectives", "kernels/include", "validation"],
                               cwd=root, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "modified": None}
    return {"commit": head or None, "modified": [x[3:] for x in dirty.splitlines()]}


def make_cases(suite: Suite, system: System, libs: dict) -> list[dict]:
    cases = [dict(COPY_CASE)]
    for seed, c in enumerate(suite.candidates(system.gpu.sm.count), start=1):
        iters, warmup = suite.timing(c.nbytes)
        case = {"id": c.case_id(), "lib": libs[(c.op, c.algorithm, c.mechanism)], "op": c.op,
                "algorithm": c.algorithm, "mechanism": c.mechanism, "world": c.world,
                "dtype": c.dtype, "bytes": c.nbytes,
                "count": reference.count_for_bytes(c.op, c.world, c.nbytes, c.dtype),
                "blocks_per_rank": c.blocks_per_rank, "time": True, "iters": iters,
                "warmup": warmup, "seed": seed,
                "deadline_s": 120 if c.nbytes >= (256 << 20) else 30}
        fields, why = predict_candidate(system, c)
        case.update(fields)
        if why is not None:
            case["not_predicted"] = why
        cases.append(case)
    return cases


@dataclass(frozen=True)
class Prepared:
    out: Path
    meta: dict
    cases: list[dict]


def gpu_capacity(system: System, gpu_memory_GB: float | None) -> tuple[float, str]:
    """The memory of the GPU the bundle will run on (bytes) and how to name it: the
    ``--gpu-memory`` given, else the capacity of one GPU of ``system``."""
    if gpu_memory_GB is not None:
        return gpu_memory_GB * 1e9, f"the {gpu_memory_GB:g} GB of --gpu-memory"
    capacity = system.gpu.hbm.capacity_B
    return capacity, f"the {capacity / 1e9:g} GB of one {system.gpu.model} ({system.name})"


def prepare(suite: Suite, out: Path, system_ref: str | None = None, build: bool = True,
            force: bool = False, command: str = "", matrix: bool = False,
            gpu_memory_GB: float | None = None) -> Prepared:
    """Emit (and build) the suite's kernels, predict every case, write the bundle (and, with
    ``matrix``, the collectives' correctness matrix in ``out/matrix``). Cases that cannot fit
    the GPU's memory (``gpu_capacity``) are left out, each with the reason, in prepare.json's
    ``left_out`` (validation.runtime.memory)."""
    out = Path(out)
    if (out / CASES).exists() and not force:
        raise ConfigError(f"{out / CASES}: already exists (use --force to prepare again)")
    system_ref = system_ref or suite.system
    system = load_system(system_ref, suite.overrides)
    capacity = system.domain.gpus_per_domain
    if suite.worlds and max(suite.worlds) > capacity:
        raise ConfigError(f"{suite.path}: world {max(suite.worlds)} is more than the "
                          f"{capacity} ranks of {system.name}")
    suite.check_candidates(system.gpu.sm.count)
    if build and find_nvcc() is None:
        raise ConfigError("nvcc not found (PATH, $NVCC, /usr/local/cuda/bin/nvcc): prepare "
                          "where CUDA is installed, or pass --no-build to write the cases only")
    out.mkdir(parents=True, exist_ok=True)
    libs = build_libs(out, system_ref, suite.kernels(), build=build) if suite.ops else {}
    capacity, memory = gpu_capacity(system, gpu_memory_GB)
    every = make_cases(suite, system, libs) if suite.ops else []
    cases, left_out = fitting(every, capacity, memory)
    fused = (prepare_fused(suite, system, out / FUSED_DIR, build, capacity, memory)
             if suite.fused else None)
    # the matrix runs on the suite's libraries, those of cases left out too (its own cases
    # are fitted to the memory on their own)
    matrix_cases, matrix_left_out = (write_matrix(out, every, system_ref, build, capacity, memory)
                                     if matrix else (0, []))
    runs = [c for c in cases if c.get("op")]
    est = (WORKER_START_S if runs else 0) + sum(estimate_case_s(c) for c in runs)
    by_size = Counter(format_bytes(c["bytes"]) for c in runs)
    groups = Counter((c["op"], c["bytes"], c["world"]) for c in runs)
    meta = {
        "suite": suite.name, "suite_file": suite.path, "description": suite.description,
        "system": system.name, "system_file": str(system.path),
        "system_set": list(suite.overrides),
        "calibration": calibration_inputs(system),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "built": build, "source": source_state(),
        "libraries": sorted(set(libs.values())),
        "cases": len(runs), "groups": len(groups),
        "candidates_per_group": {"min": min(groups.values(), default=0),
                                 "max": max(groups.values(), default=0)},
        "cases_by_size": dict(by_size),
        "not_predicted": sum(1 for c in runs if c["predicted_s"] is None),
        "estimated_gpu_s": round(est + (fused["estimated_gpu_s"] if fused else 0), 1),
        "fused": fused, "matrix_cases": matrix_cases,
        "gpu_memory_B": capacity, "left_out": left_out, "matrix_left_out": matrix_left_out,
    }
    (out / CASES).write_text(json.dumps(cases, indent=1) + "\n")
    (out / PREPARE).write_text(json.dumps(meta, indent=2) + "\n")
    if Path(suite.path).is_file():
        shutil.copyfile(suite.path, out / "suite.toml")
    return Prepared(out, meta, cases)


def write_matrix(out: Path, cases: list[dict], system_ref: str, build: bool,
                 capacity_B: float, memory: str) -> tuple[int, list[dict]]:
    """The correctness matrix of validation/prepare/collectives.py in ``out/matrix`` (cases.json,
    ipc_cases.json, the memcheck driver) on the bundle's own collective libraries, for
    validation/device/validate.sh (which links matrix/lib to ../lib), without the cases that
    cannot fit ``capacity_B`` bytes of GPU memory. Returns its case count and those left out."""
    libs = {(c["op"], c["algorithm"], c["mechanism"]): c["lib"] for c in cases if c.get("op")}
    # every runnable collective but recursive halving / doubling (not in the default suite:
    # the matrix runs what the bundle built)
    missing = [k for k in runnable() if k not in libs and k[1] != "rhd"]
    if missing:
        raise ConfigError(f"--matrix needs every runnable collective in the suite's collective "
                          f"part (the default suite has them); missing {'/'.join(missing[0])}")
    matrix = out / "matrix"
    matrix.mkdir(parents=True, exist_ok=True)
    mcases, ipc = matrix_cases.make_cases(libs, system_ref, "full")
    mcases, left_out = fitting(mcases, capacity_B, memory)
    (matrix / CASES).write_text(json.dumps(mcases, indent=1) + "\n")
    (matrix / "ipc_cases.json").write_text(json.dumps(ipc, indent=1) + "\n")
    if build:
        matrix_cases.build_sanitizer(matrix)
    return len(mcases), left_out
