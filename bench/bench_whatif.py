"""Benchmark: the wall time of `pksim whatif` with no options (the default study).

Target: under a minute on 2 cores. Runs the command as a user would (a fresh process,
every core, plots included) into a temporary folder and prints one JSON object:
wall and CPU seconds, cores, workers, predictions, and the slowest tasks.

    python bench/bench_whatif.py [--workers N]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="default: every core")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "default"
        command = [sys.executable, "-m", "pksim_cli.main", "whatif", "-o", str(out)]
        if args.workers:
            command += ["--workers", str(args.workers)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            print(json.dumps({"benchmark": "whatif-default", "error": done.stderr.strip()}))
            sys.exit(1)
        results = json.loads((out / "results.json").read_text())
        files = sorted(p.name for p in out.iterdir())
    rows = results["rows"]
    slowest = sorted(rows, key=lambda r: -r["wall_s"])[:5]
    print(json.dumps({
        "benchmark": "whatif-default",
        "command": "pksim whatif",
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "target_s": TARGET_S,
        "under_target": wall < TARGET_S,
        "cores": cores,
        "workers": args.workers or cores,
        "predictions": len(rows),
        "ok": sum(r["status"] == "ok" for r in rows),
        "not_supported_yet": sum(r["status"] == "not supported yet" for r in rows),
        "task_seconds": round(sum(r["wall_s"] for r in rows), 2),
        "slowest_tasks": [{"system": r["system"], "workload": r["workload"], "world": r["world"],
                           "impl": r["impl"], "wall_s": round(r["wall_s"], 2)}
                          for r in slowest],
        "files": len(files),
    }, indent=1))


if __name__ == "__main__":
    main()
