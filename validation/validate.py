"""``pksim validate``, the preparing and running half: emit and build the suite's kernels,
predict every candidate schedule on the (calibrated) system, write the cases files that
``validation/run_collectives.py`` (collectives) and ``validation/run_fused.py`` (fused GEMM +
communication kernels) run on the GPU, and run them when this machine has one.

A prepared bundle (``DIR``) holds ``cases.json`` (the list run_collectives reads: one case per
candidate with its schedule, blocks per rank, timing and ``predicted_s``, or ``not_predicted``
with the simulator's reason), ``prepare.json`` (suite, system, calibration inputs, counts,
estimated GPU time), ``suite.toml`` (the suite as read), ``src/`` and ``lib/``; with a fused
part, ``fused/``: ``cases.json`` in run_fused's format (one timed and checked case per
candidate, with ``predicted_s`` or ``not_predicted``), ``libs.json``, ``memcheck_libs.txt``
(one library per (op, overlap), for compute-sanitizer), ``src/`` and ``lib/``. The GPU runs
append to ``DIR/measured.jsonl`` and ``DIR/fused-measured.jsonl``;
``validation/validate_report.py`` joins them with the cases.

The whole kernels judged here are never calibration inputs: the calibration of the system
is fitted to validation/microbench primitives only, and ``prepare.json`` records which.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hwmodels.catalog import load_system
from hwmodels.errors import CompileError, ConfigError, InfeasibleError, ValidationError
from hwmodels.system import System
from hwmodels.units import format_bytes
from validation import reference
from validation.suite import Candidate, Suite

CASES = "cases.json"
PREPARE = "prepare.json"
MEASURED = "measured.jsonl"
FUSED_DIR = "fused"
FUSED_MEASURED = "fused-measured.jsonl"
MEMCHECK_LIBS = "memcheck_libs.txt"
SANITIZE_FUSED = "sanitize_fused"           # the memcheck driver (validation/sanitize_fused.cpp)
COPY_CASE = {"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1 << 30, "iters": 10}
# Rough costs of one case on an H200 for the run-time estimate, from the wall times of the
# 2026-12-02 run (validation/data/h200-collectives-2026-12-02.jsonl): a fixed cost, an L2
# flush per timed call, buffer set-up and checking per byte, and the fp32 reference of a
# reduction per byte. Only an estimate: measured times may be several times the predicted.
CASE_FIXED_S = 0.003
FLUSH_S = 150e-6
SETUP_S_PER_BYTE = 1.2e-12
REDUCE_CHECK_S_PER_BYTE = 1.0e-11
WORKER_START_S = 20.0
FALLBACK_GBPS = 1000.0            # traffic rate assumed where a case has no prediction
# A fused case (validation/data/h200-fused-2026-12-02-run2.jsonl: 0.06-0.54 s each): buffers
# and the fp32 reference, checked before and after timing, plus the timed calls; "none" times
# five things (GEMMs + collective, GEMMs, torch GEMMs, collective, torch GEMMs + collective).
FUSED_CASE_FIXED_S = 0.02
IDLE_CLOCK_HZ = 1.98e9   # turns run_fused.IDLE_LEAD_CYCLES (before each call timed from idle) into s
FUSED_REFERENCE_FLOPS = 50e12     # fp32 reference matmul (TF32 off)
FUSED_FALLBACK_FLOPS = 500e12     # where a case has no prediction


def split_hint(out: str | Path = "DIR") -> str:
    return (f"split the run: `pksim validate --prepare -o {out}` where nvcc and the simulator "
            f"are, `python -m validation.run_collectives --cases {out}/{CASES} --out "
            f"{out}/{MEASURED}` (and, for fused kernels, `python -m validation.run_fused "
            f"--bundle {out}/{FUSED_DIR} --out {out}/{FUSED_MEASURED}`) on the GPU machine, "
            f"then `pksim validate --report {out}`")


def gpu_missing() -> str | None:
    """Why this machine cannot run the suite (None when it can)."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine (nvidia-smi not found)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[validation]')"
    return None


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
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pksim", "hwmodels",
                                "codegen", "kernels/collectives", "kernels/include", "validation"],
                               cwd=root, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "modified": None}
    return {"commit": head or None, "modified": [x[3:] for x in dirty.splitlines()]}


