"""The random-shape correctness matrix: every runnable generated kernel at shapes drawn with a
recorded seed, each checked against torch on the GPU (issue #38).

    python -m validation.prepare.random_matrix --out BUNDLE [--seed S] [--cases N] [--fast]

Kernels: every collective x algorithm x mechanism of the correctness matrix
(validation.prepare.collectives.runnable), the rooted, split-size, send/recv and reduce-op /
epilogue variants of the comm suite, the streamed in-network kernels in their emulated form
(peer loads and stores in place of multimem: multimem itself is compile-only here), every fused
op x overlap x mechanism and each fused op's unfused baseline ("none").

Shapes, drawn by ``random.Random(seed)`` (``draw``): worlds 2 to 8, each of them about equally
often (rhd: 2, 4 and 8, the powers of two its pairing needs); collectives in bf16 and fp32, element counts log-uniform from 1 element to 64 MiB, odd
in half the draws, uneven split sizes with an empty share for the -v ops, a random root, blocks
per rank the kernel's default or a random share of the SMs; fused ops M x N x K from 1 to 16384
with an odd number of rows on the ranks (floor(M / world) odd), N and K multiples of 8 (the TMA
row-pitch requirement, kernels/fused/abi.h) and never of 64 (so never of a tile), the product
capped (``FLOP_CAP``) so that the fp32 reference stays a few tens of milliseconds, a random
number of communication blocks and tile order. The emulated in-network kernels keep what they
require (whole 16-byte vectors per rank: validation.prepare.collectives.emulated_cases).

BUNDLE gets ``coll/`` (libraries and ``cases.json`` for validation/run/collectives.py) and
``fused/`` (the same for validation/run/fused.py, and memcheck_libs.txt: every runnable fused
library, for the memcheck slice), and ``matrix.json`` (seed, counts, and the
kernels' requirements the draws keep). ``validation/device/random_matrix.sh`` prepares, runs
and reports in one device call; ``python -m validation.report.random_matrix`` lists every
failure with its seed and shape.
"""
from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from pathlib import Path

from hwmodels.catalog import load_system
from pksim_core import algorithms
from validation.prepare import collectives as coll_prep
from validation.prepare import comm as comm_prep
from validation.prepare import fused as fused_prep
from validation.prepare import random_timed
from validation.runtime.reference import ELEM, count_for_bytes
from validation.suites.comm_suite import LibraryVariant, epilogue_fields, load_comm_suite, sizes_for
from validation.layout import MEMCHECK_LIBS
from validation.suites.fused_kernels import BASELINE, VARIANTS, fused_case, none_case, short

SYSTEM = "h200-virtual"
WORLDS = (2, 3, 4, 5, 6, 7, 8)
DIM_MAX = 16384
FLOP_CAP = 2 ** 39           # world x M x N x K of one fused case
MAX_BYTES = 64 << 20         # a collective's nccl-tests bytes, at most
DEFAULT_CASES = 2400
FAST_CASES = 240             # the slice of the default device session
ROOTED = ("broadcast", "reduce", "gather", "scatter")
REQUIREMENTS = {
    "fused": "N and K multiples of 8 (TMA needs 16-byte row pitches), M >= world "
             "(kernels/fused/abi.h); gemm-rs's unfused baseline needs M x N divisible by the world "
             "(its reduce-scatter's equal shares)",
    "in-network emulated": "whole 16-byte vectors per rank (multimem moves 16-byte vectors)",
    "rhd": "a power-of-two world (recursive halving / doubling pairs ranks by bit; "
           "pksim_core.algorithms power_of_two): worlds 2, 4 and 8",
}


def collective_variants() -> list[LibraryVariant]:
    """Every checked collective kernel, as comm-suite variants (sum, no epilogue, for the
    matrix's and the emulated kernels)."""
    out = [LibraryVariant(op, alg, mech) for op, alg, mech in coll_prep.runnable()]
    out += [LibraryVariant(op, alg, mech) for op, alg, mech in coll_prep.emulated_in_network()]
    out += list(load_comm_suite("comm").variants)
    return out


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _worlds(rng: random.Random, n: int, op: str = "", algorithm: str = "") -> list[int]:
    """``n`` worlds, each of WORLDS (the powers of two among them for an algorithm that needs
    one) about equally often, in a random order."""
    row = algorithms.find(op, algorithm)
    worlds = [w for w in WORLDS if not (row and row.power_of_two) or w & (w - 1) == 0]
    out = [worlds[i % len(worlds)] for i in range(n)]
    rng.shuffle(out)
    return out


