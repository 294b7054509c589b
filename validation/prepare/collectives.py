"""Prepare a run of the generated collectives: emit and build one library per (op, algorithm,
mechanism), predict each timed case on the modelled system, and write the cases file that
``validation/run/collectives.py`` runs on the GPU (which needs neither nvcc nor the simulator).

    python -m validation.prepare.collectives --out BUNDLE [--matrix full|quick] [--system h200-virtual]

BUNDLE gets ``lib/*.so``, ``src/*.cu`` + manifests, ``cases.json`` (virtual ranks),
``ipc_cases.json`` (two processes, host-synchronised), and ``sanitize_collectives`` (the
compute-sanitizer driver) when nvcc is available. The full matrix: every collective x algorithm
x mechanism, world sizes 2, 4, 8, bf16 and fp32, sizes 4 KiB, odd element counts around 2 KiB,
1 MiB and 64 MiB, and 1 GiB; timing at 1 GiB (the bandwidth target) and 1 MiB (latency).

``--scale`` builds the matrix at scale instead: every collective x algorithm x mechanism
that runs there (kernel_contract.world_reason) at worlds 16, 32, 72 and 128 of virtual ranks
(copy engines at 16 and 32: a copy per rank pair is host work), bf16 and fp32, odd sizes and
a 4 MiB one, a rank's share of the SMs as its blocks, and one call whose grid cannot be
resident, which the host must refuse with the co-resident limit; ``--memcheck-libs`` names one
library per algorithm for compute-sanitizer (memcheck_libs.txt).

``--in-network-emulated`` adds the streamed in-network all-reduce, reduce-scatter and
all-gather built with -DPKC_EMULATE_MULTIMEM=1 (peer loads and stores in place of multimem,
the same chunk loop and flags; mechanism ``multimem-emulated``), checked as virtual ranks at
worlds 2, 4 and 8 (never multimem itself: that is compile-only here).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import codegen
from codegen.build import compile_many, find_nvcc
from codegen.plan import RUNNABLE_MECHANISMS, mechanisms
from hwmodels.catalog import load_system
from hwmodels.resources import device_dir, kernels_dir
from pksim_core import algorithms
from pksim_core.kernel_contract import IN_NETWORK_STREAMED_OPS, world_reason
from pksim_core.schedule import Schedule
from validation.prepare.predict import predict_case
from validation.runtime.reference import ELEM, count_for_bytes

SHORT = {"all-gather": "ag", "reduce-scatter": "rs", "all-reduce": "ar", "all-to-all": "a2a",
         "broadcast": "bc", "direct": "direct", "two-shot": "2shot", "ring": "ring",
         "tma": "tma", "register": "reg", "copy-engine": "ce", "in-network": "innet",
         "multimem-emulated": "mmemu", "rhd": "rhd"}
SHARDED = ("all-gather", "reduce-scatter", "all-to-all")


def runnable() -> list[tuple[str, str, str]]:
    """The correctness matrix's kernels (pksim_core.algorithms: suite "matrix"), on the mechanisms
    that run (the in-network ones: emulated_in_network); the rooted, -v and send/recv ones have
    their own suite, which knows their split sizes (validation.prepare.comm)."""
    return [(r.op, r.algorithm, mech) for r in algorithms.kernels() if r.suite == "matrix"
            for mech in mechanisms(r.algorithm, r.op) if mech in RUNNABLE_MECHANISMS]


SCALE_WORLDS = (16, 32, 72, 128)
SCALE_CE_WORLDS = (16, 32)


def scale_cases(libs: dict, system_name: str, worlds=SCALE_WORLDS) -> list[dict]:
    """Correctness at scale (``--scale``): see the module text."""
    sms = load_system(system_name).gpu.sm.count
    cases, seed = [], 9000
    for op, alg, mech in runnable():
        for w in (worlds if mech != "copy-engine" else tuple(x for x in worlds if x in SCALE_CE_WORLDS)):
            if world_reason(op, alg, mech, w):
                continue
            tag = f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}"
            bpr = max(1, sms // w)
            base = dict(op=op, algorithm=alg, mechanism=mech, world=w, lib=libs[(op, alg, mech)],
                        blocks_per_rank=bpr, deadline_s=60)
            for name, dt, nbytes, bump in (("odd96KiB", "bf16", 96 << 10, 5),
                                           ("odd1MiB", "fp32", 1 << 20, 3),
                                           ("4MiB", "bf16", 4 << 20, 0)):
                seed += 1
                count = odd_count(op, w, nbytes, dt, bump) if bump else count_for_bytes(op, w, nbytes, dt)
                cases.append(dict(id=f"{tag}-{dt}-{name}", dtype=dt, count=count, seed=seed, **base))
            if w == worlds[0] and algorithms.find(op, alg).waits and mech != "copy-engine":
                # blocks that wait on each other: a grid of 4 x the SMs cannot be resident
                seed += 1
                cases.append(dict(id=f"{tag}-bf16-notresident", dtype="bf16", seed=seed,
                                  count=count_for_bytes(op, w, 1 << 20, "bf16"),
                                  **(base | {"blocks_per_rank": 4 * bpr}),
                                  refused_unless_resident=True))
    return cases


def memcheck_libs(libs: dict) -> list[str]:
    """One library per (op, algorithm) for compute-sanitizer: registers where they run (the
    wide sums), TMA where registers do not (the rings' TMA path is the other's twin)."""
    out = {}
    for (op, alg, mech), lib in sorted(libs.items()):
        if mech == "copy-engine" or alg == "in-network":
            continue
        if (op, alg) not in out or mech == "register":
            out[(op, alg)] = lib
    return sorted(out.values())


def emulated_in_network() -> list[tuple[str, str, str]]:
    """The streamed in-network kernels' emulated builds (schedule.extra multimem = emulated)."""
    return [(op, "in-network", "multimem-emulated") for op in IN_NETWORK_STREAMED_OPS]


