"""Every pksim.torch op against a torch reference, N processes on the GPUs at hand (one GPU:
they share it), over random sizes (odd counts, uneven splits, random roots), bf16 and fp32:

    python -m pksim.torch.selftest --worlds 2,4,8 --cases 3 --out RESULTS.jsonl

Each world runs in ``world`` processes started with torch.multiprocessing (spawn) on a gloo
group. A case is drawn from a generator seeded by (seed, world, case), the same on every rank;
rank r's input comes from a generator seeded by (case seed, r), so every rank can make every
other rank's input and compute the reference itself (float64 on the CPU), without a torch
collective. Copies must be bit-exact; reductions within world x u x sum_r |x_r| + 1e-6 (u the
unit roundoff of the type: every addition may round); fused GEMMs within 2^-7 |ref| +
world sqrt(K) / 64 + 8 sigma of a bf16 running sum (docs/decisions/D62.md). Before the processes
start, the kernels the cases will choose are built in parallel (``kernels.prebuild``). One JSON
line per (world, case, op, dtype): sizes, the schedule used, ok, max error, elements out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from pksim.torch.choice import choose, choose_fused, system_for_device, system_named
from pksim.torch.comm import Communicator
from pksim.torch.kernels import prebuild
from validation.runtime.fused import RUN_Z, row_lo, running_sum_sigma
from validation.runtime.library import ensure_eager_loading

DTYPES = ("bf16", "fp32")
UNIT = {"bf16": 2.0 ** -8, "fp32": 2.0 ** -24}
COLLECTIVES = ("all_reduce", "all_reduce_max", "all_reduce_avg", "all_gather", "reduce_scatter",
               "all_to_all", "all_to_all_v", "broadcast", "reduce", "gather", "scatter",
               "send_recv", "all_reduce_int64", "all_gather_uint8")
FUSED = ("gemm_rs", "ag_gemm", "gemm_ar")
MODEL_OP = {"all_reduce": "all-reduce", "all_reduce_max": "all-reduce", "all_reduce_avg": "all-reduce",
            "all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all",
            "all_to_all_v": "all-to-all-v", "broadcast": "broadcast", "reduce": "reduce",
            "gather": "gather", "scatter": "scatter", "send_recv": "send-recv"}


def draw(seed: int, world: int, case: int) -> dict[str, Any]:
    """One case's sizes, the same on every rank."""
    g = random.Random(f"{seed}/{world}/{case}")
    n = g.choice([1, 7, 129, 1001, 4097, 65537, 300001])
    rows = g.randint(1, 33)
    splits = [[g.randint(0, 40) for _ in range(world)] for _ in range(world)]
    shift = g.randint(1, world - 1) if world > 1 else 0
    return {"case": case, "n": n, "rows": rows, "cols": g.choice([1, 3, 64, 257]),
            "root": g.randrange(world), "splits": splits, "shift": shift,
            "ring_rows": [g.randint(0, 50) for _ in range(world)],
            "m": 128 * g.randint(1, 4) + world * g.randint(0, 3), "gn": 64 * g.randint(1, 6),
            "gk": 64 * g.randint(1, 6), "seed": g.randrange(1 << 30)}


def cases_for(seed: int, world: int, count: int) -> list[dict[str, Any]]:
    return [draw(seed, world, c) for c in range(count)]


def model_calls(case: dict, world: int) -> list[tuple[str, int, str, str]]:
    """(model op, bytes, dtype, reduce op) of the kernels a case's collectives choose."""
    out = []
    n, rows, cols = case["n"], case["rows"], case["cols"]
    for dt in DTYPES:
        e = 4 if dt == "fp32" else 2
        copy = "fp32" if (n * e) % 4 == 0 else "bf16"
        out += [("all-reduce", n * e, dt, "sum"), ("all-reduce", n * e, dt, "max"),
                ("all-reduce", n * e, dt, "avg"), ("reduce", n * e, dt, "sum"),
                ("all-gather", n * e * world, copy, "sum"), ("broadcast", n * e, copy, "sum"),
                ("gather", n * e * world, copy, "sum"), ("scatter", n * e * world, copy, "sum"),
                ("reduce-scatter", world * rows * cols * e, dt, "sum"),
                ("all-to-all", world * rows * cols * e, "fp32" if (rows * cols * e) % 4 == 0 else "bf16", "sum"),
                ("all-to-all-v", 4096, dt, "sum"), ("send-recv", 4096, "fp32", "sum")]
    return out


