"""Check and time the Hopper GEMM (kernels/gemm) against torch.matmul.

    python3 -m validation.run.gemm [--so build/gemm/libpk_gemm.so] [--out results.jsonl]
                                     [--quick] [--skip-timing] [--iters 30] [--sustain S]
                                     [--sm-sweep] [--microbench-json OUT.json]
    python3 -m validation.run.gemm --from-jsonl RUN.jsonl [...] --microbench-json OUT.json

The library is loaded from --so when that file exists; otherwise it is built with nvcc
(through codegen.build, content-hash cached, the kernels/gemm sources folded into the key)
and, with --so given, copied there. Needs torch and an sm_90 GPU.

Correctness: C = A @ B for bf16 A (M x K) and B (K x N), both row-major as torch.matmul takes
them, random normal inputs, against an fp32 reference (the same bf16 inputs in fp32, TF32
off). The output is bf16 (relative rounding error <= 2^-9) of an fp32 sum, so an element
passes when |C - ref| <= 2^-7 |ref| + 1e-3 sqrt(K) (four times the rounding of the output,
plus room for summation order; a misplaced fragment gives errors of order sqrt(K)). C is
filled with NaN beforehand and followed by a guard region, so missed or stray writes fail.
torch.matmul's own bf16 error against the same reference is printed beside ours.

Timing: CUDA events around each call, L2 flushed before every timed call by writing a
256 MiB buffer (outside the timed interval), warm-up calls first, the median of --iters
calls; TFLOP/s = 2 M N K / time. torch.matmul and our configurations of a shape are timed in
turn, one call of each per round (docs/decisions/D80.md: timed one after the other, the same
GPU's 8192^3 ratio moved between 86 and 99 % from process to process). Every record is a
JSON line on stdout and in --out. Each
timing record carries the wall-clock interval of its calls (t0, t1: seconds since the epoch;
local: t0 as the machine's local time, the form nvidia-smi's timestamp column takes), so that
clock and power samples taken beside the run can be matched to it.

--sustain S then runs SUSTAIN_SHAPE for about S seconds back to back per implementation (no
flush between calls: the steady state a long run reaches under the power limit), torch.matmul
and every selected variant, and records the mean time per call and its wall-clock interval.

Host cost: HOST_SHAPE is called HOST_CALLS times back to back per implementation, the host's
wall time of the loop alone divided by the calls (the GPU's queue is long enough that no call
waits for it): what each call costs the CPU, the tensor-map encoding and the queries of the
library's host path included (records of kind "host", microseconds per call).

--sm-sweep times, instead of the usual shapes, SM_SWEEP_SHAPES on a persistent grid limited
to each of SM_SWEEP SMs (the first selected variant; the rest of the GPU idle), as a fused
kernel's GEMM runs beside its communication blocks. --microbench-json writes every such
series (the pk GEMM of one shape on fewer SMs, with its all-SM time) as a microbench.json
that ``pksim calibrate --from-json`` takes (bench "gemm", series "sms": the tensor stage
fits ``gpu.tensor.sustained_sm_exponent`` on it); with --from-jsonl it converts saved runs
and needs no GPU.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from datetime import date
from pathlib import Path

from codegen.build import BuildOptions, compile_source
from hwmodels.resources import kernels_dir
from validation.runtime.gemm import Runner, load_library, variant_names
from validation.runtime.library import torch_module
from validation.runtime.timer import FLUSH_BYTES, Request, time_calls, time_in_turn

SOURCE_NAME = "gemm_bf16.cu"                  # in kernels/gemm (hwmodels.resources)

CHECK_SHAPES = [(128, 256, 64), (64, 64, 8), (1, 8, 8), (129, 264, 72), (300, 520, 136),
                (1000, 1000, 1000), (4096, 4104, 520), (2048, 2048, 2048), (8192, 8192, 8192)]
QUICK_CHECK_SHAPES = [(128, 256, 64), (129, 264, 72), (1000, 1000, 1000), (4096, 4104, 520)]
TIME_SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
               (16384, 16384, 16384), (8192, 8192, 512), (8192, 8192, 1024),
               (8192, 8192, 2048), (16384, 16384, 512), (16384, 16384, 1024),
               (16384, 16384, 2048)]
QUICK_TIME_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
# The pk GEMM on fewer SMs: the shapes of the fused runs' GEMMs and a long square one.
SM_SWEEP_SHAPES = [(8192, 8192, 1024), (8192, 8192, 2048), (8192, 8192, 8192)]
SM_SWEEP = (64, 96, 100, 112, 116, 124, 132)
SUSTAIN_SHAPE = (8192, 8192, 8192)
HOST_SHAPE = (4096, 4096, 4096)     # about 0.18 ms of GPU work a call: the host runs ahead
HOST_CALLS = 40
RTOL = 2.0 ** -7
ATOL_PER_SQRT_K = 1e-3


def gemm_dir() -> Path:
    return kernels_dir() / "gemm"


def source() -> Path:
    return gemm_dir() / SOURCE_NAME


def sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(gemm_dir().glob("*")):
        if p.suffix in (".cu", ".cuh"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build_library(cache: Path | None = None) -> Path:
    """Build (or reuse) libgemm_bf16.so; raises hwmodels.errors.CompileError."""
    opts = BuildOptions(defines=(("PK_GEMM_SOURCES", sources_digest()),))
    return compile_source(source(), opts, cache)


RECORDS: list[dict] = []


def emit(rec: dict, out) -> None:
    RECORDS.append(rec)
    line = json.dumps(rec, sort_keys=True)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def check_one(run: Runner, torch, M, N, K, variant=0, sms=0, first_block=0, group_m=0, seed=0):
    """One correctness case; a failed call is recorded, not raised."""
    try:
        return _check_one(run, torch, M, N, K, variant, sms, first_block, group_m, seed)
    except Exception as exc:  # noqa: BLE001 - a CUDA failure is recorded, not raised
        return {"kind": "check", "M": M, "N": N, "K": K, "variant": variant, "sms": sms,
                "first_block": first_block, "group_m": group_m, "flags": run.flags,
                "ok": False, "error": str(exc)[:500]}


def _check_one(run: Runner, torch, M, N, K, variant, sms, first_block, group_m, seed):
    g = torch.Generator(device="cuda").manual_seed(seed + M * 7 + N * 13 + K)
    a = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
    guard = 4096
    cbuf = torch.full((M * N + guard,), float("nan"), device="cuda", dtype=torch.bfloat16)
    c = cbuf[: M * N].view(M, N)
    run.gemm(a, b, c, variant, sms, first_block, group_m)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    err = (c.float() - ref).abs()
    tol = RTOL * ref.abs() + ATOL_PER_SQRT_K * math.sqrt(K)
    bad = int((~(err <= tol)).sum().item())  # NaN counts as bad
    guard_ok = bool(torch.isnan(cbuf[M * N:]).all().item())
    t_err = (torch.matmul(a, b).float() - ref).abs()
    scale = math.sqrt(K)
    rec = {"kind": "check", "M": M, "N": N, "K": K, "variant": variant, "sms": sms,
           "first_block": first_block, "group_m": group_m, "flags": run.flags,
           "bad_elements": bad, "guard_intact": guard_ok,
           "max_abs_err": float(torch.nan_to_num(err, nan=float("inf")).max().item()),
           "max_abs_err_over_sqrtK": float(torch.nan_to_num(err, nan=float("inf")).max().item()) / scale,
           "torch_max_abs_err": float(t_err.max().item()),
           "mean_abs_err": float(torch.nan_to_num(err, nan=float("inf")).mean().item()),
           "torch_mean_abs_err": float(t_err.mean().item())}
    rec["ok"] = bad == 0 and guard_ok
    del a, b, cbuf, ref, err, t_err
    return rec


def check_arguments(lib) -> list[dict]:
    """Bad arguments come back as their status code, without touching the GPU."""
    fake = 1 << 20  # never dereferenced: the checks come before any CUDA call
    cases = [("K not a multiple of 8", (fake, fake, fake, 64, 64, 60), -3),
             ("N not a multiple of 8", (fake, fake, fake, 64, 60, 64), -4),
             ("null A", (None, fake, fake, 64, 64, 64), -1),
             ("M = 0", (fake, fake, fake, 0, 64, 64), -2),
             ("misaligned C", (fake, fake, fake + 2, 64, 64, 64), -5)]
    out = []
    for what, args, want in cases:
        rc = lib.pk_gemm_bf16(*args, 0, None)
        out.append({"kind": "arg_check", "case": what, "status": rc, "expected": want,
                    "message": lib.pk_gemm_strerror(rc).decode(), "ok": rc == want})
    rc = lib.pk_gemm_bf16_ex(fake, fake, fake, 64, 64, 64, 99, 0, 0, 0, 0, None)
    out.append({"kind": "arg_check", "case": "unknown variant", "status": rc, "expected": -7,
                "message": lib.pk_gemm_strerror(rc).decode(), "ok": rc == -7})
    return out


def time_op(torch, fn, flush, iters: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``iters`` calls, each after the flush (the GEMM's records keep
    milliseconds: ``ms``; validation/runtime/timer.py times in seconds)."""
    return [t * 1e3 for t in time_calls(fn, iters, warmup, flush=flush)]