def flush_lead_s(system: System, mechanism: str = "") -> float:
    """How long the GPU is busy before every timed call (validation/runtime.time_calls), the
    host issuing the call's work meanwhile: writing the L2-flushing buffer at the system's
    memory bandwidth and, for copy-engine collectives, the spin of CE_LEAD_CYCLES."""
    from validation.runtime import CE_LEAD_CYCLES, FLUSH_BYTES
    lead = FLUSH_BYTES / system.gpu.hbm.effective_Bps
    if mechanism == "copy-engine":
        lead += CE_LEAD_CYCLES / system.gpu.sm.clock_Hz
    return lead


def predict_candidate(system: System, c: Candidate) -> tuple[dict, str | None]:
    """(schedule + prediction fields, reason it could not be predicted or None)."""
    from pksim.schedule import Schedule
    from pksim.simulate import predict
    sched = Schedule(op=c.op, shape=(("bytes", c.nbytes),), world=c.world, dtype=c.dtype,
                     algorithm=c.algorithm, mechanism=c.mechanism, comm_sms=c.blocks_per_rank)
    out = {"schedule": sched.to_dict(), "schedule_key": sched.key(), "label": sched.label()}
    try:
        p = predict(system, sched, host_lead_s=flush_lead_s(system, c.mechanism), cold=True)
    except InfeasibleError as exc:
        return out | {"predicted_s": None}, str(exc)
    return out | {"predicted_s": p.time_s, "bound_s": p.bound_s,
                  "bound_resource": p.bound_resource, "predicted_algbw_GBps": p.algbw_GBps}, None


def predict_fused_case(system: System, case: dict) -> tuple[dict, str | None]:
    """(schedule + prediction fields, reason it could not be predicted or None) of a run_fused
    case: a fused case as its schedule, a "none" case as that schedule's unfused baseline
    (the library GEMMs, then the collective), as validation/compare_fused.py predicts them."""
    from pksim.simulate import predict
    from validation.compare_fused import schedule_of
    sched = schedule_of(case)
    if case.get("tile_order") == 1:
        sched = sched.with_(peer_order="sequential")
    out = {"schedule": sched.to_dict(), "schedule_key": sched.key(), "label": sched.label()}
    try:
        p = predict(system, sched, host_lead_s=flush_lead_s(system))
    except InfeasibleError as exc:
        return out | {"predicted_s": None}, str(exc)
    t = p.baseline_s if case["kind"] == "none" else p.time_s
    return out | {"predicted_s": t, "bound_s": p.bound_s, "bound_resource": p.bound_resource,
                  "predicted_baseline_s": p.baseline_s, "predicted_system": system.name}, None


def estimate_fused_case_s(case: dict) -> float:
    """Seconds one fused or "none" case takes on the GPU."""
    w, m, n, k = (case[x] for x in ("world", "m", "n", "k"))
    flops = 2.0 * w * m * n * k
    from validation.run_fused import IDLE_LEAD_CYCLES
    t = case.get("predicted_s") or flops / FUSED_FALLBACK_FLOPS
    idle = case.get("idle", 0.0)                 # timed from idle: a sleep and a spin first
    gap = idle * t + IDLE_LEAD_CYCLES / IDLE_CLOCK_HZ if idle else 0.0
    calls = case["warmup"] * t + case["iters"] * (t + FLUSH_S + gap)
    timed = 5 * calls if case["kind"] == "none" else \
        2 * calls if case.get("overlap") == "intra-sm" else calls
    return FUSED_CASE_FIXED_S + 2 * flops / FUSED_REFERENCE_FLOPS + timed


def make_fused_cases(suite: Suite, system: System, libs: dict[str, str]) -> list[dict]:
    """One timed and checked run_fused case per fused candidate of the suite, predicted.
    With the suite's ``[fused.timing] interleave``, a group's candidates come one after
    another, marked to be timed call by call in turn (validation/run_fused.py); else in
    the candidates' order, each timed on its own."""
    f = suite.fused
    candidates = list(enumerate(f.candidates(), start=10))     # seeds as listed
    if f.interleave:                                           # groups in order of appearance
        first: dict = {}
        for i, (_, c) in enumerate(candidates):
            first.setdefault(c.group, i)
        candidates.sort(key=lambda sc: first[sc[1].group])
    cases = []
    for seed, c in candidates:
        case = c.case(libs, seed, f.iters, f.warmup)
        if f.idle > 0:
            case["idle"] = f.idle
        if f.interleave:
            op, m, n, k, w = c.group
            case["interleave"] = f"{op} {m}x{n}x{k} w{w}"
        fields, why = predict_fused_case(system, case)
        case.update(fields)
        if why is not None:
            case["not_predicted"] = why
        cases.append(case)
    return cases


