"""Check and time the fused GEMM + communication kernels (kernels/fused) on one GPU with virtual
ranks, against torch and against the unfused baseline (GEMM, then the collective).

    python -m validation.run_fused --prepare BUNDLE [--suite full|quick] [--no-predict]
    python3 -m validation.run_fused --bundle BUNDLE --out RESULTS.jsonl [--deadline-s S]
    python -m validation.run_fused --report RESULTS.jsonl

--prepare (where nvcc and the simulator are) emits and builds one library per fused variant
(codegen.fused), the Hopper GEMM (kernels/gemm) and the baseline collectives (codegen), and
writes BUNDLE/cases.json with, per timed case, the prediction of the same schedule on
h200-virtual-calibrated. The GPU run needs only torch: a worker process runs the cases, and
this process restarts it after a crash or hang (each case has a wall-clock limit), recording
the case that was running as failed. Results already in RESULTS.jsonl are skipped (resume).

Case kinds and their JSON lines (one per case; device, date, torch, cuda on every line):
  fused     op, overlap, algorithm, mechanism, world, m, n, k, gemm_blocks, comm_blocks
            (per rank), tile_order (-1 generated default, 0 staggered, 1 sequential);
            correctness: ok, bad, max_abs_err, rel_err, atol, rtol, guards_ok, recheck_ok (the
            output once more after the timed calls); timing: ms, ms_min, ms_max (median, min,
            max over iters calls, each after a 256 MiB L2 flush, CUDA events), iters, idle
            (where set: each call from an idle GPU, ``_interleaved_timings``), tflops
            (world x 2 m n k / ms: all ranks' work on the one GPU), ms_no_zeroing (store-add
            variants: the kernel alone, outputs not cleared first); predicted_s,
            predicted_baseline_s, predicted_system (the simulator's figures at prepare time)
  none      op, world, m, n, k, collective (algorithm/mechanism), coll_blocks; ok, bad,
            max_abs_err, rel_err; ms (the pk GEMM of every rank, then the collective, back to
            back), ms_gemm, ms_collective, ms_torch_gemm (torch.matmul of every rank),
            ms_torch_none (torch.matmul of every rank, then the collective), iters
  arg_check lib, case, status, expected, message, ok (bad arguments are refused before CUDA)
  timeout   a call made to wait forever (seq 1000, short deadline): ok if it comes back as a
            device timeout naming the waiter
Timed cases that follow one another with the same ``interleave`` field (pksim validate sets it
per group of candidates) are set up and checked one by one, then timed call by call in turn
(warm-up calls of each, then each round one call of each, every call after the flush), so
that a group's candidates see the same clocks; their rows carry interleaved_with (how many
others). Their further timings (ms_no_zeroing, the baseline's parts) are taken case by case.
Shapes: gemm-rs/gemm-ar rank r has A_r [m x k] and B_r [k x n]; ag-gemm A [m x k] is split
into world shards of rows floor(r m / world) .. floor((r + 1) m / world).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError
from validation.run_collectives import _append
from validation.runtime import FLUSH_BYTES

# The GPU spin queued ahead of each timed call's flush when calls are timed from an idle GPU
# (``idle``): 2e6 cycles, about 1 ms at 1980 MHz, more than the host takes to queue the flush
# and a "none" call's w GEMMs and collective
IDLE_LEAD_CYCLES = 2_000_000
# run_fused's own timed cases are timed from an idle GPU, as the default validation suite's
# ([fused.timing] idle): 4 x the previous call's time before each call
DEFAULT_IDLE = 4.0

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "h200-virtual"                       # what the libraries are generated for
PREDICT_SYSTEM = "h200-virtual-calibrated"    # what the predictions are made on
# (op, overlap, algorithm, mechanism) of every runnable fused variant
VARIANTS = [("gemm-rs", "intra-sm", "direct", "tma"), ("gemm-rs", "inter-sm", "direct", "register"),
            ("ag-gemm", "inter-sm", "direct", "tma"), ("ag-gemm", "inter-sm", "direct", "register"),
            ("ag-gemm", "intra-sm", "direct", "tma"), ("gemm-ar", "intra-sm", "direct", "tma"),
            ("gemm-ar", "inter-sm", "two-shot", "register")]
# The "none" baseline's collective (the best measured on the H200, docs/VALIDATION.md)
BASELINE = {"gemm-rs": ("reduce-scatter", "direct", "register"),
            "ag-gemm": ("all-gather", "direct", "tma"),
            "gemm-ar": ("all-reduce", "two-shot", "register")}
# (world, m, n, k): ragged shapes (m not a multiple of the tile or of world x 128, odd world,
# ranks owning fewer rows than one 64-row sub-tile)
CHECK_SHAPES = [(2, 1000, 1000, 1000), (3, 1000, 1024, 264), (4, 3000, 2048, 1024),
                (8, 1000, 1024, 512), (8, 100, 264, 72), (8, 4096, 4096, 1024)]
TIME_SHAPES = [(2, 8192, 8192, 2048), (4, 8192, 8192, 2048), (8, 8192, 8192, 2048),
               (8, 8192, 8192, 1024), (4, 4096, 4096, 4096)]
QUICK_CHECK = [(2, 1000, 1000, 1000), (8, 1000, 1024, 512)]
QUICK_TIME = [(8, 8192, 8192, 2048)]
COMM_BLOCKS = {2: (8, 16), 3: (4,), 4: (4, 8), 8: (2, 4)}   # inter-SM, per rank


def short(op: str, overlap: str, mech: str) -> str:
    return f"{op}-{overlap}-{mech}"


# ---- prepare (nvcc + simulator) -----------------------------------------------------------------

def build_bundle(bundle: Path, build: bool = True) -> dict[str, str]:
    """Every library the cases use, as paths relative to the bundle. ``build=False`` only
    emits the sources and returns the paths the libraries will have (``lib<stem>.so``)."""
    from codegen import fused
    from codegen.build import compile_many
    from hwmodels.catalog import load_system
    from pksim.schedule import Schedule
    from validation import gemm_bench
    from validation.collective_cases import build_libs
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
        shutil.copy2(gemm_bench.SOURCE, bundle / "src" / "pk_gemm.cu")
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
    gemm = gemm_bench.build_library()
    shutil.copy2(gemm, bundle / "lib" / "libpk_gemm.so")
    shutil.copy2(gemm_bench.SOURCE, bundle / "src" / "pk_gemm.cu")  # fallback build: libpk_gemm.so
    libs["gemm"] = "lib/libpk_gemm.so"
    colls = sorted(set(BASELINE.values()) | {("all-reduce", "two-shot", "tma")})
    for key, path in build_libs(bundle, SYSTEM, colls).items():
        libs["/".join(key)] = path
    return libs


def predict(op: str, overlap: str, alg: str, mech: str, world: int, m: int, n: int, k: int,
            comm: int) -> dict:
    """The simulator's figures for this schedule (empty when it cannot say)."""
    try:
        from hwmodels.catalog import load_system
        from pksim.search import fused_space, search
        system = load_system(PREDICT_SYSTEM)
        cands = fused_space(system, op, {"m": m, "n": n, "k": k}, world, overlaps=(overlap,),
                            algorithms=(alg,), mechanisms=(mech,),
                            comm_sms=(comm,) if overlap == "inter-sm" else ())
        cands = [c for c in cands if c.chunk_bytes == 0]
        best = search(system, cands, top=1).ranked[0]
        return {"predicted_s": best.time_s, "predicted_baseline_s": best.baseline_s,
                "predicted_system": PREDICT_SYSTEM}
    except Exception as exc:  # noqa: BLE001 - a prediction is optional, the measurement is not
        return {"predicted_s": None, "predict_error": f"{type(exc).__name__}: {exc}"[:300]}


