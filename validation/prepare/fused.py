"""Preparing the fused GEMM + communication kernels (where nvcc and the simulator are): emit and
build one library per fused variant (codegen.fused), the Hopper GEMM (kernels/gemm) and the
baseline collectives (codegen) into a bundle, and write its cases (validation/run/fused.py's
format), predicted: a suite's fused candidates (``prepare_fused``, for ``pksim validate``) or
the fused runner's own set of checked and timed cases (this module's command line):

    python -m validation.prepare.fused BUNDLE [--suite full|quick] [--no-predict]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from codegen import fused
from codegen.build import compile_many, find_nvcc
from hwmodels.catalog import load_system
from hwmodels.errors import CompileError, ConfigError
from hwmodels.resources import device_dir, kernels_dir
from hwmodels.system import System
from pksim_core.schedule import Schedule
from pksim_core.workloads.fused_ops import ALGORITHMS
from validation.layout import CASES, MEMCHECK_LIBS, SANITIZE_FUSED
from validation.prepare.collectives import build_libs
from validation.prepare.estimate import WORKER_START_S, estimate_fused_case_s
from validation.prepare.predict import PREDICT_SYSTEM, predict_fused_case, predict_variant
from validation.runtime.memory import fitting
from validation.run import gemm as gemm_runner
from validation.suites.fused_kernels import (BASELINE, VARIANTS, fused_case,
                                             none_case, short)
from validation.suites.suite import Suite

SYSTEM = "h200-virtual"                       # what the libraries are generated for
# the fused runner's own timed cases are timed from an idle GPU, as the default validation
# suite's ([fused.timing] idle): 4 x the previous call's time before each call
DEFAULT_IDLE = 4.0
# (world, m, n, k): ragged shapes (m not a multiple of the tile or of world x 128, odd world,
# ranks owning fewer rows than one 64-row sub-tile; w7 2999 x 2056 x 1032 and the timed w8 3000
# x 5120 x 2560, odd rows per rank, broke the intra-SM gemm-rs before D65; timed cases are
# checked too)
CHECK_SHAPES = [(2, 1000, 1000, 1000), (3, 1000, 1024, 264), (4, 3000, 2048, 1024),
                (8, 1000, 1024, 512), (8, 100, 264, 72), (8, 4096, 4096, 1024),
                (7, 2999, 2056, 1032)]
TIME_SHAPES = [(2, 8192, 8192, 2048), (4, 8192, 8192, 2048), (8, 8192, 8192, 2048),
               (8, 8192, 8192, 1024), (4, 4096, 4096, 4096), (8, 3000, 5120, 2560)]
QUICK_CHECK = [(2, 1000, 1000, 1000), (8, 1000, 1024, 512)]
QUICK_TIME = [(8, 8192, 8192, 2048)]
COMM_BLOCKS = {2: (8, 16), 3: (4,), 4: (4, 8), 7: (2,), 8: (2, 4)}   # inter-SM, per rank



def build_bundle(bundle: Path, build: bool = True) -> dict[str, str]:
    """Every library the cases use, as paths relative to the bundle. ``build=False`` only
    emits the sources and returns the paths the libraries will have (``lib<stem>.so``)."""
    system = load_system(SYSTEM)
    (bundle / "lib").mkdir(parents=True, exist_ok=True)
    jobs, names = [], []
    for op, ov, alg, mech in VARIANTS:
        s = Schedule(op=op, shape=(("k", 2048), ("m", 8192), ("n", 8192)), world=8, overlap=ov,
                     algorithm=alg, mechanism=mech, comm_sms=2 if ov == "inter-sm" else 1)
        e = fused.emit(system, s, None, bundle / "src")
        jobs.append((e.source, fused.build_options(e.plan)))
        names.append(short(op, ov, mech))
    if not build:
        (bundle / "src").mkdir(parents=True, exist_ok=True)
        shutil.copy2(gemm_runner.source(), bundle / "src" / "pk_gemm.cu")
        libs = {name: f"lib/lib{src.stem}.so" for name, (src, _) in zip(names, jobs)}
        libs["gemm"] = "lib/libpk_gemm.so"
        colls = sorted(set(BASELINE.values()) | {("all-reduce", "two-shot", "tma")})
        for key, path in build_libs(bundle, SYSTEM, colls, build=False).items():
            libs["/".join(key)] = path
        return libs
    libs: dict[str, str] = {}
    for name, res in zip(names, compile_many(jobs)):
        if isinstance(res, Exception):
            raise res
        shutil.copy2(res, bundle / "lib" / res.name)
        libs[name] = f"lib/{res.name}"
    gemm = gemm_runner.build_library()
    shutil.copy2(gemm, bundle / "lib" / "libpk_gemm.so")
    shutil.copy2(gemm_runner.source(), bundle / "src" / "pk_gemm.cu")  # fallback build: libpk_gemm.so
    libs["gemm"] = "lib/libpk_gemm.so"
    colls = sorted(set(BASELINE.values()) | {("all-reduce", "two-shot", "tma")})
    for key, path in build_libs(bundle, SYSTEM, colls).items():
        libs["/".join(key)] = path
    return libs


def make_cases(libs: dict[str, str], suite: str, with_predictions: bool) -> list[dict]:
    check_shapes = CHECK_SHAPES if suite == "full" else QUICK_CHECK
    time_shapes = TIME_SHAPES if suite == "full" else QUICK_TIME
    cases: list[dict] = []
    for name in (short(*v[:2], v[3]) for v in VARIANTS):
        cases.append({"id": f"args-{name}", "kind": "arg_check", "lib": libs[name]})
    for name in ("gemm-rs-inter-sm-register", "ag-gemm-inter-sm-tma"):
        cases.append({"id": f"timeout-{name}", "kind": "timeout", "lib": libs[name],
                      "op": name.split("-inter")[0], "world": 4, "m": 1000, "n": 1024, "k": 256,
                      "comm_blocks": 2, "seq": 1000, "timeout_cycles": 1 << 22})
    seed = 10
    for timed, shapes in ((False, check_shapes), (True, time_shapes)):
        for (w, m, n, k) in shapes:
            for op, ov, alg, mech in VARIANTS:
                if timed and op == "ag-gemm" and mech == "register" and (w, m) != (8, 8192):
                    continue  # register copies: timed at one shape only
                combos = [(0, -1)]
                if ov == "inter-sm":
                    counts = COMM_BLOCKS[w] if timed else COMM_BLOCKS[w][:1]
                    combos = [(c, 0) for c in counts] + ([(counts[0], 1)] if timed else [])
                for comm, order in combos:
                    seed += 1
                    case = fused_case(libs, (op, ov, alg, mech), (w, m, n, k), comm, order,
                                      timed=timed, seed=seed)
                    if timed:
                        case["idle"] = DEFAULT_IDLE
                    if timed and with_predictions:
                        case.update(predict_variant(op, ov, alg, mech, w, m, n, k, comm or 1))
                    cases.append(case)
            for op in BASELINE:
                if op == "gemm-rs" and (m * n) % w:
                    continue
                seed += 1
                case = none_case(libs, op, (w, m, n, k), timed=timed, seed=seed)
                if timed:
                    case["idle"] = DEFAULT_IDLE
                if timed and with_predictions:
                    p = predict_variant(op, "none", ALGORITHMS[op][0], "register", w, m, n, k, 1)
                    case["predicted_s"] = p.get("predicted_s")
                    case["predicted_system"] = PREDICT_SYSTEM
                cases.append(case)
    return cases


def make_fused_cases(suite: Suite, system: System, libs: dict[str, str]) -> list[dict]:
    """One timed and checked run_fused case per fused candidate of the suite, predicted.
    With the suite's ``[fused.timing] interleave``, a group's candidates come one after
    another, marked to be timed call by call in turn (validation/run/fused.py); else in
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
    exe = out / SANITIZE_FUSED
    cmd = [find_nvcc() or "nvcc", "-O2", "-std=c++17", "-I", str(kernels_dir()), "-o",
           str(exe), str(device_dir() / "sanitize_fused.cpp"), "-ldl"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"building {exe.name} failed ({exc})", cmd) from None
    if res.returncode != 0:
        raise CompileError(f"building {exe.name} failed (exit {res.returncode})", cmd, res.stderr)
    return exe


