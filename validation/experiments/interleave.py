"""Experiment: the TMA copy collectives (all-gather direct and ring, broadcast, all-to-all)
built twice, with each block's 32 KiB chunks dealt round-robin over the rank's blocks
(PKC_INTERLEAVE=1, pkc::copy_range) and with one contiguous piece per block (0); timed at
64 MiB and 1 GiB, worlds 2, 4, 8, two block counts; the dealt form checked at odd sizes.

    python -m validation.experiments.interleave          # here: build/exp-il (nvcc)
    bash validation/experiments/interleave.sh            # GPU machine, carry build/exp-il

Result of 2026-12-02: validation/data/h200-interleave-2026-12-02.jsonl (docs/VALIDATION.md).
"""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import codegen
from codegen.build import compile_many
from hwmodels.catalog import load_system
from pksim.schedule import Schedule
from validation.reference import count_for_bytes

OUT = Path("build/exp-il")
KERNELS = [("all-gather", "direct"), ("all-gather", "ring"), ("broadcast", "direct"),
           ("all-to-all", "direct")]


def build() -> dict:
    """Both forms of every kernel: {(op, algorithm, interleave): library path under OUT}."""
    system = load_system("h200-virtual")
    (OUT / "lib").mkdir(parents=True, exist_ok=True)
    keys, jobs = [], []
    for op, alg in KERNELS:
        sched = Schedule(op=op, shape=(("bytes", 1 << 30),), world=8, algorithm=alg,
                         mechanism="tma", comm_sms=16)
        e = codegen.emit(system, sched, None, OUT / "src")
        options = codegen.options_for(e.plan)
        for il in (0, 1):
            defines = tuple(sorted(dict(options.defines, PKC_INTERLEAVE=str(il)).items()))
            keys.append((op, alg, il, e.source.stem))
            jobs.append((e.source, replace(options, defines=defines)))
    libs = {}
    for (op, alg, il, stem), built in zip(keys, compile_many(jobs)):
        if isinstance(built, Exception):
            raise SystemExit(str(built))
        so = OUT / "lib" / f"{stem}-il{il}.so"
        shutil.copy2(built, so)
        libs[(op, alg, il)] = str(so.relative_to(OUT))
    return libs


def cases(libs: dict) -> list[dict]:
    out = [{"id": "copy-1GiB", "kind": "copy_bw", "bytes": 1 << 30, "iters": 10}]
    for op, alg in KERNELS:
        base = dict(op=op, algorithm=alg, mechanism="tma", dtype="bf16")
        for w in (2, 4, 8):
            for nbytes in (1 << 30, 64 << 20):
                for bpr in sorted({132 // w, 66 // w if w < 8 else 8}):
                    for il in (0, 1):
                        out.append(dict(base, id=f"{op}-{alg}-w{w}-{nbytes >> 20}MiB-b{bpr}-il{il}",
                                        world=w, count=count_for_bytes(op, w, nbytes, "bf16"),
                                        blocks_per_rank=bpr, lib=libs[(op, alg, il)], iters=20,
                                        time=True))
        for w in (2, 3, 4, 8):   # odd and short counts, 5 blocks: tails, empty blocks
            for count in (1, 7, 8, 4096 * 8 + 8, 262151, 16384 * 5 + 8):
                out.append(dict(base, id=f"{op}-{alg}-w{w}-c{count}-il1", world=w, count=count,
                                blocks_per_rank=5, lib=libs[(op, alg, 1)]))
    for seed, case in enumerate(out[1:], 2):
        case["seed"] = seed
    return out


if __name__ == "__main__":
    all_cases = cases(build())
    (OUT / "cases.json").write_text(json.dumps(all_cases, indent=1) + "\n")
    print(len(all_cases), "cases in", OUT / "cases.json")