def schedule_for(op: str, alg: str, mech: str, comm_sms: int = 16) -> Schedule:
    """The schedule a library of (op, alg, mech) is generated from (1 GiB, world 8: both are
    run-time arguments); ``multimem-emulated`` is multimem with the emulation switch."""
    extra = (("multimem", "emulated"),) if mech == "multimem-emulated" else ()
    return Schedule(op=op, shape=(("bytes", 1 << 30),), world=8, algorithm=alg,
                    mechanism="multimem" if extra else mech, comm_sms=comm_sms, extra=extra)


def emulated_cases(libs: dict, worlds=(2, 4, 8)) -> list[dict]:
    """Correctness of the emulated in-network kernels as virtual ranks: bf16 and fp32, a few
    chunks and sizes off the chunk grid (multimem moves whole 16-byte vectors, so the bytes
    per rank stay a multiple of 16), a block count off the default; 1 GiB bf16 timed."""
    cases = []
    seed = 5000
    for op, alg, mech in emulated_in_network():
        for w in worlds:
            for dt in ("bf16", "fp32"):
                tag = f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-{dt}"
                base = dict(op=op, algorithm=alg, mechanism=mech, world=w, dtype=dt,
                            lib=libs[(op, alg, mech)])
                for name, nbytes, extra in (("4KiB", 4096, {}), ("1MiB", 1 << 20, {}),
                                            ("off-grid", (5 << 20) + 48 * w, {}),
                                            ("bpr5", (3 << 20) + 16 * w,
                                             {"blocks_per_rank": 5}),
                                            ("64MiB", 64 << 20, {})):
                    seed += 1
                    count = count_for_bytes(op, w, nbytes, dt)
                    per = 16 // ELEM[dt] * (1 if op != "all-reduce" else w)
                    count -= count % per
                    cases.append(dict(id=f"{tag}-{name}", count=count, seed=seed, **base, **extra))
            seed += 1
            cases.append(dict(id=f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-bf16-1GiB", op=op,
                              algorithm=alg, mechanism=mech, world=w, dtype="bf16",
                              lib=libs[(op, alg, mech)], seed=seed,
                              count=count_for_bytes(op, w, 1 << 30, "bf16"), time=True, iters=5,
                              warmup=1, deadline_s=120))
    return cases


def odd_count(op: str, world: int, approx_bytes: int, dtype: str, bump: int) -> int:
    """An element count near ``approx_bytes`` (nccl-tests convention) that is odd and leaves
    every shard and chunk boundary off the 16-byte grid."""
    c = count_for_bytes(op, world, approx_bytes, dtype)
    c = c + bump if (c + bump) % 2 else c + bump + 1
    return c


