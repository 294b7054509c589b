"""The random matrix's timed slice (issue #38: "no case of the matrix's timed slice above 1.5x
its prediction"): random shapes of the generated kernels, timed on the GPU as the default
suite times its cases, each predicted with the measured GPU's own calibration, so that the
report (validation/report/random_timed.py) can flag every cliff.

* collectives: ``TIMED_COLLECTIVES`` cases cycling over every collective x algorithm x
  mechanism of the correctness matrix (validation.prepare.collectives.runnable), worlds 2 to 8
  as each kernel allows (pksim_core.kernel_contract.world_reason), bf16 and fp32 in turn, sizes
  log-uniform from 4 KiB to 64 MiB (nccl-tests bytes), odd element counts in half the draws;
  blocks per rank the model's best for that kernel (validation.prepare.predict.predict_case),
  predicted behind the L2 flush as the default suite is (predict_candidate); 100 calls, 3
  warm-ups, checked against torch too;
* fused: ``TIMED_FUSED_GROUPS`` groups (op, world, M x N x K drawn as the matrix draws them:
  validation.prepare.random_matrix.fused_shape, M a multiple of the world so that gemm-rs's
  "none" can run), each with every runnable variant of the op (inter-SM with 16 / world
  communication blocks per rank, staggered tiles, as the default suite's fewest) and its
  "none"; timed call by call in turn within the group (``interleave``), 20 calls after 3
  warm-ups, each from an idle GPU (``idle`` 4, as [fused.timing] of the default suite), so
  that the report can judge each group's pick (the predicted fastest) against its "none".

The system predicting them is the one calibrated on the GPU named (``system_for``:
h100-virtual-calibrated on an "NVIDIA H100 80GB HBM3", h200-virtual-calibrated on an "NVIDIA
H200"); on any other GPU h200-virtual-calibrated, and the report says the calibration is not
that GPU's own (docs/decisions/D81.md).
"""
from __future__ import annotations

import math
import random
from typing import Callable

from hwmodels.catalog import load_system
from hwmodels.system import System
from pksim_core.kernel_contract import world_reason
from validation.prepare import collectives as coll_prep
from validation.prepare.bundle import calibration_inputs
from validation.prepare.predict import predict_candidate, predict_case, predict_fused_case
from validation.runtime.reference import count_for_bytes, nccl_bytes
from validation.suites.comm_suite import LibraryVariant
from validation.suites.fused_kernels import BASELINE, VARIANTS, fused_case, none_case
from validation.suites.suite import Candidate

SYSTEMS = ("h100-virtual-calibrated", "h200-virtual-calibrated")
FALLBACK = "h200-virtual-calibrated"
TIMED_COLLECTIVES = 198           # 6 per kernel of the 33
TIMED_FUSED_GROUPS = 45           # 15 per op, 4 cases each
MIN_BYTES, MAX_BYTES = 4 << 10, 64 << 20
WORLDS = (2, 3, 4, 5, 6, 7, 8)
FUSED_IDLE = 4.0                  # as the default suite's [fused.timing] idle
COLL_ITERS, COLL_WARMUP = 100, 3
FUSED_ITERS, FUSED_WARMUP = 20, 3


def system_for(device: str | None) -> tuple[System, bool]:
    """(the system predicting the slice, whether it was calibrated on ``device``)."""
    for name in SYSTEMS:
        s = load_system(name)
        if device and (s.calibrated or {}).get("device") == device:
            return s, True
    return load_system(FALLBACK), False


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def collective_cases(rng: random.Random, system: System, libs: dict, n: int, seed: int,
                     first: int = 1) -> list[dict]:
    """``n`` timed collective cases (``libs``: Variant -> library path, as
    validation.prepare.random_matrix builds them)."""
    kernels = coll_prep.runnable()
    out, i, tries = [], 0, 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        op, alg, mech = kernels[i % len(kernels)]
        worlds = [w for w in WORLDS if world_reason(op, alg, mech, w) is None]
        w = rng.choice(worlds)
        dtype = ("bf16", "fp32")[len(out) % 2]
        count = count_for_bytes(op, w, _log_uniform(rng, MIN_BYTES, MAX_BYTES), dtype)
        if rng.random() < 0.5:
            count |= 1
        nbytes = nccl_bytes(op, w, count, dtype)
        blocks, _ = predict_case(system, op, alg, mech, w, nbytes, dtype)
        if blocks is None:          # the model cannot say at this world: draw again
            continue
        fields, why = predict_candidate(system, Candidate(op, alg, mech, w, nbytes, blocks, dtype))
        if why is not None:
            continue
        i += 1
        k = first + len(out)
        case = {"id": f"t{k:04d}-{op}-{alg}-{mech}-w{w}-{dtype}-n{count}",
                "lib": libs[LibraryVariant(op, alg, mech)], "op": op, "algorithm": alg,
                "mechanism": mech, "world": w, "dtype": dtype, "count": count, "bytes": nbytes,
                "blocks_per_rank": blocks, "check": True, "time": True, "iters": COLL_ITERS,
                "warmup": COLL_WARMUP, "seed": seed * 100000 + 90000 + k, "matrix_seed": seed,
                "deadline_s": 30}
        v = LibraryVariant(op, alg, mech)
        case["variant"] = [v.op, v.algorithm, v.mechanism, v.reduce_op, v.epilogue, v.peers]
        case.update(fields)
        out.append(case)
    return out