def wall(t0: float, t1: float) -> dict:
    """The wall-clock interval of a record's calls (see the module's docstring)."""
    return {"t0": round(t0, 3), "t1": round(t1, 3),
            "local": time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t0))}


def operands(torch, M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    return a, b, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)


def time_shape(run: Runner, torch, M, N, K, variants, flush, iters, extra=()) -> list[dict]:
    """torch.matmul and every configuration timed in turn (time_in_turn: the warm-up calls of
    each, then round after round one flushed call of each), so that a drift of the clocks
    over the shape's calls reaches all of them alike; per configuration the median of its
    calls (ratio_to_torch: torch's median over its median) and the median over the rounds of
    torch's call over its call of the same round (paired_ratio_to_torch)."""
    a, b, c = operands(torch, M, N, K)
    ct = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * M * N * K
    base = {"kind": "time", "M": M, "N": N, "K": K, "iters": iters}
    recs, timed = [], []
    for v, sms, group_m in [(v, 0, 0) for v in variants] + list(extra):
        rec = {**base, "impl": "pk_gemm", "variant": v, "sms": sms, "group_m": group_m}
        fn = (lambda v=v, sms=sms, group_m=group_m: run.gemm(a, b, c, v, sms, 0, group_m))
        try:                              # a configuration that fails is recorded, not timed
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a CUDA failure is recorded, not raised
            recs.append({**rec, "error": str(exc)[:500]})
            continue
        timed.append((rec, fn))
    t0 = time.time()
    calls = [lambda: torch.matmul(a, b, out=ct)] + [fn for _, fn in timed]
    ms_all = [[t * 1e3 for t in ts] for ts in
              time_in_turn([Request(fn, iters, 3) for fn in calls], flush=flush, torch=torch)]
    span = wall(t0, time.time())
    ms_t = statistics.median(ms_all[0])
    recs.insert(0, {**base, "impl": "torch.matmul", "ms": ms_t, "tflops": flops / ms_t / 1e9,
                    **span})
    for (rec, _), ms_v in zip(timed, ms_all[1:]):
        ms = statistics.median(ms_v)
        paired = statistics.median(t / v for t, v in zip(ms_all[0], ms_v))
        recs.append({**rec, "ms": ms, "tflops": flops / ms / 1e9, "ratio_to_torch": ms_t / ms,
                     "paired_ratio_to_torch": paired, **span})
    del a, b, c, ct
    return recs


