"""The fused libraries of the host-cost comparison (validation/run/fused_host.py): the intra-SM
gemm-rs and ag-gemm (TMA), each built twice, as shipped (tensor maps cached per thread,
kernels/include/pk/tensor_map_cache.cuh) and with -DPK_NO_TENSOR_MAP_CACHE (every launch
encodes every map again, as before the cache):

    python -m validation.prepare.fused_host OUT_DIR

writes OUT_DIR/libs.json: {"<op>": {"cached": path, "encoding": path}} (paths relative to OUT_DIR).
"""
from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path

from codegen import fused
from codegen.build import compile_many
from hwmodels.catalog import load_system
from pksim_core.schedule import Schedule

SYSTEM = "h200-virtual"
VARIANTS = (("gemm-rs", "intra-sm", "direct", "tma"), ("ag-gemm", "intra-sm", "direct", "tma"))


def build(out: Path) -> dict:
    system = load_system(SYSTEM)
    out.mkdir(parents=True, exist_ok=True)
    jobs, names = [], []
    for op, ov, alg, mech in VARIANTS:
        s = Schedule(op=op, shape=(("k", 2048), ("m", 8192), ("n", 8192)), world=8, overlap=ov,
                     algorithm=alg, mechanism=mech, comm_sms=1)
        e = fused.emit(system, s, None, out / "src")
        opts = fused.build_options(e.plan)
        jobs.append((e.source, opts))
        jobs.append((e.source, replace(opts, defines=tuple(sorted(
            opts.defines + (("PK_NO_TENSOR_MAP_CACHE", "1"),))))))
        names += [(op, "cached"), (op, "encoding")]
    libs: dict = {}
    for (op, kind), res in zip(names, compile_many(jobs)):
        if isinstance(res, Exception):
            raise res
        dst = out / f"lib{op}-{kind}.so"
        shutil.copy2(res, dst)
        libs.setdefault(op, {})[kind] = dst.name
    (out / "libs.json").write_text(json.dumps(libs, indent=1) + "\n")
    return libs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ns = ap.parse_args(argv)
    print(json.dumps(build(ns.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
