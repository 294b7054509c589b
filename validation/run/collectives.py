"""Build-free runner: check and time a list of generated collectives on the GPU, writing one
JSON line per case.

    python -m validation.run.collectives --cases CASES.json --out RESULTS.jsonl [--deadline-s S]
    torchrun --nproc_per_node=N -m validation.run.collectives --ipc --cases C.json --out R.jsonl

CASES.json is a list of objects; paths are relative to the file. A collective case:

    {"id": "ag-direct-tma-w8-1GiB-bf16", "lib": "lib/all-gather-....so", "op": "all-gather",
     "algorithm": "direct", "mechanism": "tma", "world": 8, "count": 67108864, "dtype": "bf16",
     "check": true, "time": false, "iters": 10, "warmup": 2, "seed": 1,
     "blocks_per_rank": 0, "device_sync": true, "root": 0, "predicted_s": 1.2e-3}

optional: "expect_error" (a substring: the run must fail with it, e.g. a device timeout
provoked with "seq": 1000 and a short "timeout_cycles"). The rooted, split-size and epilogue
kernels (validation/runtime/reference_comm.py) also take "splits" (pkc_args::splits, elements),
"reduce_op", "epilogue" (scale, bias, scale-bias), "alpha" and "bias_count" (a random bias of
that many elements). A copy-bandwidth case:
{"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1073741824, "iters": 10}.

Virtual ranks run in a worker process; this process restarts it after a crash or a hang
(each case has a wall-clock limit) and records the case that was running as failed, so one bad
kernel cannot take the whole matrix with it. Results already in RESULTS.jsonl are skipped
(resume). Timed cases get the bandwidth the collective must move (validation/runtime/reference.py
``min_traffic_bytes``) against the measured copy bandwidth of the same run. A timed case's
``median_s`` is the mean of the medians of two halves of its calls, each after its own warm-up,
re-timed while disturbed (validation/runtime/collectives.time_settled, ``timed``: the attempts).
``PKC_FRESH_POOL=1`` empties torch's allocator cache before every case (an experiment's knob).
Every case runs on a stream of its own (a torch stream, non-blocking, as the microbenchmarks
run), not on torch's default stream; ``PKC_STREAM=default`` runs them there (rows say which:
"stream"). On the default stream the suite's SM cases of 4 KiB - 1 MiB at world 4 and 8 took
0.10 us more (median of 324 cases; validation/experiments/run20.sh and
validation/data/h200-stream-2026-12-03-run20.jsonl.gz at commit 7cc519e).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from hwmodels.errors import ValidationError
from validation.measurement import Timing
from validation.run.supervisor import append_row, context_healthy, device_info, supervise
from validation.runtime import reference, reference_comm
from validation.runtime.collectives import (Collective, IpcRanks, Library, VirtualRanks,
                                            time_settled)
from validation.runtime.library import HangError, ensure_eager_loading, torch_module
from validation.runtime.memory import free_bytes, memory_skip
from validation.runtime.timer import CE_LEAD_CYCLES, flush_buffer, time_calls


def load_cases(path: Path) -> list[dict]:
    cases = json.loads(path.read_text())
    for c in cases:
        if "lib" in c:
            c["lib"] = str((path.parent / c["lib"]).resolve())
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise ValidationError(f"{path}: duplicate case ids")
    return cases


# ---- one case ---------------------------------------------------------------------------------

def copy_bandwidth(case: dict) -> dict:
    torch = torch_module()
    n = int(case["bytes"])
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = Timing.of(time_calls(lambda: dst.copy_(src), int(case.get("iters", 10)), 1,
                             flush=flush_buffer()), keep=True)
    ok = bool(torch.equal(src, dst))
    return {"ok": ok, **t.fields(), "copy_GBps": n / t.median_s / 1e9,
            "traffic_GBps": 2 * n / t.median_s / 1e9}


def run_case(case: dict, libs: dict[str, Library], ranks_cache: dict, copy_bw: dict) -> dict:
    torch = torch_module()
    out: dict[str, Any] = {"ok": False}
    if case.get("kind") == "copy_bw":
        out.update(copy_bandwidth(case))
        copy_bw["GBps"] = out["copy_GBps"]
        return out
    lib = libs.get(case["lib"]) or libs.setdefault(case["lib"], Library(case["lib"]))
    world = int(case["world"])
    ranks = ranks_cache.get(world) or ranks_cache.setdefault(world, VirtualRanks(world))
    coll = Collective(lib, ranks, int(case["count"]), case["dtype"], root=int(case.get("root", 0)),
                      blocks_per_rank=int(case.get("blocks_per_rank", 0)),
                      device_sync=bool(case.get("device_sync", True)),
                      timeout_cycles=int(case.get("timeout_cycles", 1 << 32)),
                      seq=int(case.get("seq", 0)), splits=case.get("splits"),
                      alpha=float(case.get("alpha", 1.0)), bias_count=int(case.get("bias_count", 0)))
    comm = case["op"] in reference_comm.OPS or "reduce_op" in case or "epilogue" in case
    out["blocks_per_rank"] = coll.reqs.blocks_per_rank
    if case.get("refused_unless_resident"):
        # Ring blocks wait on each other: the host must refuse a grid larger than what the
        # kernel keeps resident, and run any other grid.
        grid = world * coll.reqs.blocks_per_rank
        out["resident_blocks"] = coll.reqs.max_coresident_blocks
        if grid > coll.reqs.max_coresident_blocks:
            case = dict(case, expect_error="that can be resident at once")
    try:
        reference.fill_inputs(coll.inputs(), int(case.get("seed", 1)))
        if coll.bias is not None:
            reference.fill_inputs({-1: coll.bias}, int(case.get("seed", 1)) + 7)
        if case.get("expect_error"):
            try:
                coll.run(float(case.get("deadline_s", 30)))
                out.update(ok=False, error="expected a failure, the run succeeded")
            except HangError:
                raise
            except ValidationError as exc:
                out.update(ok=case["expect_error"] in str(exc), error=str(exc))
            return out
        coll.run(float(case.get("deadline_s", 30)))
        if case.get("check", True) and comm:
            ep = case.get("epilogue", "none")
            res = reference_comm.check(case["op"], case["dtype"], world, coll.count, coll.inputs(),
                                       coll.outputs(), coll.root, case.get("splits"),
                                       case.get("reduce_op", "sum"),
                                       coll.args.alpha if "scale" in ep else None,
                                       coll.bias if "bias" in ep else None)
        elif case.get("check", True):
            res = reference.check(case["op"], case["dtype"], world, coll.count, coll.inputs(),
                                  coll.outputs(), coll.root)
        if case.get("check", True):
            guards = coll.guards_intact()
            out.update(ok=res.ok and guards, max_err=res.max_err, bad=res.bad, guards_ok=guards,
                       detail=res.detail + ("" if guards else "; output guard bytes overwritten"))
        else:
            out["ok"] = True
        if case.get("time"):
            lead = CE_LEAD_CYCLES if case.get("mechanism") == "copy-engine" else 0
            times, attempts, med = time_settled(coll, int(case.get("iters", 10)),
                                                int(case.get("warmup", 2)), lead_cycles=lead)
            out["timed"] = attempts
            if case["op"] in reference_comm.OPS:
                traffic = reference_comm.traffic_bytes(case["op"], world, coll.count, case["dtype"],
                                                       case.get("splits"))
                nccl = reference_comm.nccl_bytes(case["op"], world, coll.count, case["dtype"])
            else:
                traffic = reference.min_traffic_bytes(case["op"], world, coll.count, case["dtype"])
                nccl = reference.nccl_bytes(case["op"], world, coll.count, case["dtype"])
            out.update(Timing.of(times, keep=True, median_s=med).fields(),
                       algbw_GBps=nccl / med / 1e9,
                       busbw_GBps=nccl / med / 1e9 * reference.busbw_factor(case["op"], world),
                       traffic_bytes=traffic, traffic_GBps=traffic / med / 1e9)
            if copy_bw.get("GBps"):
                out["copy_efficiency"] = traffic / med / (2 * copy_bw["GBps"] * 1e9)
            if case.get("predicted_s"):
                out["predicted_over_measured"] = case["predicted_s"] / med
    except HangError:
        raise
    except ValidationError as exc:
        out.update(ok=False, error=str(exc))
    finally:
        coll.free()
        del coll
        if case.get("count", 0) * reference.ELEM.get(case.get("dtype", "bf16"), 2) > (64 << 20):
            torch.cuda.empty_cache()
    return out


# ---- worker and parent --------------------------------------------------------------------------

def worker(cases: list[dict], out: Path) -> int:
    ensure_eager_loading()
    torch = torch_module()
    torch.cuda.init()
    info = device_info()
    libs: dict[str, Library] = {}
    ranks_cache: dict[int, VirtualRanks] = {}
    copy_bw: dict[str, float] = {}
    for line in (out.read_text().splitlines() if out.exists() else []):
        row = json.loads(line)
        if row.get("kind") == "copy_bw" and row.get("copy_GBps"):
            copy_bw["GBps"] = row["copy_GBps"]
    beat = Path(str(out) + ".current")
    fresh_pool = os.environ.get("PKC_FRESH_POOL") == "1"
    on_default = os.environ.get("PKC_STREAM") == "default"
    stream = torch.cuda.current_stream() if on_default else torch.cuda.Stream()
    info["stream"] = "default" if on_default else "own"
    for case in cases:
        beat.write_text(json.dumps({"id": case["id"], "t": time.time()}))
        if fresh_pool:   # every case from an empty allocator cache (validation/experiments/parity.py at commit 7cc519e)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        t0 = time.time()
        row = {k: v for k, v in case.items() if k != "lib"}
        row["lib"] = Path(case["lib"]).name if "lib" in case else None
        skip = memory_skip(case, lambda: free_bytes(torch))
        if skip is not None:          # rather than an out-of-memory failure
            row.update(skip, **info)
            append_row(out, row)
            continue
        try:
            with torch.cuda.stream(stream):
                row.update(run_case(case, libs, ranks_cache, copy_bw))
        except HangError as exc:
            row.update(ok=False, error=str(exc), wall_s=round(time.time() - t0, 3), **info)
            append_row(out, row)
            os._exit(3)
        except Exception as exc:  # one case's failure must not stop the matrix
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        row.update(wall_s=round(time.time() - t0, 3), **info)
        append_row(out, row)
        if not row.get("ok") and not context_healthy():
            os._exit(4)  # a sticky CUDA error: the parent starts a fresh worker
    beat.unlink(missing_ok=True)
    return 0


def parent(cases: list[dict], out: Path, cases_path: Path, case_timeout: float,
           deadline_s: float) -> int:
    return supervise([c["id"] for c in cases], out, lambda ids: [
        sys.executable, "-m", "validation.run.collectives", "--worker", "--cases",
        str(cases_path), "--out", str(out), "--ids", str(ids)], case_timeout, deadline_s)


def ipc_main(cases: list[dict], out: Path) -> int:
    """Real ranks (torchrun): every process runs every case; rank 0 writes the results."""
    ensure_eager_loading()
    torch = torch_module()
    ranks = IpcRanks()
    info = device_info()
    libs: dict[str, Library] = {}
    failures = 0
    for case in cases:
        lib = libs.get(case["lib"]) or libs.setdefault(case["lib"], Library(case["lib"]))
        row = {k: v for k, v in case.items() if k != "lib"}
        row.update(lib=Path(case["lib"]).name, world=ranks.world, mode="ipc", **info)
        t0 = time.time()
        try:
            coll = Collective(lib, ranks, int(case["count"]), case["dtype"],
                              root=int(case.get("root", 0)),
                              blocks_per_rank=int(case.get("blocks_per_rank", 0)),
                              device_sync=bool(case.get("device_sync", False)))
            mine = coll.inputs()
            reference.fill_inputs(mine, int(case.get("seed", 1)))
            coll.run(float(case.get("deadline_s", 30)))
            # every rank's inputs, regenerated here from the same seeds
            allin = {}
            for q in range(ranks.world):
                t = torch.empty_like(mine[ranks.rank])
                reference.fill_inputs({q: t}, int(case.get("seed", 1)))
                allin[q] = t
            res = reference.check(case["op"], case["dtype"], ranks.world, coll.count, allin,
                                  coll.outputs(), coll.root)
            row.update(ok=res.ok and coll.guards_intact(), max_err=res.max_err, bad=res.bad,
                       detail=res.detail)
            ranks.barrier()
            coll.free()
        except Exception as exc:
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        row["wall_s"] = round(time.time() - t0, 3)
        gathered: list[Any] = [None] * ranks.world
        ranks.dist.all_gather_object(gathered, row)
        if ranks.rank == 0:
            merged = dict(gathered[0])
            merged["ok"] = all(g.get("ok") for g in gathered)
            merged["per_rank"] = [{k: g.get(k) for k in ("ok", "max_err", "bad", "detail", "error")}
                                  for g in gathered]
            failures += not merged["ok"]
            append_row(out, merged)
    ranks.close()
    ranks.dist.destroy_process_group()
    return 0 if failures == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ipc", action="store_true", help="real ranks under torchrun")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--case-timeout", type=float, default=120.0)
    ap.add_argument("--deadline-s", type=float, default=3600.0)
    ns = ap.parse_args(argv)
    cases = load_cases(ns.cases)
    if ns.ipc:
        return ipc_main(cases, ns.out)
    if ns.worker:
        wanted = set(json.loads(ns.ids.read_text())) if ns.ids else None
        return worker([c for c in cases if wanted is None or c["id"] in wanted], ns.out)
    return parent(cases, ns.out, ns.cases, ns.case_timeout, ns.deadline_s)


if __name__ == "__main__":
    sys.exit(main())