def fused_case(libs: dict[str, str], variant: tuple[str, str, str, str],
               shape: tuple[int, int, int, int], comm: int = 0, order: int = -1, *,
               timed: bool = True, seed: int = 1, iters: int = 20, warmup: int = 3) -> dict:
    """One fused case: variant (op, overlap, algorithm, mechanism), shape (world, m, n, k),
    comm blocks per rank (0: the generated default) and tile order (-1, 0 or 1)."""
    op, ov, alg, mech = variant
    w, m, n, k = shape
    name = short(op, ov, mech)
    extra = (f"-c{comm}" if comm else "") + ("-seq" if order == 1 else "")
    return {"id": f"{name}{extra}-w{w}-{m}x{n}x{k}", "kind": "fused", "lib": libs[name],
            "op": op, "overlap": ov, "algorithm": alg, "mechanism": mech, "world": w, "m": m,
            "n": n, "k": k, "comm_blocks": comm, "tile_order": order, "check": True,
            "time": timed, "seed": seed, "iters": iters, "warmup": warmup}


def none_case(libs: dict[str, str], op: str, shape: tuple[int, int, int, int], *,
              timed: bool = True, seed: int = 1, iters: int = 20, warmup: int = 3) -> dict:
    """The unfused baseline of ``op`` at shape (world, m, n, k): GEMMs, then the collective."""
    w, m, n, k = shape
    cop, calg, cmech = BASELINE[op]
    return {"id": f"{op}-none-w{w}-{m}x{n}x{k}", "kind": "none", "op": op, "world": w, "m": m,
            "n": n, "k": k, "gemm_lib": libs["gemm"],
            "coll_lib": libs["/".join((cop, calg, cmech))],
            "collective": f"{cop} {calg}/{cmech}", "check": True, "time": timed,
            "seed": seed, "iters": iters, "warmup": warmup}


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
                        case.update(predict(op, ov, alg, mech, w, m, n, k, comm or 1))
                    cases.append(case)
            for op in BASELINE:
                if op == "gemm-rs" and (m * n) % w:
                    continue
                seed += 1
                case = none_case(libs, op, (w, m, n, k), timed=timed, seed=seed)
                if timed:
                    case["idle"] = DEFAULT_IDLE
                if timed and with_predictions:
                    p = predict(op, "none", BASELINE_ALG[op], "register", w, m, n, k, 1)
                    case["predicted_s"] = p.get("predicted_s")
                    case["predicted_system"] = PREDICT_SYSTEM
                cases.append(case)
    return cases