def _inputs(torch, case: dict, rank: int, shape, dtype):
    g = torch.Generator().manual_seed(case["seed"] * 1000 + rank)
    if dtype in (torch.int64, torch.uint8):
        return torch.randint(0, 200, shape, generator=g, dtype=torch.int64).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)


def _compare(torch, got, want, inputs: list | None, dt: str, world: int) -> tuple[bool, float, int]:
    """Copies: bit-exact; reductions: within the ranks' rounding (see the module)."""
    if got is None or tuple(got.shape) != tuple(want.shape):
        return False, math.inf, -1
    got = got.cpu()
    if inputs is None:
        same = torch.equal(got, want)
        return bool(same), 0.0 if same else math.inf, 0 if same else int((got != want).sum())
    mag = torch.stack([x.double().abs() for x in inputs]).sum(0)
    tol = world * UNIT[dt] * mag + 1e-6
    err = (got.double() - want.double()).abs()
    bad = int(((err > tol) | ~torch.isfinite(got.double())).sum())
    return bad == 0, float(err.max()) if err.numel() else 0.0, bad


def run_collectives(torch, comm, case: dict, world: int) -> list[dict]:
    rank, dev, rows_out = comm.rank, comm.device, []
    n, rows, cols, root = case["n"], case["rows"], case["cols"], case["root"]
    for dt in DTYPES:
        td = torch.bfloat16 if dt == "bf16" else torch.float32
        xs = [_inputs(torch, case, r, (n,), td) for r in range(world)]
        blocks = [_inputs(torch, case, r, (world * rows, cols), td) for r in range(world)]
        x, blk = xs[rank].to(dev), blocks[rank].to(dev)
        stack = torch.stack([v.double() for v in xs])
        bstack = torch.stack([v.double() for v in blocks])
        tests = {
            "all_reduce": (lambda: comm.all_reduce(x), stack.sum(0).to(td), xs),
            "all_reduce_max": (lambda: comm.all_reduce(x, "max"), stack.amax(0).to(td), xs),
            "all_reduce_avg": (lambda: comm.all_reduce(x, "avg"), (stack.sum(0) / world).to(td), xs),
            "all_gather": (lambda: comm.all_gather(x), torch.cat(xs), None),
            "reduce_scatter": (lambda: comm.reduce_scatter(blk),
                               bstack.sum(0)[rank * rows:(rank + 1) * rows].to(td),
                               [b[rank * rows:(rank + 1) * rows] for b in blocks]),
            "all_to_all": (lambda: comm.all_to_all(blk),
                           torch.cat([b[rank * rows:(rank + 1) * rows] for b in blocks]), None),
            "broadcast": (lambda: comm.broadcast(x, root), xs[root], None),
            "reduce": (lambda: comm.reduce(x, root), stack.sum(0).to(td) if rank == root else None,
                       xs),
            "gather": (lambda: comm.gather(x, root), torch.cat(xs) if rank == root else None, None),
            "scatter": (lambda: comm.scatter(blk if rank == root else blk[:rows], root),
                        blocks[root][rank * rows:(rank + 1) * rows], None),
        }
        sp = case["splits"]
        mine = _inputs(torch, case, 100 + rank, (sum(sp[rank]), cols), td)
        theirs = [_inputs(torch, case, 100 + q, (sum(sp[q]), cols), td) for q in range(world)]
        parts = [t[sum(sp[q][:rank]):sum(sp[q][:rank + 1])] for q, t in enumerate(theirs)]
        tests["all_to_all_v"] = (lambda: comm.all_to_all(mine.to(dev), sp[rank], None),
                                 torch.cat(parts), None)
        dst, src = (rank + case["shift"]) % world, (rank - case["shift"]) % world
        ring = _inputs(torch, case, 200 + rank, (case["ring_rows"][rank], cols), td)
        ring_src = _inputs(torch, case, 200 + src, (case["ring_rows"][src], cols), td)

        def shift():
            got = comm.send_recv({dst: ring.to(dev)} if ring.numel() else {})
            return got[src].view(td).view(-1, cols) if src in got else ring_src[:0]
        tests["send_recv"] = (shift, ring_src, None)
        for name, (fn, want, red) in tests.items():
            rows_out.append(_one(torch, comm, name, dt, fn, want, red, world, case))
    ints = [_inputs(torch, case, r, (n,), torch.int64) for r in range(world)]
    rows_out.append(_one(torch, comm, "all_reduce_int64", "int64",
                         lambda: comm.all_reduce(ints[rank].to(dev)), sum(ints), None, world, case))
    odd = [_inputs(torch, case, r, (n | 1,), torch.uint8) for r in range(world)]
    rows_out.append(_one(torch, comm, "all_gather_uint8", "uint8",
                         lambda: comm.all_gather(odd[rank].to(dev)), torch.cat(odd), None, world, case))
    return rows_out