def build_sanitizer(out: Path) -> Path:
    """The compute-sanitizer driver of the fused libraries (host code + the CUDA runtime,
    linked statically), built here so that the GPU machine needs no nvcc."""
    from codegen.build import find_nvcc
    root = Path(__file__).resolve().parents[1]
    exe = out / SANITIZE_FUSED
    cmd = [find_nvcc() or "nvcc", "-O2", "-std=c++17", "-I", str(root / "kernels"), "-o",
           str(exe), str(root / "validation" / "sanitize_fused.cpp"), "-ldl"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"building {exe.name} failed ({exc})", cmd) from None
    if res.returncode != 0:
        raise CompileError(f"building {exe.name} failed (exit {res.returncode})", cmd, res.stderr)
    return exe


def prepare_fused(suite: Suite, system: System, out: Path, build: bool) -> dict:
    """Emit (and build) the fused libraries, the GEMM and the baseline collectives into
    ``out`` (validation/run_fused.py's bundle layout) and write its cases; the summary."""
    from validation.run_fused import build_bundle, short
    f = suite.fused
    capacity = system.domain.gpus_per_domain
    if max(f.worlds) > capacity:
        raise ConfigError(f"{suite.path}: fused world {max(f.worlds)} is more than the "
                          f"{capacity} ranks of {system.name}")
    out.mkdir(parents=True, exist_ok=True)
    libs = build_bundle(out, build=build)
    if build:
        build_sanitizer(out)
    cases = make_fused_cases(suite, system, libs)
    (out / CASES).write_text(json.dumps(cases, indent=1) + "\n")
    (out / "libs.json").write_text(json.dumps(libs, indent=1) + "\n")
    memcheck = [libs[short(op, ov, mech)] for op, ov, _, mech in f.memcheck_variants()]
    (out / MEMCHECK_LIBS).write_text("".join(f"{p}\n" for p in memcheck))
    groups = Counter(c.group for c in f.candidates())
    return {"cases": len(cases), "groups": len(groups),
            "candidates_per_group": {"min": min(groups.values()), "max": max(groups.values())},
            "cases_by_overlap": dict(Counter(c.get("overlap", "none") for c in cases)),
            "not_predicted": sum(1 for c in cases if c["predicted_s"] is None),
            "libraries": sorted(set(libs.values())), "memcheck_libraries": memcheck,
            "estimated_gpu_s": round(WORKER_START_S + sum(map(estimate_fused_case_s, cases)), 1)}


def estimate_case_s(case: dict) -> float:
    """Seconds one case takes on the GPU (set-up, check, warm-up and timed calls)."""
    op, w, n, dt = case["op"], case["world"], case["count"], case["dtype"]
    i, o = reference.counts(op, w, n)
    buffers = (i + o) * w * reference.ELEM[dt]
    traffic = reference.min_traffic_bytes(op, w, n, dt)
    t = case.get("predicted_s") or (10e-6 + traffic / (FALLBACK_GBPS * 1e9))
    s = CASE_FIXED_S + buffers * SETUP_S_PER_BYTE
    if op in ("reduce-scatter", "all-reduce"):
        s += buffers * REDUCE_CHECK_S_PER_BYTE
    if case.get("time"):
        s += (case["iters"] + case["warmup"]) * t + case["iters"] * FLUSH_S
    return s


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


