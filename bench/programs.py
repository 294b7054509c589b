"""Benchmark: predicting every shipped program (baseline, pksim's best, roofline) on one system,
from a cold start in a fresh process.

Target: under a minute on 2 cores for the whole shipped set on one system. Prints one JSON
object: wall and CPU seconds, cores, the programs predicted, and the slowest programs.

    python bench/programs.py [--system dgx-h100] [--system gb200-nvl72]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

TARGET_S = 60.0
# The child process: predicts every shipped program on each system, timing each.
_CHILD = """
import json, sys, time
from hwmodels.catalog import load_system
from pksim_core.programs import list_programs, load_program, predict_program
out = []
for name in sys.argv[1:]:
    system = load_system(name)
    for program in list_programs():
        start = time.perf_counter()
        predict_program(system, load_program(program))
        out.append([name, program, time.perf_counter() - start])
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", dest="systems", action="append", default=None,
                        help="system(s) to predict on (default: dgx-h100)")
    args = parser.parse_args()
    systems = args.systems or ["dgx-h100"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, *systems], capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        print(json.dumps({"benchmark": "programs", "error": done.stderr.strip()[-2000:]}))
        sys.exit(1)
    rows = json.loads(done.stdout)
    slowest = sorted(rows, key=lambda r: -r[2])[:5]
    print(json.dumps({
        "benchmark": "programs", "systems": systems, "programs": len(rows) // len(systems),
        "predictions": len(rows), "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "cores": cores, "target_s": TARGET_S * len(systems), "within_target": wall < TARGET_S * len(systems),
        "slowest": [{"system": s, "program": p, "s": round(t, 2)} for s, p, t in slowest],
    }, indent=2))


if __name__ == "__main__":
    main()