def _dim(rng: random.Random) -> int:
    """N or K: a multiple of 8 (the TMA row pitch) that is never a multiple of 64."""
    d = max(8, _log_uniform(rng, 8, DIM_MAX) // 8 * 8)
    if d % 64 == 0:
        d = d + 8 if d + 8 <= DIM_MAX else d - 8
    return d


def _halve(d: int) -> int:
    """Half of an N or K, still a multiple of 8 and not of 64."""
    d = max(8, d // 2 // 8 * 8)
    return d + 8 if d % 64 == 0 else d


def fused_shape(rng: random.Random, world: int) -> tuple[int, int, int, int]:
    """(world, M, N, K): floor(M / world) odd, N and K off the tiles, world M N K <= FLOP_CAP."""
    n, k = _dim(rng), _dim(rng)
    q = _log_uniform(rng, 1, DIM_MAX // world) | 1
    if q * world > DIM_MAX:
        q -= 2
    m = q * world + rng.randrange(min(world, DIM_MAX - q * world + 1))
    while world * m * n * k > FLOP_CAP:
        if max(n, k) > 8:
            n, k = (_halve(n), k) if n >= k else (n, _halve(k))
        else:
            q = max(1, (q // 2) | 1)
            m = q * world
    return world, m, n, k


def collective_case(rng: random.Random, v: LibraryVariant, world: int, dtype: str, sms: int) -> dict:
    """One drawn collective case (no library path yet)."""
    nbytes = _log_uniform(rng, ELEM[dtype], MAX_BYTES)
    odd = rng.random() < 0.5
    case: dict = {"op": v.op, "algorithm": v.algorithm, "mechanism": v.mechanism, "world": world,
                  "dtype": dtype, "check": True}
    if v.mechanism == "multimem-emulated":
        count = count_for_bytes(v.op, world, nbytes, dtype)
        per = 16 // ELEM[dtype] * (world if v.op == "all-reduce" else 1)
        count = max(per, count - count % per)
        splits = None
    elif v.op in ("all-gather", "reduce-scatter", "all-to-all", "broadcast") or (
            v.op == "all-reduce" and v.reduce_op == "sum" and v.epilogue == "none"):
        count = count_for_bytes(v.op, world, nbytes, dtype)
        count = count | 1 if odd else count
        splits = None
    else:
        count, splits, _ = sizes_for(v, world, nbytes, dtype, rng, odd=odd)
    case["count"] = count
    if splits is not None:
        case["splits"] = splits
    if v.op in ROOTED:
        case["root"] = rng.randrange(world)
    if v.peers:
        case["peers"] = v.peers
    if v.mechanism != "copy-engine" and rng.random() < 0.5:
        case["blocks_per_rank"] = rng.randint(1, max(1, sms // world))
    case.update(epilogue_fields(v))
    return case


def _tag(c: dict) -> str:
    alg = coll_prep.SHORT.get(c["algorithm"], c["algorithm"])
    mech = coll_prep.SHORT.get(c["mechanism"], c["mechanism"])
    op = coll_prep.SHORT.get(c["op"], c["op"])
    extra = "".join(f"-{x}" for x in (c.get("reduce_op"), c.get("epilogue")) if x)
    return f"{op}-{alg}-{mech}{extra}-w{c['world']}-{c['dtype']}-n{c['count']}"


def draw(seed: int, cases: int = DEFAULT_CASES, sms: int = 132) -> tuple[list[dict], list[dict]]:
    """(collective cases, fused cases) of a matrix of about ``cases`` cases, drawn from
    ``seed``; each records its own ``seed`` (its inputs) and ``matrix_seed``. Collective cases
    are the runner's records less the library (their kernel in ``variant``: op, algorithm,
    mechanism, reduce_op, epilogue, peers); fused ones are specifications (``variant``: op,
    overlap, algorithm, mechanism, or op and "none"; ``shape``: world, M, N, K; comm_blocks,
    tile_order, seed) that ``fused_cases`` turns into the runner's records."""
    rng = random.Random(seed)
    cvars = collective_variants()
    fvars = [tuple(v) for v in VARIANTS if v[3] != "multimem"] + [(op, "none") for op in BASELINE]
    # fused cases cost more (a GEMM per rank and its fp32 reference): a third of the matrix
    per_f = max(1, cases // 3 // len(fvars))
    per_c = max(1, (cases - per_f * len(fvars)) // len(cvars))
    colls, fuseds = [], []
    n = 0
    for v in cvars:
        for i, w in enumerate(_worlds(rng, per_c, v.op, v.algorithm)):
            n += 1
            dtype = ("bf16", "fp32")[i % 2]
            c = collective_case(rng, v, w, dtype, sms)
            c.update(id=f"{n:05d}-{_tag(c)}", seed=seed * 100000 + n, matrix_seed=seed,
                     variant=[v.op, v.algorithm, v.mechanism, v.reduce_op, v.epilogue, v.peers])
            colls.append(c)
    for fv in fvars:
        for w in _worlds(rng, per_f):
            n += 1
            w, m, nn, k = fused_shape(rng, w)
            if fv == ("gemm-rs", "none"):
                m -= m % w     # its reduce-scatter takes equal shares: M x N divisible by the world
            comm, order = 0, -1
            if fv[1] != "none":
                order = rng.choice((-1, 0, 1))
                if fv[1] == "inter-sm":
                    comm = rng.randint(1, max(1, min(16, sms // w - 1)))
            fuseds.append({"n": n, "variant": list(fv), "shape": [w, m, nn, k], "comm_blocks": comm,
                           "tile_order": order, "seed": seed * 100000 + n, "matrix_seed": seed})
    return colls, fuseds


def summary(colls: list[dict], fuseds: list[dict], seed: int) -> dict:
    """What matrix.json records of a drawn matrix."""
    return {"seed": seed, "cases": len(colls) + len(fuseds), "collective_cases": len(colls),
            "fused_cases": len(fuseds), "kernels": len({tuple(c["variant"]) for c in colls})
            + len({tuple(c["variant"]) for c in fuseds}),
            "worlds": dict(sorted(Counter([c["world"] for c in colls] +
                                          [f["shape"][0] for f in fuseds]).items())),
            "dtypes": dict(sorted(Counter([c["dtype"] for c in colls] +
                                          ["bf16"] * len(fuseds)).items())),
            "requirements": REQUIREMENTS}


def _attach_collectives(colls: list[dict], libs: dict) -> list[dict]:
    out = []
    for c in colls:
        op, alg, mech, rop, epi, peers = c["variant"]
        out.append(dict(c, lib=libs[LibraryVariant(op, alg, mech, rop, epi, peers)]))
    return out


def fused_cases(specs: list[dict], libs: dict[str, str]) -> list[dict]:
    """The fused runner's records of drawn specifications (``draw``), with the bundle's
    libraries (validation.prepare.fused.build_bundle)."""
    out = []
    for sp in specs:
        v, shape = tuple(sp["variant"]), tuple(sp["shape"])
        if v[1] == "none":
            c = none_case(libs, v[0], shape, timed=False, seed=sp["seed"])
        else:
            c = fused_case(libs, v, shape, sp["comm_blocks"], sp["tile_order"], timed=False,
                           seed=sp["seed"])
        c.update(id=f"{sp['n']:05d}-{c['id']}", variant=sp["variant"], matrix_seed=sp["matrix_seed"])
        out.append(c)
    return out


def prepare(out: Path, seed: int, cases: int, build: bool = True,
            timed_device: str | None = None) -> dict:
    """Build every library into ``out`` and write the two case files and matrix.json
    (``build=False``: emit the sources only, the paths the libraries will have). With
    ``timed_device`` (the GPU's name, "" when unknown) also the timed slice
    (validation.prepare.random_timed): ``coll/timed.json`` and ``timed/cases.json``, predicted
    with that GPU's own calibration, and its record in matrix.json (``timed``)."""
    sms = load_system(SYSTEM).gpu.sm.count
    colls, fuseds = draw(seed, cases, sms)
    cdir, fdir = out / "coll", out / "fused"
    cdir.mkdir(parents=True, exist_ok=True)
    fdir.mkdir(parents=True, exist_ok=True)
    suite = load_comm_suite("comm")
    variants = collective_variants()
    plain = [(v.op, v.algorithm, v.mechanism) for v in variants if v not in suite.variants]
    libs = {LibraryVariant(*k): p for k, p in coll_prep.build_libs(cdir, SYSTEM, plain, build).items()}
    libs.update(comm_prep.build_libs(cdir, suite, SYSTEM, build))
    (cdir / "cases.json").write_text(json.dumps(_attach_collectives(colls, libs), indent=1))
    flibs = fused_prep.build_bundle(fdir, build)
    (fdir / "cases.json").write_text(json.dumps(fused_cases(fuseds, flibs), indent=1))
    (fdir / "libs.json").write_text(json.dumps(flibs, indent=1))
    runnable = [flibs[short(op, ov, mech)] for op, ov, _, mech in VARIANTS if mech != "multimem"]
    (fdir / MEMCHECK_LIBS).write_text("".join(f"{p}\n" for p in runnable))
    info = summary(colls, fuseds, seed)
    if timed_device is not None:
        tcolls, tfused, info["timed"] = random_timed.draw(seed, timed_device or None, libs, flibs,
                                                          fused_shape)
        (cdir / "timed.json").write_text(json.dumps(tcolls, indent=1))
        (out / "timed").mkdir(exist_ok=True)
        (out / "timed" / "cases.json").write_text(json.dumps(tfused, indent=1))
    (out / "matrix.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--cases", type=int, default=DEFAULT_CASES)
    ap.add_argument("--fast", action="store_true", help=f"the default session's slice ({FAST_CASES} cases)")
    ap.add_argument("--timed", metavar="DEVICE", help="also the timed slice, predicted with the "
                    "calibration of the GPU of this name (validation.prepare.random_timed)")
    ns = ap.parse_args(argv)
    info = prepare(ns.out, ns.seed, FAST_CASES if ns.fast else ns.cases, timed_device=ns.timed)
    print(f"random matrix seed {info['seed']}: {info['cases']} cases ({info['collective_cases']} "
          f"collective, {info['fused_cases']} fused) over {info['kernels']} kernels in {ns.out}")
    if "timed" in info:
        t = info["timed"]
        print(f"timed slice: {t['collective_cases']} collective + {t['fused_cases']} fused cases, "
              f"predicted on {t['system']} (own calibration of {t['device']!r}: "
              f"{t['own_calibration']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
