"""Check and time the fused GEMM + communication kernels (kernels/fused) on one GPU with virtual
ranks, against torch and against the unfused baseline (GEMM, then the collective).

    python -m validation.run.fused --bundle BUNDLE --out RESULTS.jsonl [--deadline-s S]

BUNDLE comes from ``pksim validate --prepare`` (its ``fused/``) or ``python -m
validation.prepare.fused BUNDLE`` (where nvcc and the simulator are); its tables:
``python -m validation.report.fused_run RESULTS.jsonl``. The GPU run needs only torch: a
worker process runs the cases, and this process restarts it after a crash or hang (each case
has a wall-clock limit, validation/run/supervisor.py), recording the case that was running as
failed. Results already in RESULTS.jsonl are skipped (resume). Before each case the worker
checks the GPU's free memory: a case it cannot hold is a row with skipped and memory_skip set
and the reason (validation.runtime.memory), not an out-of-memory failure.

Case kinds and their JSON lines (one per case; device, date, torch, cuda on every line):
  fused     op, overlap, algorithm, mechanism, world, m, n, k, gemm_blocks, comm_blocks
            (per rank), tile_order (-1 generated default, 0 staggered, 1 sequential);
            correctness: ok, bad, max_abs_err, max_err_over_tol, rel_err, atol, rtol, run_z,
            guards_ok, recheck_ok (the output once more after the timed calls); timing (validation/measurement.Timing,
            seconds): median_s, min_s, max_s over iters calls, each after a 256 MiB L2 flush,
            CUDA events, idle (where set: each call from an idle GPU,
            ``_interleaved_timings``), tflops (world x 2 m n k / median_s: all ranks' work on
            the one GPU), no_zeroing_s (store-add variants: the kernel alone, outputs not
            cleared first); predicted_s,
            predicted_baseline_s, predicted_system (the simulator's figures at prepare time)
  none      op, world, m, n, k, collective (algorithm/mechanism), coll_blocks; ok, bad,
            max_abs_err, rel_err; median_s (the pk GEMM of every rank, then the collective, back
            to back), gemm_s, collective_s, torch_gemm_s (torch.matmul of every rank),
            torch_none_s (torch.matmul of every rank, then the collective), iters
  arg_check lib, case, status, expected, message, ok (bad arguments are refused before CUDA)
  timeout   a call made to wait forever (seq 1000, short deadline): ok if it comes back as a
            device timeout naming the waiter
Timed cases that follow one another with the same ``interleave`` field (pksim validate sets it
per group of candidates) are set up and checked one by one, then timed call by call in turn
(warm-up calls of each, then each round one call of each, every call after the flush), so
that a group's candidates see the same clocks; their rows carry interleaved_with (how many
others). Their further timings (no_zeroing_s, the baseline's parts) are taken case by case.
Shapes: gemm-rs/gemm-ar rank r has A_r [m x k] and B_r [k x n]; ag-gemm A [m x k] is split
into world shards of rows floor(r m / world) .. floor((r + 1) m / world).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError
from validation.measurement import Timing
from validation.run.supervisor import append_row, context_healthy, device_info, supervise
from validation.runtime import gemm as gemm_lib
from validation.runtime.collectives import Collective, Library, VirtualRanks
from validation.runtime.fused import ABI_VERSION, FusedCall, FusedLib, PkfArgs
from validation.runtime.library import as_pointer, host_array
from validation.runtime.library import HangError, ensure_eager_loading, torch_module
from validation.runtime.memory import free_bytes, memory_skip
from validation.runtime.timer import FLUSH_BYTES, IDLE_LEAD_CYCLES, Request, time_in_turn


# ---- one case on the GPU ------------------------------------------------------------------------

def _timing(torch, fn, iters: int, warmup: int, idle: float = 0.0) -> Timing:
    return _interleaved_timings(torch, [(fn, iters, warmup)], idle)[0]


def _drive(steps, reply: dict | None = None, idle: float = 0.0) -> dict:
    """Run a case's steps on from ``reply`` (None: from their start), each timing they ask
    for taken at once (``_timing``, ``idle`` as there); the fields they return."""
    torch = torch_module()
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
    torch = torch_module()
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
            out.update(t.fields(), tflops=w * 2.0 * m * n * k / t.median_s / 1e12)
            if case["op"] != "ag-gemm" and call.reqs.spins == 0:
                # store-add: the kernel alone, without clearing outputs
                call.args.zero_output = 0
                out["no_zeroing_s"] = _timing(torch, call.launch, int(case["iters"]), 1,
                                              case_idle(case)).median_s
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
    lib = libs.get(case["lib"]) or libs.setdefault(case["lib"], FusedLib(case["lib"]))
    results = bad_argument_statuses(lib, PkfArgs, ABI_VERSION)
    return {"ok": all(r["ok"] for r in results), "results": results}


def bad_argument_statuses(lib, PkfArgs, abi: int) -> list[dict]:
    """(case, status, message) for calls every check must refuse; pointers are never read."""
    fake = 1 << 20
    keep = []     # the host arrays the arguments point at

    def arrays(a, world, **over):
        for name in ("a", "b", "out", "partial", "gathered", "flags"):
            vals = list(over.get(name, [fake] * world))
            keep.append(host_array(vals))
            setattr(a, name, as_pointer(keep[-1]))

    def args(arrays_over=None, **kw):
        a = PkfArgs()
        a.abi_version, a.world, a.M, a.N, a.K = abi, 4, 1000, 1024, 512
        a.num_flags, a.err = 1 << 20, fake
        a.table, a.table_bytes = fake, 1 << 30
        for key, v in kw.items():
            setattr(a, key, v)
        arrays(a, max(a.world, 1), **(arrays_over or {}))
        return a

    cases = [("world 1", args(world=1), "world 1"), ("world 577", args(world=577), "world 577"),
             ("K % 8", args(K=60), "K = 60"), ("N % 8", args(N=1001), "N = 1001"),
             ("M < world", args(M=3), "below the world"),
             ("ABI version", args(abi_version=99), "ABI version 99"),
             ("tile order", args(tile_order=5), "tile_order 5"),
             ("one_rank 2", args(one_rank=2), "one_rank 2"),
             ("rank past the world", args(one_rank=1, rank=4), "rank 4 is outside 0..3")]
    cases.append(("null B on rank 2", args({"b": [fake, fake, None, fake]}), "rank 2: b is NULL"))
    cases.append(("misaligned out", args({"out": [fake, fake + 2, fake, fake]}),
                  "rank 1: out is not 16-byte aligned"))
    cases.append(("no device table", args(table=None, table_bytes=0), "device table"))
    rows = []
    for what, a, want in cases:
        status, msg = lib.status_of(a)
        rows.append({"case": what, "status": status, "message": msg,
                     "ok": status == 1 and want in msg})
    return rows


def none_case_steps(case: dict, libs: dict, ranks_cache: dict):
    """The "none" baseline as a generator, as ``fused_case_steps``: its main timing is
    the GEMMs and the collective back to back."""
    torch = torch_module()
    torch.backends.cuda.matmul.allow_tf32 = False
    op = case["op"]
    w, m, n, k = (int(case[x]) for x in ("world", "m", "n", "k"))
    gl = libs.get(case["gemm_lib"]) or libs.setdefault(case["gemm_lib"],
                                                       gemm_lib.load_library(case["gemm_lib"]))
    gemm = gemm_lib.Runner(gl, torch)
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
            out.update(t.fields(), tflops=w * 2.0 * m * n * k / t.median_s / 1e12)
            out["gemm_s"] = _timing(torch, gemms, iters, warm, idle).median_s
            out["torch_gemm_s"] = _timing(torch, tgemms, iters, warm, idle).median_s
            out["collective_s"] = _timing(torch, coll.launch, iters, warm, idle).median_s
            coll.wait(60)
            out["torch_none_s"] = _timing(torch, tboth, iters, warm, idle).median_s
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
    ensure_eager_loading()
    torch = torch_module()
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
        append_row(out, row)
        status = "ok" if row.get("ok") else "SKIPPED" if row.get("skipped") else "FAILED"
        print(f"{case['id']}: {status}"
              + (f" {row['median_s'] * 1e3:.3f} ms" if "median_s" in row else "")
              + (f" ({row.get('error', '')[:200]})" if not row.get("ok") else ""),
              file=sys.stderr, flush=True)
        if not row.get("ok") and not row.get("skipped") and not context_healthy():
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
            skip = memory_skip(case, lambda: free_bytes(torch))
            if skip is not None:       # rather than an out-of-memory failure
                row.update(skip)
                finished(case, row)
                continue
            it = steps(case)
            try:
                runs.append([case, row, it, next(it), time.time() - t0])
            except StopIteration as done:
                row.update(done.value, wall_s=round(time.time() - t0, 3))
                finished(case, row)
            except HangError as exc:
                row.update(ok=False, error=str(exc), wall_s=round(time.time() - t0, 3), **info)
                append_row(out, row)
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
                append_row(out, row)
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
    then see the same clocks and temperature (validation/prepare/fused.py sets it per group)."""
    if case.get("time") and case.get("kind") in ("fused", "none"):
        return case.get("interleave")
    return None