def prepare_fused(suite: Suite, system: System, out: Path, build: bool,
                  capacity_B: float | None = None, memory: str = "") -> dict:
    """Emit (and build) the fused libraries, the GEMM and the baseline collectives into
    ``out`` (validation/run/fused.py's bundle layout) and write its cases, without those
    that cannot fit ``capacity_B`` bytes of GPU memory (``memory`` names it; None: all);
    the summary, with the cases left out and why (``left_out``)."""
    f = suite.fused
    capacity = system.domain.gpus_per_domain
    if max(f.worlds) > capacity:
        raise ConfigError(f"{suite.path}: fused world {max(f.worlds)} is more than the "
                          f"{capacity} ranks of {system.name}")
    out.mkdir(parents=True, exist_ok=True)
    libs = build_bundle(out, build=build)
    if build:
        build_sanitizer(out)
    cases, left_out = make_fused_cases(suite, system, libs), []
    if capacity_B is not None:
        cases, left_out = fitting(cases, capacity_B, memory)
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
            "estimated_gpu_s": round(WORKER_START_S + sum(map(estimate_fused_case_s, cases)), 1),
            "left_out": left_out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path, help="build the libraries and cases into this bundle")
    ap.add_argument("--suite", choices=("full", "quick"), default="full")
    ap.add_argument("--no-predict", action="store_true", help="prepare without predictions")
    args = ap.parse_args(argv)
    libs = build_bundle(args.bundle)
    cases = make_cases(libs, args.suite, not args.no_predict)
    (args.bundle / CASES).write_text(json.dumps(cases, indent=1) + "\n")
    (args.bundle / "libs.json").write_text(json.dumps(libs, indent=1) + "\n")
    print(f"{len(cases)} cases, {len(libs)} libraries in {args.bundle}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