def run_fused(torch, comm, case: dict, world: int) -> list[dict]:
    rank, dev, out = comm.rank, comm.device, []
    m, n, k = case["m"], case["gn"], case["gk"]
    bf = torch.bfloat16
    a_all = [_inputs(torch, case, 300 + r, (m, k), bf) for r in range(world)]
    b_all = [_inputs(torch, case, 400 + r, (k, n), bf) for r in range(world)]
    parts = [a.double() @ b.double() for a, b in zip(a_all, b_all)]
    total, sq = sum(parts), sum(p * p for p in parts)
    lo = [row_lo(r, m, world) for r in range(world + 1)]
    mine = slice(lo[rank], lo[rank + 1])
    tests = {
        "gemm_rs": (lambda: comm.gemm_rs(a_all[rank].to(dev), b_all[rank].to(dev)), total[mine], sq[mine], world),
        "gemm_ar": (lambda: comm.gemm_ar(a_all[rank].to(dev), b_all[rank].to(dev)), total, sq, world),
        "ag_gemm": (lambda: comm.ag_gemm(a_all[0][mine].to(dev), b_all[rank].to(dev)),
                    a_all[0].double() @ b_all[rank].double(), None, 1),
    }
    for name, (fn, want, sumsq, s) in tests.items():
        t0 = time.time()
        row = {"op": name, "dtype": "bf16", "world": world, "case": case["case"], "m": m, "n": n, "k": k}
        try:
            got = fn().cpu().double()
            tol = 2.0 ** -7 * want.abs() + s * math.sqrt(k) / 64
            if sumsq is not None:
                tol = tol + RUN_Z * running_sum_sigma(want, sumsq, world)
            err = (got - want).abs() if got.shape == want.shape else None
            bad = -1 if err is None else int(((err > tol) | ~torch.isfinite(got)).sum())
            row.update(ok=bad == 0, bad=bad, max_abs_err=float(err.max()) if err is not None else None)
        except Exception as exc:  # noqa: BLE001 - a failed op is a row, the run goes on
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:400])
        row.update(schedule=comm.calls[-1][1] if comm.calls else "", seconds=round(time.time() - t0, 3))
        out.append(row)
    return out


