"""Benchmark: pksim at large worlds: predict, search and codegen (the plan and source, no
nvcc) of a collective on the NVLink-domain systems at 72, 144 and 576 ranks.

Each command runs as a user runs it: a fresh process (cold caches), one core. Prints one
JSON object: per command its wall and CPU seconds and the schedule it chose.

    python bench/large_world.py [--op-codegen all-gather]

Target: the 576-rank codegen of an all-gather (issue #31's acceptance builds every
collective at the full domain) in well under 30 s on a 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

TARGET_S = 30.0
POINTS = [("gb200-nvl72", 72), ("vr-nvl144", 72), ("gb200-nvl576", 72), ("gb200-nvl576", 144),
          ("gb200-nvl576", 576)]


def run(args: list[str]) -> dict:
    """One pksim command in a fresh process: wall and CPU seconds, and its JSON output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pksim_cli.main", *args, "--json"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {"command": "pksim " + " ".join(args), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    if done.returncode != 0:
        return out | {"error": (done.stderr or done.stdout).strip()[-500:]}
    data = json.loads(done.stdout)
    schedule = data.get("schedule") or (data.get("ranked") or [{}])[0].get("schedule")
    if schedule:
        out["schedule"] = "/".join(str(schedule[k]) for k in ("algorithm", "mechanism", "comm_sms"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op-codegen", default="all-gather", help="the collective codegen emits")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for system, world in POINTS:
            common = ["--system", system, "--bytes", "64MiB", "--world", str(world)]
            for what, argv in (
                    ("predict", ["predict", "--op", "all-reduce", *common]),
                    ("search", ["search", "--op", "all-reduce", *common]),
                    ("codegen", ["codegen", "--op", args.op_codegen, *common,
                                 "-o", os.path.join(tmp, f"{system}-{world}")])):
                results.append({"what": what, "system": system, "world": world} | run(argv))
    codegen576 = [r for r in results if r["what"] == "codegen" and r["world"] == 576]
    print(json.dumps({
        "benchmark": "large-world", "python": platform.python_version(),
        "machine": platform.machine(), "cores": len(os.sched_getaffinity(0)),
        "target_s": TARGET_S,
        "under_target": all(r["wall_s"] < TARGET_S and "error" not in r for r in codegen576),
        "results": results}, indent=1))


if __name__ == "__main__":
    main()