BASELINE_ALG = {"gemm-rs": "direct", "ag-gemm": "direct", "gemm-ar": "two-shot"}


# ---- one case on the GPU ------------------------------------------------------------------------

def _timing(torch, fn, iters: int, warmup: int, idle: float = 0.0) -> dict:
    return _interleaved_timings(torch, [(fn, iters, warmup)], idle)[0]


def _drive(steps, reply: dict | None = None, idle: float = 0.0) -> dict:
    """Run a case's steps on from ``reply`` (None: from their start), each timing they ask
    for taken at once (``_timing``, ``idle`` as there); the fields they return."""
    import torch
    try:
        request = steps.send(reply)
        while True:
            fn, iters, warmup = request
            request = steps.send(_timing(torch, fn, iters, warmup, idle))
    except StopIteration as done:
        return done.value


def case_idle(case: dict) -> float:
    """The case's idle ratio (``idle``; 0, calls back to back, where it has none)."""
    return float(case.get("idle", 0.0))


def fused_case_steps(case: dict, libs: dict):
    """A fused case as a generator: it sets up, checks, and yields (call, iters, warmup)
    for its main timing, expects the timing dict back, then finishes (its own further
    timings, the check again, the clean-up) and returns its row's fields. The worker times
    a group's calls in turn (``_interleaved_timings``), then ``_drive``s each on."""
    import torch
    from validation.fused_runtime import FusedCall, FusedLib
    lib = libs.get(case["lib"]) or libs.setdefault(case["lib"], FusedLib(case["lib"]))
    w, m, n, k = (int(case[x]) for x in ("world", "m", "n", "k"))
    call = FusedCall(lib, w, m, n, k, comm_blocks=int(case.get("comm_blocks", 0)),
                     tile_order=int(case.get("tile_order", -1)), seed=int(case.get("seed", 1)),
                     timeout_cycles=int(case.get("timeout_cycles", 1 << 32)),
                     seq=int(case.get("seq", 0)))
    out: dict[str, Any] = {"ok": False, "gemm_blocks": call.reqs.gemm_blocks,
                           "comm_blocks": call.reqs.comm_blocks}
    try:
        if case["kind"] == "timeout":
            try:
                call.run(30)
                out["error"] = "expected a device timeout, the call succeeded"
            except ValidationError as exc:
                out.update(ok="timed out waiting" in str(exc), error=str(exc))
            return out
        call.run(30)
        if case.get("check", True):
            out.update(call.check())
        else:
            out["ok"] = True
        if case.get("time"):
            t = yield call.launch, int(case["iters"]), int(case["warmup"])
            call.wait(60)
            out.update(t, tflops=w * 2.0 * m * n * k / (t["ms"] * 1e-3) / 1e12)
            if case["op"] != "ag-gemm" and call.reqs.spins == 0:
                # store-add: the kernel alone, without clearing outputs
                call.args.zero_output = 0
                out["ms_no_zeroing"] = _timing(torch, call.launch, int(case["iters"]), 1,
                                               case_idle(case))["ms"]
                call.wait(60)
                call.args.zero_output = 1
            if case.get("check", True):
                call.run(30)
                again = call.check()
                out["recheck_ok"] = again["ok"]
                out["ok"] = out["ok"] and again["ok"]
    finally:
        call.free()
        del call
        torch.cuda.empty_cache()
    return out