def sustain(run: Runner, torch, M, N, K, variants, seconds: float) -> list[dict]:
    """About ``seconds`` of back-to-back calls per implementation (torch.matmul first), one
    event pair around them all: the mean time per call once clocks have settled."""
    a, b, c = operands(torch, M, N, K)
    flops = 2.0 * M * N * K
    impls = [("torch.matmul", None, lambda: torch.matmul(a, b, out=c))] + \
        [("pk_gemm", v, (lambda v=v: run.gemm(a, b, c, v))) for v in variants]
    recs = []
    for impl, v, fn in impls:
        rec = {"kind": "sustain", "M": M, "N": N, "K": K, "impl": impl, "variant": v}
        try:
            per_call = statistics.median(time_op(torch, fn, None, 3))
            calls = max(10, int(seconds * 1e3 / per_call))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.time()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end) / calls
        except Exception as exc:  # noqa: BLE001 - a CUDA failure is recorded, not raised
            recs.append({**rec, "error": str(exc)[:500]})
            continue
        recs.append({**rec, "calls": calls, "ms": ms, "tflops": flops / ms / 1e9,
                     **wall(t0, time.time())})
    del a, b, c
    return recs


def host_cost(run: Runner, torch, M, N, K, variants) -> list[dict]:
    """Host microseconds per call of each implementation (see the module's docstring)."""
    a, b, c = operands(torch, M, N, K)
    impls = [("torch.matmul", None, lambda: torch.matmul(a, b, out=c))] + \
        [("pk_gemm", v, (lambda v=v: run.gemm(a, b, c, v))) for v in variants]
    recs = []
    for impl, v, fn in impls:
        rec = {"kind": "host", "M": M, "N": N, "K": K, "impl": impl, "variant": v,
               "calls": HOST_CALLS}
        try:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(HOST_CALLS):
                fn()
            dt = time.perf_counter() - t0
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a CUDA failure is recorded, not raised
            recs.append({**rec, "error": str(exc)[:500]})
            continue
        recs.append({**rec, "us_per_call": round(dt / HOST_CALLS * 1e6, 2)})
    del a, b, c
    return recs