def _no_steps(row: dict):
    """Steps that ask for no timing and return ``row``."""
    yield from ()
    return row


def _interleaved_timings(torch, requests: list, idle: float = 0.0) -> list[Timing]:
    """``_timing`` of several calls at once (validation/runtime/timer.time_in_turn): the
    warm-up calls of each, then round after round one timed call of each in turn (every one
    after the same 256 MiB flush of the L2, CUDA events around the call alone), up to each
    one's own number of calls.

    ``idle`` > 0 gives every timed call an idle GPU before it: the host waits until the
    previous call has ended, sleeps ``idle`` times that call's duration, and queues a spin
    of ``IDLE_LEAD_CYCLES`` (so that the flush and the call are queued before the GPU
    reaches them) ahead of the flush. Back to back (``idle`` = 0), calls of milliseconds
    keep the board at its power limit after some tens of them, and where the median falls
    between the calls before and after the limit took hold differs from GPU to GPU."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    times = time_in_turn([Request(*r) for r in requests], flush=flush, idle=idle, torch=torch)
    del flush
    return [Timing.of(t, idle) for t in times]


def parent(cases_path: Path, out: Path, case_timeout: float, deadline_s: float) -> int:
    return supervise([c["id"] for c in load_cases(cases_path)], out, lambda ids: [
        sys.executable, "-m", "validation.run.fused", "--worker", "--bundle",
        str(cases_path.parent), "--out", str(out), "--ids", str(ids)], case_timeout, deadline_s)


# ---- command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, help="a prepared bundle (cases.json, lib/)")
    ap.add_argument("--out", type=Path, help="results, one JSON line per case")
    ap.add_argument("--deadline-s", type=float, default=600.0, help="whole run")
    ap.add_argument("--case-timeout", type=float, default=60.0, help="one case, wall clock")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.bundle or not args.out:
        ap.error("--bundle and --out")
    cases_path = args.bundle / "cases.json"
    if args.worker:
        wanted = set(json.loads(args.ids.read_text())) if args.ids else None
        cases = [c for c in load_cases(cases_path) if wanted is None or c["id"] in wanted]
        return worker(cases, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    return parent(cases_path, args.out, args.case_timeout, args.deadline_s)


if __name__ == "__main__":
    sys.exit(main())