def arg_check_case(case: dict, libs: dict) -> dict:
    """Bad arguments come back as PKC_BAD_ARGUMENT with a message, before any CUDA call."""
    from validation.fused_runtime import FusedLib, PkfArgs, ABI_VERSION
    lib = libs.get(case["lib"]) or libs.setdefault(case["lib"], FusedLib(case["lib"]))
    results = bad_argument_statuses(lib, PkfArgs, ABI_VERSION)
    return {"ok": all(r["ok"] for r in results), "results": results}


def bad_argument_statuses(lib, PkfArgs, abi: int) -> list[dict]:
    """(case, status, message) for calls every check must refuse; pointers are never read."""
    fake = 1 << 20

    def args(**kw):
        a = PkfArgs()
        a.abi_version, a.world, a.M, a.N, a.K = abi, 4, 1000, 1024, 512
        for r in range(8):
            a.a[r] = a.b[r] = a.out[r] = a.partial[r] = a.gathered[r] = a.flags[r] = fake
        a.num_flags, a.err = 1 << 20, fake
        for key, v in kw.items():
            setattr(a, key, v)
        return a

    cases = [("world 1", args(world=1), "world 1"), ("world 9", args(world=9), "world 9"),
             ("K % 8", args(K=60), "K = 60"), ("N % 8", args(N=1001), "N = 1001"),
             ("M < world", args(M=3), "below the world"),
             ("ABI version", args(abi_version=99), "ABI version 99"),
             ("tile order", args(tile_order=5), "tile_order 5")]
    null_b = args()
    null_b.b[2] = None
    cases.append(("null B on rank 2", null_b, "rank 2: b is NULL"))
    odd = args()
    odd.out[1] = fake + 2
    cases.append(("misaligned out", odd, "rank 1: out is not 16-byte aligned"))
    rows = []
    for what, a, want in cases:
        status, msg = lib.status_of(a)
        rows.append({"case": what, "status": status, "message": msg,
                     "ok": status == 1 and want in msg})
    return rows