def summary(records: list[dict]) -> str:
    """A short human-readable digest: failed checks and the timing table."""
    lines = []
    checks = [r for r in records if r["kind"] in ("check", "arg_check")]
    bad = [r for r in checks if not r.get("ok")]
    lines.append(f"checks: {len(checks) - len(bad)}/{len(checks)} passed")
    for r in bad[:20]:
        lines.append("  FAILED " + json.dumps({k: r.get(k) for k in (
            "case", "M", "N", "K", "variant", "sms", "first_block", "group_m", "flags",
            "bad_elements", "max_abs_err", "guard_intact", "error") if k in r}))
    shapes: dict = {}
    for r in records:
        if r["kind"] == "time":
            shapes.setdefault(f"{r['M']}x{r['N']}x{r['K']}", []).append(r)
    for r in records:
        if r["kind"] == "sustain":
            shapes.setdefault(f"sustained {r['M']}x{r['N']}x{r['K']}", []).append(r)
    host = [r for r in records if r["kind"] == "host" and "us_per_call" in r]
    if host:
        lines.append("host us per call: " + ", ".join(
            ("torch" if r["impl"] == "torch.matmul" else f"v{r['variant']}")
            + f" {r['us_per_call']:.1f}" for r in host))
    for key, rs in shapes.items():
        cells = []
        torch_ms = next((r["ms"] for r in rs if r["impl"] == "torch.matmul" and "ms" in r), None)
        for r in rs:
            if r["kind"] == "sustain":
                name = "torch" if r["impl"] == "torch.matmul" else f"v{r['variant']}"
                cells.append(f"{name} {r['tflops']:.0f}" if "tflops" in r else f"{name} error")
                if "tflops" in r and r["impl"] != "torch.matmul" and torch_ms:
                    cells[-1] += f" ({100 * torch_ms / r['ms']:.0f}%)"
            elif r["impl"] == "torch.matmul":
                cells.append(f"torch {r['tflops']:.0f}")
            elif "tflops" in r:
                tag = f"v{r['variant']}" + (f"/sms{r['sms']}" if r["sms"] else "") + \
                    (f"/g{r['group_m']}" if r["group_m"] else "")
                cells.append(f"{tag} {r['tflops']:.0f} ({100 * r['ratio_to_torch']:.0f}%)")
            else:
                cells.append(f"v{r['variant']} error")
        lines.append(f"{key}: " + ", ".join(cells))
    return "\n".join(lines)


