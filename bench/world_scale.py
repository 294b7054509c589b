"""Benchmark: the cost of a prediction and of a search against the world size, 8 to 9,216
ranks (one NVLink domain, then several joined by the scale-out network).

Each command runs as a user runs it: a fresh process (no cache of any kind carried over,
nothing on disk but the modules' bytecode, as an installed package has it), interpreter start
included. Per point: wall seconds and peak memory (the
child's maximum resident set) of ``pksim predict`` and ``pksim search`` of a 1 GiB
all-reduce, and the schedule chosen; optionally (``--codegen``) the 576-rank codegen of an
all-gather (plan and source, no nvcc). ``--plot FILE.png`` draws wall time against ranks.
Prints one JSON object.

    python bench/world_scale.py [--runs 3] [--codegen] [--plot docs/images/world-scale.png]

Targets (issue 41): 9,216 ranks predict <= 5 s and <= 500 MB, search <= 10 s; the 576-rank
codegen <= 3 s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

POINTS = [("dgx-h100", 1), ("gb200-nvl72", 1), ("gb200-nvl576", 1), ("gb200-nvl576", 2),
          ("gb200-nvl576", 4), ("gb200-nvl72", 64), ("gb200-nvl576", 8), ("gb200-nvl576", 16)]
WORLD = {"dgx-h100": 8, "gb200-nvl72": 72, "gb200-nvl576": 576}
PACKAGES = ("pksim", "hwmodels", "codegen", "validation")   # what a command may import
TARGETS = {"predict": (5.0, 500.0), "search": (10.0, None), "codegen": (3.0, None)}


def measured(argv: list[str], runs: int) -> dict:
    """``runs`` fresh processes running ``argv`` (with a wrapper that prints their CPU time
    and peak memory): the medians of wall, CPU and peak, and the last run's output. On a
    machine shared with other work the CPU seconds move less than the wall."""
    walls, cpus, peaks, out = [], [], [], ""
    env = user_env()
    wrapper = ("import resource, sys, runpy; sys.argv = ['pksim'] + sys.argv[1:]\n"
               "try:\n    runpy.run_module('pksim_cli.main', run_name='__main__')\n"
               "finally:\n    u = resource.getrusage(resource.RUSAGE_SELF)\n"
               "    print(u.ru_utime + u.ru_stime, u.ru_maxrss, file=sys.stderr)\n")
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True,
                              text=True, env=env)
        walls.append(time.perf_counter() - start)
        lines = done.stderr.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"pksim {' '.join(argv)}: {done.stderr.strip()[-400:]}")
        cpu, peak = lines[-1].split()
        cpus.append(float(cpu))
        peaks.append(int(peak) / 1024)
        out = done.stdout
    return {"wall_s": round(statistics.median(walls), 3),
            "walls_s": [round(w, 3) for w in walls], "cpu_s": round(statistics.median(cpus), 3),
            "peak_MB": round(statistics.median(peaks), 1), "out": out}


def user_env(tree: str | None = None) -> dict[str, str]:
    """The environment a user's ``pksim`` runs in: Python may read (and write) bytecode, as an
    installed package's, whatever this shell says (PYTHONDONTWRITEBYTECODE would compile every
    module again in every run); the packages of ``tree`` (None: this checkout) compiled first,
    as pip compiles them at install."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    root = tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    packages = [os.path.join(root, p) for p in PACKAGES if os.path.isdir(os.path.join(root, p))]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return env


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--codegen", action="store_true", help="also the 576-rank codegen")
    parser.add_argument("--only", type=int, default=None, help="only worlds up to this")
    parser.add_argument("--plot", metavar="FILE.png", default=None)
    parser.add_argument("--replot", metavar="RESULTS.json", default=None,
                        help="only draw --plot from a file this benchmark printed")
    args = parser.parse_args()
    if args.replot:
        _plot(json.loads(open(args.replot).read())["results"], args.plot)
        return
    results = []
    for system, domains in POINTS:
        world = WORLD[system] * domains
        if args.only and world > args.only:
            continue
        common = ["--system", system, "--domains", str(domains), "--op", "all-reduce",
                  "--bytes", "1GiB"]
        for what in ("predict", "search"):
            m = measured([what, *common], args.runs)
            line = _first_line(m.pop("out"))
            results.append({"what": what, "system": system, "domains": domains,
                            "world": world, **m, "first_line": line})
    if args.codegen:
        with tempfile.TemporaryDirectory() as tmp:
            m = measured(["codegen", "--system", "gb200-nvl576", "--op", "all-gather",
                          "--bytes", "64MiB", "-o", tmp, "--force"], args.runs)
            line = _first_line(m.pop("out"))
            results.append({"what": "codegen", "system": "gb200-nvl576", "domains": 1,
                            "world": 576, **m, "first_line": line})
    largest = {r["what"]: r for r in results if r["world"] == max(x["world"] for x in results)
               or r["what"] == "codegen"}
    met = {what: (r["wall_s"] <= TARGETS[what][0]
                  and (TARGETS[what][1] is None or r["peak_MB"] <= TARGETS[what][1]))
           for what, r in largest.items()}
    print(json.dumps({
        "benchmark": "world-scale", "python": platform.python_version(),
        "machine": platform.machine(), "cores": len(os.sched_getaffinity(0)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": args.runs,
        "targets": {k: {"wall_s": v[0], "peak_MB": v[1]} for k, v in TARGETS.items()},
        "met": met, "results": results}, indent=1))
    if args.plot:
        _plot(results, args.plot)


def _plot(results: list[dict], path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = fig.add_subplot()
    colours = {"dgx-h100": "#0072b2", "gb200-nvl72": "#e69f00", "gb200-nvl576": "#009e73"}
    for what, style in (("predict", "o-"), ("search", "s--")):
        for system, colour in colours.items():
            pts = sorted((r["world"], r["wall_s"]) for r in results
                         if r["what"] == what and r["system"] == system)
            if pts:
                ax.plot([w for w, _ in pts], [t for _, t in pts], style, color=colour,
                        label=f"{what}, {system} x domains")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ranks (one domain up to 576, then domains x NVL72 / NVL576)")
    ax.set_ylabel("wall time, fresh process (s)")
    ax.set_title("1 GiB all-reduce: cost against world size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