def none_case_steps(case: dict, libs: dict, ranks_cache: dict):
    """The "none" baseline as a generator, as ``fused_case_steps``: its main timing is
    the GEMMs and the collective back to back."""
    import torch
    from validation import gemm_bench
    from validation.runtime import Collective, Library, VirtualRanks
    torch.backends.cuda.matmul.allow_tf32 = False
    op = case["op"]
    w, m, n, k = (int(case[x]) for x in ("world", "m", "n", "k"))
    gl = libs.get(case["gemm_lib"]) or libs.setdefault(case["gemm_lib"],
                                                       gemm_bench.load_library(case["gemm_lib"]))
    gemm = gemm_bench.Runner(gl, torch)
    cl = libs.get(case["coll_lib"]) or libs.setdefault(case["coll_lib"], Library(case["coll_lib"]))
    ranks = ranks_cache.get(w) or ranks_cache.setdefault(w, VirtualRanks(w))
    bpr = torch.cuda.get_device_properties(0).multi_processor_count // w
    g = torch.Generator(device="cuda").manual_seed(int(case.get("seed", 1)))
    bf = torch.bfloat16
    b = [torch.randn(k, n, device="cuda", dtype=bf, generator=g) for _ in range(w)]
    out: dict[str, Any] = {"ok": False, "coll_blocks": bpr}
    if op == "ag-gemm":
        pad = -(-m // w)  # equal shards of ceil(m / w) rows (the collective's layout)
        coll = Collective(cl, ranks, pad * k, "bf16", blocks_per_rank=bpr)
        a_full = torch.randn(m, k, device="cuda", dtype=bf, generator=g)
        for r, t in coll.inputs().items():
            t.zero_()
            rows = a_full[r * pad:min(m, (r + 1) * pad)]
            t[: rows.numel()].copy_(rows.reshape(-1))
        gathered = {r: t.view(w * pad, k)[:m] for r, t in coll.outputs().items()}
        c = [torch.empty(m, n, device="cuda", dtype=bf) for _ in range(w)]
        gemms = lambda: [gemm.gemm(gathered[r], b[r], c[r]) for r in range(w)]  # noqa: E731
        tgemms = lambda: [torch.matmul(gathered[r], b[r], out=c[r]) for r in range(w)]  # noqa: E731
        both = lambda: (coll.launch(), gemms())  # noqa: E731
        tboth = lambda: (coll.launch(), tgemms())  # noqa: E731
        env = {"c": c, "a_full": a_full}
    else:
        count = m * n // w if op == "gemm-rs" else m * n
        coll = Collective(cl, ranks, count, "bf16", blocks_per_rank=bpr)
        a = [torch.randn(m, k, device="cuda", dtype=bf, generator=g) for _ in range(w)]
        part = {r: t.view(m, n) for r, t in coll.inputs().items()}
        gemms = lambda: [gemm.gemm(a[r], b[r], part[r]) for r in range(w)]  # noqa: E731
        tgemms = lambda: [torch.matmul(a[r], b[r], out=part[r]) for r in range(w)]  # noqa: E731
        both = lambda: (gemms(), coll.launch())  # noqa: E731
        tboth = lambda: (tgemms(), coll.launch())  # noqa: E731
        env = {"a": a, "count": count}
    try:
        both()
        coll.wait(60)
        if case.get("check", True):
            out.update(_check_none(torch, op, w, k, coll, b, env))
        else:
            out["ok"] = True
        if case.get("time"):
            iters, warm, idle = int(case["iters"]), int(case["warmup"]), case_idle(case)
            t = yield both, iters, warm
            coll.wait(60)
            out.update(t, tflops=w * 2.0 * m * n * k / (t["ms"] * 1e-3) / 1e12)
            out["ms_gemm"] = _timing(torch, gemms, iters, warm, idle)["ms"]
            out["ms_torch_gemm"] = _timing(torch, tgemms, iters, warm, idle)["ms"]
            out["ms_collective"] = _timing(torch, coll.launch, iters, warm, idle)["ms"]
            coll.wait(60)
            out["ms_torch_none"] = _timing(torch, tboth, iters, warm, idle)["ms"]
            coll.wait(60)
    finally:
        coll.free()
        torch.cuda.empty_cache()
    return out


def _check_none(torch, op, w, k, coll, b, env) -> dict:
    s = 1 if op == "ag-gemm" else w
    atol = s * math.sqrt(k) / 64
    bad, max_err, num, den = 0, 0.0, 0.0, 0.0
    if op == "ag-gemm":
        pairs = [(env["c"][r], env["a_full"].float() @ b[r].float()) for r in range(w)]
    else:
        total = env["a"][0].float() @ b[0].float()
        for r in range(1, w):
            total.addmm_(env["a"][r].float(), b[r].float())
        flat = total.reshape(-1)
        outs = coll.outputs()
        cnt = env["count"]
        pairs = [(outs[r], flat[r * cnt:(r + 1) * cnt] if op == "gemm-rs" else flat)
                 for r in range(w)]
    for got, ref in pairs:
        err = (got.float().reshape(-1) - ref.reshape(-1)).abs()
        bad += int((~(err <= 2.0 ** -7 * ref.reshape(-1).abs() + atol)).sum().item())
        max_err = max(max_err, float(torch.nan_to_num(err, nan=float("inf")).max().item()))
        num += float(torch.nan_to_num(err, nan=1e30).pow(2).sum().item())
        den += float(ref.float().pow(2).sum().item())
    return {"ok": bad == 0, "bad": bad, "max_abs_err": max_err,
            "rel_err": math.sqrt(num / den) if den else float("inf"), "atol": atol}


# ---- worker and parent --------------------------------------------------------------------------

def load_cases(path: Path) -> list[dict]:
    cases = json.loads(path.read_text())
    for c in cases:
        for key in ("lib", "gemm_lib", "coll_lib"):
            if key in c:
                c[key] = str((path.parent / c[key]).resolve())
    return cases


def worker(cases: list[dict], out: Path) -> int:
    from validation.run_collectives import _context_healthy, device_info
    from validation.runtime import HangError, ensure_eager_loading
    ensure_eager_loading()
    import torch
    torch.cuda.init()
    info = device_info()
    libs: dict = {}
    ranks_cache: dict = {}
    beat = Path(str(out) + ".current")

    def steps(case: dict):
        if case["kind"] in ("fused", "timeout"):
            return fused_case_steps(case, libs)
        if case["kind"] == "none":
            return none_case_steps(case, libs, ranks_cache)
        return _no_steps(arg_check_case(case, libs))

    def finished(case: dict, row: dict) -> None:
        row.update(**info)
        _append(out, row)
        print(f"{case['id']}: {'ok' if row.get('ok') else 'FAILED'}"
              + (f" {row['ms']:.3f} ms" if "ms" in row else "")
              + (f" ({row.get('error', '')[:200]})" if not row.get("ok") else ""),
              file=sys.stderr, flush=True)
        if not row.get("ok") and not _context_healthy():
            os._exit(4)  # a sticky CUDA error: the parent starts a fresh worker

    i = 0
    while i < len(cases):
        group = [cases[i]]
        key = interleave_key(cases[i])
        while key and i + len(group) < len(cases) and \
                interleave_key(cases[i + len(group)]) == key:
            group.append(cases[i + len(group)])
        i += len(group)
        runs = []                          # (case, row, its steps, its timing request, t0)
        for case in group:                 # set up and check each, up to its timing
            beat.write_text(json.dumps({"id": case["id"], "t": time.time()}))
            t0 = time.time()
            row = {key_: (Path(v).name if key_.endswith("lib") else v)
                   for key_, v in case.items()}
            it = steps(case)
            try:
                runs.append([case, row, it, next(it), time.time() - t0])
            except StopIteration as done:
                row.update(done.value, wall_s=round(time.time() - t0, 3))
                finished(case, row)
            except HangError as exc:
                row.update(ok=False, error=str(exc), wall_s=round(time.time() - t0, 3), **info)
                _append(out, row)
                os._exit(3)
            except Exception as exc:  # one case's failure must not stop the others
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1000],
                           wall_s=round(time.time() - t0, 3))
                finished(case, row)
        if not runs:
            continue
        beat.write_text(json.dumps({"id": runs[0][0]["id"], "t": time.time()}))
        t0 = time.time()
        timings = _interleaved_timings(torch, [r[3] for r in runs], case_idle(runs[0][0]))
        shared = (time.time() - t0) / len(runs)
        for (case, row, it, _, spent), timing in zip(runs, timings):
            beat.write_text(json.dumps({"id": case["id"], "t": time.time()}))
            t0 = time.time()
            try:
                row.update(_drive(it, timing, case_idle(case)))   # its further timings: at once
            except HangError as exc:
                row.update(ok=False, error=str(exc), **info)
                _append(out, row)
                os._exit(3)
            except Exception as exc:
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1000])
            row.update(wall_s=round(spent + shared + time.time() - t0, 3))
            if len(runs) > 1:
                row["interleaved_with"] = len(runs) - 1
            finished(case, row)
    beat.unlink(missing_ok=True)
    return 0