def microbench(records: list[dict], sources: list[str]) -> dict:
    """The SM series of ``records`` (gemm_bench JSON lines, one or more runs) as a
    microbench.json: per run, every shape the default variant (0, 128x256x64s4: the fused
    kernels' GEMM and the model's tile) was timed on a limited grid, with its all-SM time
    of that shape and raster band. Records of a run whose correctness checks failed are
    marked failed (the fit skips them)."""
    out, env, ok, device = [], {}, False, {}
    runs: list[list[dict]] = []
    for rec in records:
        if rec["kind"] == "env":
            env = rec
            device = {"name": rec["device"], "sm_count": rec["sms"], "torch": rec["torch"],
                      "cuda_runtime": rec["cuda"], "sources": ["gemm_bench"]}
            runs.append([])
        elif rec["kind"] == "check_summary":
            ok = bool(rec["ok"])
        elif rec["kind"] == "time" and rec.get("impl") == "pk_gemm" and "ms" in rec and runs \
                and rec["variant"] == 0:
            runs[-1].append({**rec, "_sms": rec["sms"] or env["sms"], "_ok": ok,
                             "_date": env["date"]})
    for n, timed in enumerate(runs):
        limited = {(r["M"], r["N"], r["K"], r["variant"], r["group_m"]) for r in timed
                   if r["sms"]}
        for r in timed:
            if (r["M"], r["N"], r["K"], r["variant"], r["group_m"]) not in limited:
                continue
            out.append({"bench": "gemm", "params": {
                "series": "sms", "m": r["M"], "n": r["N"], "k": r["K"], "dtype": "bf16",
                "op": "pk_gemm", "variant": r.get("variant_name", r["variant"]),
                "group_m": r["group_m"], "sms": r["_sms"], "run": n},
                "flop": 2.0 * r["M"] * r["N"] * r["K"], "time_s": r["ms"] * 1e-3,
                "samples": r["iters"], "l2": "flushed", "tflops": r["tflops"],
                "check": "ok" if r["_ok"] else "failed", "program": "gemm_bench"})
    dates = sorted(r["_date"] for t in runs for r in t)
    return {"device": device, "date": dates[-1] if dates else "",
            "command": "validation/run/gemm.py (pk GEMM on limited grids), converted from "
                       + ", ".join(sources), "complete": True, "results": out}


