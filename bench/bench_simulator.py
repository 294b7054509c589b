"""Simulator speed: wall time of predictions and searches on big systems. Prints JSON.

    python bench/bench_simulator.py [--quick]

Each figure is the median of a few runs on one core (no workers), measured after a
warm-up run of the same call is excluded (the flow cache is cleared between runs).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from hwmodels.catalog import load_system
from pksim_core import collective_model
from pksim_core import simulate as sim
from pksim_core.fusion import clear_caches as clear_fused_caches
from pksim_core.schedule import Schedule
from pksim_core.search import fused_space, search, space

GiB = 1 << 30


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        collective_model.FLOWS.clear()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer points")
    parser.add_argument("--only-fused", action="store_true",
                        help="only the fused GEMM + collective search")
    args = parser.parse_args()
    if args.only_fused:
        print(json.dumps(fused_search(), indent=1))
        return
    repeat = 1 if args.quick else 3
    nvl576 = load_system("gb200-nvl576")
    out: dict = {"bench": "simulator", "python": platform.python_version(),
                 "machine": platform.machine(), "results": []}

    def record(name: str, seconds: float, **params) -> None:
        out["results"].append({"name": name, "wall_s": round(seconds, 4), **params})

    ring = Schedule(op="all-reduce", shape=(("bytes", GiB),), world=576, algorithm="ring",
                    mechanism="tma", comm_sms=32)
    record("predict all-reduce 1GiB ring/tma gb200-nvl576", timed(
        lambda: sim.predict(nvl576, ring), repeat), world=576, target_s=2.0)
    innet = ring.with_(algorithm="in-network", mechanism="multimem")
    record("predict all-reduce 1GiB in-network gb200-nvl576", timed(
        lambda: sim.predict(nvl576, innet), 1), world=576)
    candidates = space(nvl576, "all-reduce", GiB)
    record("search all-reduce 1GiB gb200-nvl576", timed(
        lambda: search(nvl576, candidates), 1), world=576, candidates=len(candidates),
        target_s=20.0)
    for name, world in (("dgx-h100", 8), ("gb200-nvl72", 72), ("h100-nvl256", 144),
                        ("gb200-nvl576", 576)):
        system = load_system(name)
        s = ring.with_(world=world)
        record("predict all-reduce 1GiB ring/tma by world size", timed(
            lambda: sim.predict(system, s), repeat), system=name, world=world)
    h100 = load_system("dgx-h100")
    sizes = (1 << 12, 1 << 20, GiB) if args.quick else (1 << 12, 1 << 16, 1 << 20, 1 << 26, GiB)
    for nbytes in sizes:
        cands = space(h100, "all-reduce", nbytes)
        record("search all-reduce dgx-h100 by size", timed(
            lambda: search(h100, cands), 1), nbytes=nbytes, candidates=len(cands))
        chunked = ring.with_(world=8, shape=(("bytes", nbytes),), chunk_bytes=64 << 10,
                             pipeline_depth=2)
        record("predict all-reduce ring/tma 64KiB chunks dgx-h100 by size", timed(
            lambda: sim.predict(h100, chunked), repeat), nbytes=nbytes)
    print(json.dumps(out, indent=1))


def fused_search() -> dict:
    """The gemm-rs search (M = N = 32768, K = 4096, bf16) on dgx-h100 and gb200-nvl576,
    one run each, cold caches: the best schedule (``top = 1``: what ``pksim predict``
    and ``pksim whatif`` ask) and the ten best (``pksim search``'s default), both by
    branch and bound; on dgx-h100 also every candidate simulated (``top = None``)."""
    out: dict = {"bench": "fused-search", "python": platform.python_version(),
                 "machine": platform.machine(), "results": []}
    runs = [("dgx-h100", 20.0, (1, 10, None)), ("gb200-nvl576", 60.0, (1, 10))]
    for name, target, tops in runs:
        system = load_system(name)
        candidates = fused_space(system, "gemm-rs", dict(m=32768, n=32768, k=4096))
        for top in tops:
            clear_fused_caches()
            collective_model.FLOWS.clear()
            start = time.perf_counter()
            result = search(system, candidates, top=top)
            wall = time.perf_counter() - start
            best = result.ranked[0]
            out["results"].append({
                "name": f"search gemm-rs 32768x32768x4096 {name}", "top": top,
                "wall_s": round(wall, 2), "target_s": target, "candidates": len(candidates),
                "simulated": result.simulated, "pruned": len(result.pruned),
                "infeasible": len(result.infeasible), "best": best.schedule.label(),
                "best_time_s": best.time_s, "speedup": round(best.speedup, 3)})
    return out


if __name__ == "__main__":
    main()