def _group_variants(op: str) -> list[tuple[str, str, str, str]]:
    return [v for v in VARIANTS if v[0] == op and v[3] != "multimem"]


def fused_cases(rng: random.Random, system: System, libs: dict[str, str], groups: int,
                seed: int, shape_of: Callable, prefix: str = "../fused/", first: int = 1
                ) -> list[dict]:
    """``groups`` timed groups of fused cases, each shape ``shape_of(rng, world)`` (world, M,
    N, K); library paths are ``prefix`` + the bundle's (the slice's cases live beside the
    matrix's fused bundle)."""
    rel = {k: prefix + v for k, v in libs.items()}
    ops = list(BASELINE)
    out, k = [], first
    for g in range(groups):
        op = ops[g % len(ops)]
        w = WORLDS[rng.randrange(len(WORLDS))]
        w, m, n, kk = shape_of(rng, w)
        m -= m % w                  # gemm-rs's "none" reduce-scatters equal shares
        shape = (w, m, n, kk)
        tag = f"{op} {m}x{n}x{kk} w{w}"
        members = []
        for v in _group_variants(op):
            comm, order = (max(1, 16 // w), 0) if v[1] == "inter-sm" else (0, -1)
            members.append(fused_case(rel, v, shape, comm, order, timed=True,
                                      seed=seed * 100000 + 95000 + k, iters=FUSED_ITERS,
                                      warmup=FUSED_WARMUP))
            k += 1
        members.append(none_case(rel, op, shape, timed=True, seed=seed * 100000 + 95000 + k,
                                 iters=FUSED_ITERS, warmup=FUSED_WARMUP))
        k += 1
        for c in members:
            c["id"] = f"t{g + 1:03d}-{c['id']}"
            c.update(idle=FUSED_IDLE, interleave=tag, matrix_seed=seed,
                     variant=[op, "none"] if c["kind"] == "none" else
                     [op, c["overlap"], c["algorithm"], c["mechanism"]])
            fields, why = predict_fused_case(system, c)
            c.update(fields)
            if why is not None:
                c["not_predicted"] = why
            out.append(c)
    return out


def draw(seed: int, device: str | None, coll_libs: dict, fused_libs: dict[str, str],
         shape_of: Callable, collectives: int = TIMED_COLLECTIVES,
         groups: int = TIMED_FUSED_GROUPS) -> tuple[list[dict], list[dict], dict]:
    """(collective cases, fused cases, what matrix.json records of the slice); the fused
    shapes from ``shape_of`` (validation.prepare.random_matrix.fused_shape)."""
    system, own = system_for(device)
    rng = random.Random(seed * 7919 + 38)
    colls = collective_cases(rng, system, coll_libs, collectives, seed)
    fused = fused_cases(rng, system, fused_libs, groups, seed, shape_of)
    info = {"system": system.name, "device": device, "own_calibration": own,
            "calibration": calibration_inputs(system), "collective_cases": len(colls),
            "fused_cases": len(fused), "fused_groups": groups,
            "timing": {"collectives": f"{COLL_ITERS} calls in two halves after {COLL_WARMUP} "
                       "warm-ups, each after a 256 MiB L2 flush, CUDA events (the default suite's)",
                       "fused": f"{FUSED_ITERS} calls after {FUSED_WARMUP} warm-ups, a group's "
                       f"candidates in turn, each after the flush from an idle GPU (idle "
                       f"{FUSED_IDLE:g}), CUDA events, median"}}
    return colls, fused, info