def write_microbench(records: list[dict], sources: list[str], path: Path) -> int:
    doc = microbench(records, sources)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{path}: {len(doc['results'])} gemm records on limited grids", file=sys.stderr)
    return 0 if doc["results"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--so", type=Path, default=None, help="prebuilt library (built if missing)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON lines here too")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sustain", type=float, default=0.0, metavar="S",
                    help="then S seconds of back-to-back calls of SUSTAIN_SHAPE per implementation")
    ap.add_argument("--variants", type=str, default="all", help="comma-separated indices")
    ap.add_argument("--sm-sweep", action="store_true",
                    help="time SM_SWEEP_SHAPES on grids of SM_SWEEP SMs instead")
    ap.add_argument("--microbench-json", type=Path, default=None,
                    help="also write the limited-grid series as a microbench.json")
    ap.add_argument("--from-jsonl", type=Path, action="append", default=[],
                    help="convert saved runs (no GPU); needs --microbench-json")
    args = ap.parse_args(argv)
    if args.from_jsonl:
        if args.microbench_json is None:
            ap.error("--from-jsonl needs --microbench-json")
        records = [json.loads(line) for path in args.from_jsonl
                   for line in path.read_text().splitlines() if line.strip()]
        return write_microbench(records, [str(p) for p in args.from_jsonl],
                                args.microbench_json)

    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    t0 = time.time()
    so = args.so
    built = False
    if so is None or not so.is_file():
        lib_path = build_library()
        built = True
        if so is not None:
            so.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(lib_path, so)
        so = lib_path
    lib = load_library(so)
    out = open(args.out, "w") if args.out else None
    names = variant_names(lib)
    variants = list(range(len(names))) if args.variants == "all" else \
        [int(v) for v in args.variants.split(",")]

    for rec in check_arguments(lib):
        emit(rec, out)

    torch = torch_module()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    emit({"kind": "env", "date": date.today().isoformat(), "device": props.name,
          "sms": props.multi_processor_count, "torch": torch.__version__,
          "cuda": torch.version.cuda, "library": str(so), "built_here": built,
          "build_seconds": round(time.time() - t0, 1), "variants": names,
          "python": platform.python_version()}, out)
    run = Runner(lib, torch)

    # Correctness: first a small shape; if the N-major B descriptor is wrong the swapped
    # strides are tried once (diagnostic) and, if they pass, used for the rest of the run.
    first = check_one(run, torch, 128, 256, 64)
    emit(first, out)
    if not first["ok"]:
        run.flags = 1
        alt = check_one(run, torch, 128, 256, 64)
        alt["note"] = "retry with swapped B descriptor strides"
        emit(alt, out)
        if not alt["ok"]:
            run.flags = 0
    all_ok = True
    shapes = QUICK_CHECK_SHAPES if args.quick or args.sm_sweep else CHECK_SHAPES
    for v in variants:
        for (M, N, K) in shapes:
            rec = check_one(run, torch, M, N, K, variant=v)
            rec["variant_name"] = names[v]
            all_ok &= rec["ok"]
            emit(rec, out)
    # The persistent-grid parameters of the first selected variant: a small grid, offset
    # first blocks (multiples of 4: clustered variants need a multiple of their cluster size),
    # other raster bands, more blocks than SMs.
    for (sms, fb, gm) in [(7, 0, 0), (132, 4, 0), (16, 8, 1), (0, 0, 5), (300, 0, 0)]:
        rec = check_one(run, torch, 1000, 1000, 1000, variant=variants[0], sms=sms,
                        first_block=fb, group_m=gm)
        all_ok &= rec["ok"]
        emit(rec, out)
    emit({"kind": "check_summary", "ok": all_ok, "flags": run.flags}, out)

    if not args.skip_timing:
        flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        shapes = QUICK_TIME_SHAPES if args.quick else TIME_SHAPES
        if args.sm_sweep:
            shapes = SM_SWEEP_SHAPES
        for (M, N, K) in shapes:
            extra, timed = (), variants
            if args.sm_sweep:
                timed = variants[:1]
                extra = tuple((timed[0], n, 0) for n in SM_SWEEP
                              if n < props.multi_processor_count)
            elif (M, N, K) == (8192, 8192, 8192):
                # (variant, sms, group_m): other raster bands, and fewer SMs (room for
                # communication blocks beside the GEMM in a fused launch).
                # Clustered variants (a band counts cluster tiles, two tile rows each) also
                # with bands of 8 cluster tiles: the rows of the plain variants' 16.
                v0 = variants[0]
                extra = ((v0, 0, 8), (v0, 0, 32), (v0, 124, 0), (v0, 116, 0), (v0, 100, 0))
                extra += tuple((v, 0, 8) for v in variants[1:] if "c2" in names[v])
            iters = args.iters if M * N * K < 16384 ** 3 else max(10, args.iters // 2)
            for rec in time_shape(run, torch, M, N, K, timed, flush, iters, extra):
                if rec.get("variant") is not None:
                    rec["variant_name"] = names[rec["variant"]]
                emit(rec, out)
        for rec in host_cost(run, torch, *HOST_SHAPE, variants):
            if rec.get("variant") is not None:
                rec["variant_name"] = names[rec["variant"]]
            emit(rec, out)
        if args.sustain > 0:
            for rec in sustain(run, torch, *SUSTAIN_SHAPE, variants, args.sustain):
                if rec.get("variant") is not None:
                    rec["variant_name"] = names[rec["variant"]]
                emit(rec, out)
    emit({"kind": "done", "seconds": round(time.time() - t0, 1), "checks_ok": all_ok}, out)
    print(summary(RECORDS), file=sys.stderr)
    if out:
        out.close()
    if args.microbench_json is not None:
        write_microbench(RECORDS, [str(args.out or "this run")], args.microbench_json)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