def interleave_key(case: dict) -> str | None:
    """Timed cases with the same ``interleave`` field that follow one another in the list
    are timed call by call in turn (``_interleaved_timings``): the candidates of one group
    then see the same clocks and temperature (validation/validate.py sets it per group)."""
    if case.get("time") and case.get("kind") in ("fused", "none"):
        return case.get("interleave")
    return None


def _no_steps(row: dict):
    """Steps that ask for no timing and return ``row``."""
    yield from ()
    return row


def _interleaved_timings(torch, requests: list, idle: float = 0.0) -> list[dict]:
    """``_timing`` of several calls at once: the warm-up calls of each, then round after
    round one timed call of each in turn (every one after the same 256 MiB flush of the L2,
    CUDA events around the call alone), up to each one's own number of calls.

    ``idle`` > 0 gives every timed call an idle GPU before it: the host waits until the
    previous call has ended, sleeps ``idle`` times that call's duration, and queues a spin
    of ``IDLE_LEAD_CYCLES`` (so that the flush and the call are queued before the GPU
    reaches them) ahead of the flush. Back to back (``idle`` = 0), calls of milliseconds
    keep the board at its power limit after some tens of them, and where the median falls
    between the calls before and after the limit took hold differs from GPU to GPU."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def call(fn):                       # events around one call
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        return start, end

    last = [None] * len(requests)       # each one's latest call: the next one's idle gap
    for j, (fn, _, warmup) in enumerate(requests):
        for _ in range(warmup):
            last[j] = call(fn)
    torch.cuda.synchronize()
    events = [[] for _ in requests]
    for i in range(max(iters for _, iters, _ in requests)):
        for j, ((fn, iters, _), ev) in enumerate(zip(requests, events)):
            if i >= iters:
                continue
            if idle > 0:
                torch.cuda.synchronize()
                if last[j] is not None:
                    time.sleep(idle * last[j][0].elapsed_time(last[j][1]) * 1e-3)
                torch.cuda._sleep(IDLE_LEAD_CYCLES)
            flush.zero_()
            last[j] = call(fn)
            ev.append(last[j])
    torch.cuda.synchronize()
    del flush
    out = []
    for (_, iters, _), ev in zip(requests, events):
        ms = [s.elapsed_time(e) for s, e in ev]
        out.append({"ms": statistics.median(ms), "ms_min": min(ms), "ms_max": max(ms),
                    "iters": iters, **({"idle": idle} if idle > 0 else {})})
    return out


def parent(cases_path: Path, out: Path, case_timeout: float, deadline_s: float) -> int:
    from validation.run_collectives import supervise
    return supervise([c["id"] for c in load_cases(cases_path)], out, lambda ids: [
        sys.executable, "-m", "validation.run_fused", "--worker", "--bundle",
        str(cases_path.parent), "--out", str(out), "--ids", str(ids)], case_timeout, deadline_s)


# ---- report -------------------------------------------------------------------------------------

def summary(rows: list[dict]) -> str:
    """Markdown: passed / run per variant over every checked case (timed ones included)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("kind") == "fused":
            name = f"{r['op']} {r['overlap']}/{r['mechanism']}"
        elif r.get("kind") == "none":
            name = f"{r['op']} none ({r.get('collective')})"
        else:
            name = {"arg_check": "bad arguments refused", "timeout": "deadline path"}.get(
                r.get("kind"), str(r.get("kind")))
        groups.setdefault(name, []).append(r)
    lines = ["| variant | passed | worlds | largest rel. error | largest abs. error |",
             "|---|---|---|---|---|"]
    for name, rs in groups.items():
        worlds = sorted({r["world"] for r in rs if "world" in r})
        rel = [r["rel_err"] for r in rs if r.get("rel_err") is not None]
        err = [r["max_abs_err"] for r in rs if r.get("max_abs_err") is not None]
        lines.append(f"| {name} | {sum(bool(r.get('ok')) for r in rs)}/{len(rs)} | "
                     f"{', '.join(map(str, worlds)) or '-'} | "
                     f"{f'{max(rel):.2e}' if rel else '-'} | {f'{max(err):.3g}' if err else '-'} |")
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    """Markdown: the summary, correctness per case, then fused against none per timed shape."""
    lines = [summary(rows), "",
             "| variant | world | m x n x k | comm blocks | ok | bad | max abs err | rel err |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("kind") not in ("fused", "none") or r.get("time"):
            continue
        name = (f"{r['op']} {r['overlap']}/{r['mechanism']}" if r["kind"] == "fused"
                else f"{r['op']} none ({r.get('collective')})")
        lines.append(f"| {name} | {r['world']} | {r['m']}x{r['n']}x{r['k']} | "
                     f"{r.get('comm_blocks', '')} | {'yes' if r.get('ok') else 'NO'} | "
                     f"{r.get('bad', '-')} | {r.get('max_abs_err', float('nan')):.3g} | "
                     f"{r.get('rel_err', float('nan')):.2e} |")
    lines += ["", "| op | world | m x n x k | none: pk GEMM + collective | torch.matmul + "
              "collective | variant | fused | speed-up over none | tflops | ok |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    timed = [r for r in rows if r.get("time")]
    nones = {(r["op"], r["world"], r["m"], r["n"], r["k"]): r for r in timed
             if r.get("kind") == "none"}
    for r in timed:
        if r.get("kind") != "fused":
            continue
        key = (r["op"], r["world"], r["m"], r["n"], r["k"])
        base = nones.get(key, {})
        var = f"{r['overlap']}/{r['mechanism']}"
        if r["overlap"] == "inter-sm":
            var += f", {r.get('comm_blocks')} comm/rank" + (", seq" if r.get("tile_order") == 1 else "")
        ms = r.get("ms")
        sp = f"{base['ms'] / ms:.2f}x" if ms and base.get("ms") else "-"
        lines.append(f"| {r['op']} | {r['world']} | {r['m']}x{r['n']}x{r['k']} | "
                     f"{base.get('ms', float('nan')):.3f} ms | "
                     f"{base.get('ms_torch_none', float('nan')):.3f} ms | {var} | "
                     f"{ms if ms is None else f'{ms:.3f} ms'} | {sp} | "
                     f"{r.get('tflops', float('nan')):.0f} | {'yes' if r.get('ok') else 'NO'} |")
    return "\n".join(lines)


# ---- command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepare", type=Path, help="build the libraries and cases into this bundle")
    ap.add_argument("--suite", choices=("full", "quick"), default="full")
    ap.add_argument("--no-predict", action="store_true", help="prepare without predictions")
    ap.add_argument("--bundle", type=Path, help="a prepared bundle (cases.json, lib/)")
    ap.add_argument("--out", type=Path, help="results, one JSON line per case")
    ap.add_argument("--deadline-s", type=float, default=600.0, help="whole run")
    ap.add_argument("--case-timeout", type=float, default=60.0, help="one case, wall clock")
    ap.add_argument("--report", type=Path, help="print the markdown tables of a results file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report:
        print(report([json.loads(x) for x in args.report.read_text().splitlines() if x.strip()]))
        return 0
    if args.prepare:
        libs = build_bundle(args.prepare)
        cases = make_cases(libs, args.suite, not args.no_predict)
        (args.prepare / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
        (args.prepare / "libs.json").write_text(json.dumps(libs, indent=1) + "\n")
        print(f"{len(cases)} cases, {len(libs)} libraries in {args.prepare}", file=sys.stderr)
        return 0
    if not args.bundle or not args.out:
        ap.error("--bundle and --out (or --prepare, or --report)")
    cases_path = args.bundle / "cases.json"
    if args.worker:
        wanted = set(json.loads(args.ids.read_text())) if args.ids else None
        cases = [c for c in load_cases(cases_path) if wanted is None or c["id"] in wanted]
        return worker(cases, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    return parent(cases_path, args.out, args.case_timeout, args.deadline_s)


if __name__ == "__main__":
    sys.exit(main())
