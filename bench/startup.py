"""Benchmark: pksim's start-up, as a script that asks the CLI for one answer waits for it.

Each command runs in a fresh process, ``--runs`` times (medians and the spread printed), as a
user runs it: the modules' bytecode compiled once first, as pip does at install; with
``--against DIR`` (a source tree of the previous release, e.g. ``git archive ff8aea2 | tar
-x -C DIR``) the same commands also run on that tree's code, in turn with this one's, and the
ratio is printed. Prints one JSON object.

    python bench/startup.py [--runs 9] [--against /tmp/pksim-main]

Target (issue 41): ``pksim --version`` and ``pksim predict`` of an 8-rank collective within
0.25 s wall on the 2-core development machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

TARGET_S = 0.25
PACKAGES = ("pksim", "hwmodels", "codegen", "validation")   # what a command may import
COMMANDS = {
    "pksim --version": ["-m", "pksim_cli.main", "--version"],
    "pksim predict --system dgx-h100 --op all-reduce --bytes 1MiB":
        ["-m", "pksim_cli.main", "predict", "--system", "dgx-h100", "--op", "all-reduce",
         "--bytes", "1MiB"],
    "python -c 'import pksim'": ["-c", "import pksim"],
}


def wall(argv: list[str], tree: str | None) -> float:
    """One fresh interpreter running ``argv``: its wall seconds (it must succeed)."""
    env = user_env(tree, compiled=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL,
                   cwd=tree)
    return time.perf_counter() - start


def user_env(tree: str | None, compiled: bool = False) -> dict[str, str]:
    """The environment a user's ``pksim`` runs in: Python may read (and write) bytecode, as an
    installed package's, whatever this shell says (PYTHONDONTWRITEBYTECODE would compile
    every module again in every run); with ``tree``, its packages first on the path. Unless
    ``compiled``, the packages of ``tree`` (None: this checkout) are compiled first, as pip
    compiles them at install."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if tree:        # run from the tree (sys.path[0]) so that its packages come first
        env["PYTHONPATH"] = tree
    if not compiled:
        root = tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        packages = [os.path.join(root, p) for p in PACKAGES
                    if os.path.isdir(os.path.join(root, p))]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    return env


def origin(tree: str | None) -> str:
    """Where the pksim that runs from ``tree`` (None: this checkout) lives; its packages
    compiled (user_env)."""
    env = user_env(tree)
    return subprocess.run([sys.executable, "-c", "import pksim; print(pksim.__file__)"],
                          env=env, cwd=tree, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--against", metavar="DIR", default=None,
                        help="source tree of the previous release, run side by side")
    args = parser.parse_args()
    trees = {"this": None} | ({"previous": args.against} if args.against else {})
    origins = {name: origin(tree) for name, tree in trees.items()}
    if len(set(origins.values())) < len(origins):
        raise SystemExit(f"--against {args.against}: the same pksim runs ({origins})")
    results = []
    for label, argv in COMMANDS.items():
        times: dict[str, list[float]] = {name: [] for name in trees}
        wall(argv, None)                  # one warm-up: the OS's file cache, not pksim's
        for _ in range(args.runs):
            for name, tree in trees.items():   # in turn, so that load affects both alike
                times[name].append(wall(argv, tree))
        row = {"command": label}
        for name, ts in times.items():
            row[name] = {"median_s": round(statistics.median(ts), 4),
                         "min_s": round(min(ts), 4), "max_s": round(max(ts), 4)}
        if "previous" in row:
            row["speedup"] = round(row["previous"]["median_s"] / row["this"]["median_s"], 2)
        results.append(row)
    targeted = [r for r in results if r["command"].startswith("pksim")]
    print(json.dumps({
        "benchmark": "startup", "python": platform.python_version(),
        "machine": platform.machine(), "cores": len(os.sched_getaffinity(0)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": args.runs,
        "pksim": origins, "target_s": TARGET_S,
        "under_target": all(r["this"]["median_s"] <= TARGET_S for r in targeted),
        "results": results}, indent=1))


if __name__ == "__main__":
    main()
