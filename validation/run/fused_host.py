"""The host's time per launch of a fused kernel, with the tensor maps cached (as shipped) and
encoded on every launch (-DPK_NO_TENSOR_MAP_CACHE), the two libraries of each op timed in
turn (validation/prepare/fused_host.py builds them):

    python -m validation.run.fused_host --libs DIR/libs.json --out OUT.jsonl

For each op and shape: both libraries checked against torch, then ``ROUNDS`` rounds of
``CALLS`` launches of each in turn; a round's figure is the host's wall time to queue its
launches (perf_counter around the loop, the GPU's queue not full: a small shape whose GPU time
per call is about the host's) over CALLS, the record keeps the median and the minimum over the
rounds. One JSON line per (op, shape, library) with device and date.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from validation.run.supervisor import device_info
from validation.runtime.fused import FusedCall, FusedLib

SHAPES = ((8, 1000, 1024, 512), (4, 1000, 1024, 512), (8, 3000, 5120, 2560))
CALLS, ROUNDS = 50, 7


def host_us(call: FusedCall, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        call.launch()
    spent = time.perf_counter() - t
    call.wait(60)
    return spent / calls * 1e6


def run(libs_json: Path, out: Path) -> list[dict]:
    spec = json.loads(libs_json.read_text())
    info = device_info()
    rows = []
    for op, paths in spec.items():
        libs = {kind: FusedLib(str(libs_json.parent / p)) for kind, p in paths.items()}
        for (w, m, n, k) in SHAPES:
            calls = {kind: FusedCall(lib, w, m, n, k, seed=7) for kind, lib in libs.items()}
            checked = {}
            for kind, c in calls.items():
                c.run(30)
                checked[kind] = c.check()["ok"]
                host_us(c, 3)                                   # warm
            times: dict[str, list[float]] = {kind: [] for kind in calls}
            for _ in range(ROUNDS):
                for kind, c in calls.items():
                    times[kind].append(host_us(c, CALLS))
            for kind, c in calls.items():
                row = {"op": op, "library": kind, "world": w, "m": m, "n": n, "k": k,
                       "ok": checked[kind], "calls": CALLS, "rounds": ROUNDS,
                       "host_us_median": statistics.median(times[kind]),
                       "host_us_min": min(times[kind]), "host_us": times[kind], **info}
                rows.append(row)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{op} w{w} {m}x{n}x{k} {kind}: {row['host_us_median']:.1f} us per launch "
                      f"(min {row['host_us_min']:.1f}), check {'ok' if row['ok'] else 'FAILED'}")
                c.free()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--libs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ns = ap.parse_args(argv)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    rows = run(ns.libs, ns.out)
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