def build_libs(out: Path, system_name: str, kernels: list[tuple[str, str, str]] | None = None,
               build: bool = True) -> dict[tuple[str, str, str], str]:
    """One library per (op, algorithm, mechanism) (default: every runnable one), as
    ``lib/<name>.so`` paths relative to ``out``. ``build=False`` only emits the sources and
    returns the paths the libraries will have (``lib<stem>.so``)."""
    system = load_system(system_name)
    src = out / "src"
    jobs, keys = [], []
    for op, alg, mech in (kernels if kernels is not None else runnable()):
        sched = schedule_for(op, alg, mech)
        e = codegen.emit(system, sched, None, src)
        jobs.append((e.source, codegen.options_for(e.plan)))
        keys.append((op, alg, mech))
    if not build:
        return {key: f"lib/lib{source.stem}.so" for key, (source, _) in zip(keys, jobs)}
    results = compile_many(jobs)
    libs = {}
    (out / "lib").mkdir(parents=True, exist_ok=True)
    for key, (source, _), res in zip(keys, jobs, results):
        if isinstance(res, Exception):
            raise res
        dst = out / "lib" / res.name
        shutil.copy2(res, dst)
        libs[key] = f"lib/{dst.name}"
    return libs


def make_cases(libs: dict, system_name: str, matrix: str) -> tuple[list[dict], list[dict]]:
    system = load_system(system_name)
    sms = system.gpu.sm.count
    cases: list[dict] = [{"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1 << 30, "iters": 10},
                         {"id": "copy-4GiB", "kind": "copy_bw", "bytes": 4 << 30, "iters": 5}]
    worlds = (2, 4, 8) if matrix == "full" else (2, 8)
    dtypes = ("bf16", "fp32") if matrix == "full" else ("bf16",)
    seed = 1

    def add(**kw):
        nonlocal seed
        seed += 1
        kw.setdefault("seed", seed)
        cases.append(kw)

    combos = [k for k in runnable() if k in libs]
    # 1. small and odd sizes, every combination (correctness, fast)
    for op, alg, mech in combos:
        for w in worlds:
            for dt in dtypes:
                tag = f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-{dt}"
                base = dict(op=op, algorithm=alg, mechanism=mech, world=w, dtype=dt,
                            lib=libs[(op, alg, mech)])
                add(id=f"{tag}-4KiB", count=count_for_bytes(op, w, 4096, dt), **base)
                add(id=f"{tag}-odd2KiB", count=odd_count(op, w, 2048, dt, 1), blocks_per_rank=5,
                    **base)
                add(id=f"{tag}-odd1MiB", count=odd_count(op, w, 1 << 20, dt, 7), **base)
    # 2. the 1 GiB point: correctness and timing together (bf16 timed, fp32 checked)
    for op, alg, mech in combos:
        for w in worlds:
            for dt in dtypes:
                tag = f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-{dt}-1GiB"
                sms_c, pred = (predict_case(system, op, alg, mech, w, 1 << 30, dt)
                               if dt == "bf16" else (None, None))
                bpr = sms // w if mech == "copy-engine" else (sms_c or min(16, sms // w))
                add(id=tag, op=op, algorithm=alg, mechanism=mech, world=w, dtype=dt,
                    lib=libs[(op, alg, mech)], count=count_for_bytes(op, w, 1 << 30, dt),
                    blocks_per_rank=bpr, time=dt == "bf16", iters=5, warmup=1, predicted_s=pred,
                    deadline_s=120)
    # 3. 64 MiB with odd counts, and 1 MiB timing (world 8)
    for op, alg, mech in combos:
        for w in worlds:
            tag = f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-bf16"
            add(id=f"{tag}-odd64MiB", op=op, algorithm=alg, mechanism=mech, world=w, dtype="bf16",
                lib=libs[(op, alg, mech)], count=odd_count(op, w, 64 << 20, "bf16", 13))
        sms_c, pred = predict_case(system, op, alg, mech, 8, 1 << 20, "bf16")
        add(id=f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w8-bf16-1MiB-timed", op=op, algorithm=alg,
            mechanism=mech, world=8, dtype="bf16", lib=libs[(op, alg, mech)],
            count=count_for_bytes(op, 8, 1 << 20, "bf16"),
            blocks_per_rank=(sms // 8 if mech == "copy-engine" else (sms_c or 16)),
            time=True, iters=20, warmup=3, predicted_s=pred)
    # 4. phase by phase with the host synchronising (what two processes on one GPU use)
    for op, alg, mech in combos:
        add(id=f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w4-bf16-odd-hostsync", op=op,
            algorithm=alg, mechanism=mech, world=4, dtype="bf16", lib=libs[(op, alg, mech)],
            count=odd_count(op, 4, 96 << 10, "bf16", 3), device_sync=False)
    # 5. the deadline path: waits that can never be satisfied must come back as an error
    for op, mech in (("all-reduce", "register"), ("all-gather", "tma")):
        add(id=f"{SHORT[op]}-ring-{SHORT[mech]}-w4-timeout", op=op, algorithm="ring",
            mechanism=mech, world=4, dtype="bf16", lib=libs[(op, "ring", mech)],
            count=4096, seq=1000, timeout_cycles=1 << 22, expect_error="timed out waiting on flag")
    # 6. blocks per rank at 1 GiB: the simulator's choice was timed above; the whole GPU
    #    (sms / world), two blocks per SM, and (no co-residency needed) four. Ring and rhd
    #    blocks wait on each other: two per SM must be refused by the host when the kernel
    #    cannot keep them all resident (the runner compares with the library's
    #    max_coresident_blocks), and otherwise run correctly (checked, not timed).
    if matrix == "full":
        for op, alg, mech in combos:
            if mech == "copy-engine" or op in ("all-to-all", "broadcast") or \
                    (op, alg) == ("all-reduce", "direct"):
                continue
            waits = algorithms.find(op, alg).waits
            factors = (1, 2) if waits else (1, 2, 4)
            for w in worlds:
                for f in factors:
                    refused = waits and f > 1
                    extra = (dict(refused_unless_resident=True) if refused else
                             dict(time=True, iters=5, warmup=1, deadline_s=120, sweep=True))
                    add(id=f"{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w{w}-bf16-1GiB-bpr{f * sms // w}",
                        op=op, algorithm=alg, mechanism=mech, world=w, dtype="bf16",
                        lib=libs[(op, alg, mech)], count=count_for_bytes(op, w, 1 << 30, "bf16"),
                        blocks_per_rank=f * sms // w, **extra)
    ipc = []
    for op, alg, mech in [("all-gather", "direct", "register"), ("all-reduce", "two-shot", "tma"),
                          ("reduce-scatter", "ring", "copy-engine"), ("all-to-all", "direct", "tma"),
                          ("broadcast", "direct", "copy-engine"), ("all-reduce", "ring", "register")]:
        ipc.append(dict(id=f"ipc-{SHORT[op]}-{SHORT.get(alg, alg)}-{SHORT[mech]}-w2-bf16", op=op,
                        algorithm=alg, mechanism=mech, dtype="bf16", lib=libs[(op, alg, mech)],
                        count=odd_count(op, 2, 1 << 20, "bf16", 5), device_sync=False, seed=7))
    return cases, ipc


def build_sanitizer(out: Path) -> Path | None:
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    exe = out / "sanitize_collectives"
    subprocess.run([nvcc, "-O2", "-std=c++17", "-I", str(kernels_dir()), "-o", str(exe),
                    str(device_dir() / "sanitize_collectives.cpp"), "-ldl"], check=True)
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--matrix", choices=("full", "quick"), default="full")
    ap.add_argument("--system", default="h200-virtual")
    ap.add_argument("--in-network-emulated", action="store_true",
                    help="also the emulated in-network kernels (peer loads and stores), "
                         "checked at worlds 2, 4, 8")
    ap.add_argument("--only-in-network-emulated", action="store_true",
                    help="only the emulated in-network kernels and their cases")
    ap.add_argument("--scale", action="store_true",
                    help="the correctness matrix at worlds 16, 32, 72, 128 (virtual ranks)")
    ap.add_argument("--no-build", action="store_true", help="emit the sources only")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.scale:
        libs = build_libs(ns.out, ns.system, runnable(), build=not ns.no_build)
        cases, ipc = scale_cases(libs, ns.system), []
        (ns.out / "memcheck_libs.txt").write_text("\n".join(memcheck_libs(libs)) + "\n")
    elif ns.only_in_network_emulated:
        libs = build_libs(ns.out, ns.system, emulated_in_network())
        cases, ipc = emulated_cases(libs), []
    else:
        kernels = runnable() + (emulated_in_network() if ns.in_network_emulated else [])
        libs = build_libs(ns.out, ns.system, kernels)
        cases, ipc = make_cases(libs, ns.system, ns.matrix)
        if ns.in_network_emulated:
            cases += emulated_cases(libs)
    (ns.out / "cases.json").write_text(json.dumps(cases, indent=1))
    (ns.out / "ipc_cases.json").write_text(json.dumps(ipc, indent=1))
    build_sanitizer(ns.out)
    print(f"{len(libs)} libraries, {len(cases)} cases, {len(ipc)} IPC cases in {ns.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["runnable", "make_cases", "build_libs", "ELEM", "emulated_in_network",
           "emulated_cases", "schedule_for", "scale_cases", "memcheck_libs"]