def _one(torch, comm, name, dt, fn, want, red, world, case) -> dict:
    t0 = time.time()
    row = {"op": name, "dtype": dt, "world": world, "case": case["case"], "n": case["n"],
           "rows": case["rows"], "cols": case["cols"], "root": case["root"]}
    before = len(comm.calls)
    try:
        got = fn()
        if want is None:
            ok, err, bad = got is None, 0.0, 0 if got is None else -1
        else:
            ok, err, bad = _compare(torch, got, want, red, dt, world)
        row.update(ok=ok, max_abs_err=err if math.isfinite(err) else None, bad=bad)
    except Exception as exc:  # noqa: BLE001 - a failed op is a row, the run goes on
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:400])
    row.update(schedule=comm.calls[-1][1] if len(comm.calls) > before else "local",
               seconds=round(time.time() - t0, 3))
    return row


def worker(rank: int, world: int, args: dict, port: int) -> None:
    ensure_eager_loading()
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    comm = Communicator(system=args["system"])
    # the fused kernels launched per rank too (each process its rank's blocks), as on separate GPUs
    per_rank = Communicator(system=args["system"], fused_per_rank=True) \
        if args.get("fused_per_rank") and not comm.fused_per_rank else None
    rows = []
    for case in cases_for(args["seed"], world, args["cases"]):
        rows += run_collectives(torch, comm, case, world)
        rows += run_fused(torch, comm, case, world)
        if per_rank is not None:
            rows += [{**r, "op": r["op"] + "_per_rank"} for r in run_fused(torch, per_rank, case, world)]
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, rows)
    if rank == 0:
        merged = []
        for i, row in enumerate(rows):
            per = [e[i] for e in everyone]
            merged.append({**row, "ok": all(p.get("ok") for p in per),
                           "failed_ranks": [r for r, p in enumerate(per) if not p.get("ok")],
                           "errors": sorted({p["error"] for p in per if "error" in p})[:2],
                           "max_abs_err": max((p.get("max_abs_err") or 0.0) for p in per)})
        with open(args["out"], "a") as fh:
            for row in merged:
                fh.write(json.dumps(row) + "\n")
        notes = {"world": world, "notes": comm.notes, "placement": comm.placement,
                 "system": comm.system.name, "host_sync": comm.host_sync}
        with open(args["out"] + ".notes.json", "a") as fh:
            fh.write(json.dumps(notes) + "\n")
    comm.close()
    if per_rank is not None:
        per_rank.close()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--cases", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--system", default=None, help="system name (default: from the GPU)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--fused-per-rank", action="store_true",
                    help="also launch the fused kernels one rank per process (pkf_args::one_rank)")
    ns = ap.parse_args(argv)
    ensure_eager_loading()
    import torch
    import torch.multiprocessing as mp
    worlds = [int(w) for w in ns.worlds.split(",")]
    system = ns.system or system_for_device(torch.cuda.get_device_name(0), max(worlds))
    kernels = []
    for w in worlds:
        for case in cases_for(ns.seed, w, ns.cases):
            kernels += [choose(system, op, nb, w, dt, rop).kernel for op, nb, dt, rop in model_calls(case, w)]
            kernels += [choose_fused(system, op, case["m"], case["gn"], case["gk"], w).kernel
                        for op in ("gemm-rs", "ag-gemm", "gemm-ar")]
    t0 = time.time()
    failed = prebuild(system_named(system), kernels)
    print(f"prebuilt {len(set(kernels))} kernels in {time.time() - t0:.0f} s; failed: {failed}", flush=True)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.unlink(missing_ok=True)
    for w in worlds:
        t0 = time.time()
        port = 29500 + random.randrange(2000)
        mp.spawn(worker, args=(w, {"seed": ns.seed, "cases": ns.cases, "system": system,
                                   "out": str(ns.out), "fused_per_rank": ns.fused_per_rank}, port),
                 nprocs=w, join=True)
        print(f"world {w}: {time.time() - t0:.0f} s", flush=True)
    rows = [json.loads(line) for line in ns.out.read_text().splitlines()]
    bad = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(bad)}/{len(rows)} ok", flush=True)
    for r in bad[:20]:
        print("FAILED", json.dumps(r), flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    sys.exit(main())