def prepare(suite: Suite, out: Path, system_ref: str | None = None, build: bool = True,
            force: bool = False, command: str = "", matrix: bool = False) -> Prepared:
    """Emit (and build) the suite's kernels, predict every case, write the bundle (and, with
    ``matrix``, the collectives' correctness matrix in ``out/matrix``)."""
    from codegen.build import find_nvcc
    from validation.collective_cases import build_libs
    out = Path(out)
    if (out / CASES).exists() and not force:
        raise ConfigError(f"{out / CASES}: already exists (use --force to prepare again)")
    system_ref = system_ref or suite.system
    system = load_system(system_ref)
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
    cases = make_cases(suite, system, libs) if suite.ops else []
    fused = prepare_fused(suite, system, out / FUSED_DIR, build) if suite.fused else None
    matrix_cases = write_matrix(out, cases, system_ref, build) if matrix else 0
    runs = [c for c in cases if c.get("op")]
    est = (WORKER_START_S if runs else 0) + sum(estimate_case_s(c) for c in runs)
    by_size = Counter(format_bytes(c["bytes"]) for c in runs)
    groups = Counter((c["op"], c["bytes"], c["world"]) for c in runs)
    meta = {
        "suite": suite.name, "suite_file": suite.path, "description": suite.description,
        "system": system.name, "system_file": str(system.path),
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
    }
    (out / CASES).write_text(json.dumps(cases, indent=1) + "\n")
    (out / PREPARE).write_text(json.dumps(meta, indent=2) + "\n")
    if Path(suite.path).is_file():
        shutil.copyfile(suite.path, out / "suite.toml")
    return Prepared(out, meta, cases)


def write_matrix(out: Path, cases: list[dict], system_ref: str, build: bool) -> int:
    """The correctness matrix of validation/collective_cases.py in ``out/matrix`` (cases.json,
    ipc_cases.json, the memcheck driver) on the bundle's own collective libraries, for
    validation/gpu_validate.sh (which links matrix/lib to ../lib). Returns its case count."""
    from validation.collective_cases import build_sanitizer, make_cases, runnable
    libs = {(c["op"], c["algorithm"], c["mechanism"]): c["lib"] for c in cases if c.get("op")}
    missing = [k for k in runnable() if k not in libs]
    if missing:
        raise ConfigError(f"--matrix needs every runnable collective in the suite's collective "
                          f"part (the default suite has them); missing {'/'.join(missing[0])}")
    matrix = out / "matrix"
    matrix.mkdir(parents=True, exist_ok=True)
    mcases, ipc = make_cases(libs, system_ref, "full")
    (matrix / CASES).write_text(json.dumps(mcases, indent=1) + "\n")
    (matrix / "ipc_cases.json").write_text(json.dumps(ipc, indent=1) + "\n")
    if build:
        build_sanitizer(matrix)
    return len(mcases)


def load_bundle(out: Path) -> tuple[dict, list[dict]]:
    """(prepare.json, cases.json) of a prepared bundle; one-line errors otherwise."""
    out = Path(out)
    for name in (CASES, PREPARE):
        if not (out / name).is_file():
            raise ConfigError(f"{out / name}: not found (is {out} a bundle written by "
                              f"`pksim validate --prepare -o {out}`?)")
    try:
        meta = json.loads((out / PREPARE).read_text())
        cases = json.loads((out / CASES).read_text())
    except ValueError as exc:
        raise ConfigError(f"{out}: cases.json or prepare.json is not valid JSON ({exc})") from None
    return meta, cases


def run_gpu(out: Path, deadline_s: float, case_timeout_s: float = 120.0) -> int:
    """Run the bundle on this machine's GPU: the collectives (validation/run_collectives.py),
    then the fused cases (validation/run_fused.py), within ``deadline_s`` together. Both
    restart their worker after a crash or hang and resume from what their results file
    already holds; cases left when the time is up are reported as not measured."""
    import time
    t0 = time.monotonic()
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    runs = []
    if json.loads((out / CASES).read_text()):
        runs.append([sys.executable, "-m", "validation.run_collectives", "--cases",
                     str(out / CASES), "--out", str(out / MEASURED)])
    if (out / FUSED_DIR / CASES).is_file():
        runs.append([sys.executable, "-m", "validation.run_fused", "--bundle",
                     str(out / FUSED_DIR), "--out", str(out / FUSED_MEASURED)])
    worst = 0
    for cmd in runs:
        left = deadline_s - (time.monotonic() - t0)
        cmd += ["--deadline-s", str(max(1.0, left)), "--case-timeout", str(case_timeout_s)]
        code = subprocess.run(cmd, env=env).returncode
        if code not in (0, 1):          # 1: some cases failed, which the report lists
            raise ValidationError(f"the GPU run stopped (exit {code}): {' '.join(cmd)}")
        worst = max(worst, code)
    return worst


__all__ = ["prepare", "load_bundle", "run_gpu", "gpu_missing", "split_hint", "Prepared",
           "estimate_case_s", "estimate_fused_case_s", "predict_fused_case", "CASES", "PREPARE",
           "MEASURED", "FUSED_DIR", "FUSED_MEASURED", "MEMCHECK_LIBS"]
