"""``pksim programs report``: every shipped program predicted on each system, as a table in
Markdown (problem, baseline, pksim's best, roofline, % of roofline for both, speed-up), its
rows as CSV and JSON, and a plot of the % of roofline, baseline against pksim, per program."""
from __future__ import annotations

from typing import Any

from hwmodels.catalog import load_system
from hwmodels.units import format_time
from pksim_core import plots
from pksim_core.plots import OutputDir
from pksim_core.programs.load import list_programs, load_program
from pksim_core.programs.predict import ProgramPrediction, predict_program
from pksim_core.vocabulary import with_aliases

FILES = ("report.md", "results.json", "results.csv")
PLOT = "roofline-share"


def predict_all(systems: list[str], names: list[str] | None = None) -> list[ProgramPrediction]:
    programs = [load_program(n) for n in (names or list_programs())]
    out = []
    for name in systems:
        system = load_system(name)
        out += [predict_program(system, p) for p in programs]
    return out


def markdown(predictions: list[ProgramPrediction], command: str, provenance: str) -> str:
    systems = list(dict.fromkeys(p.system for p in predictions))
    lines = ["# Programs: baseline, pksim's best and the roofline", "",
             f"Made by `{command}` ({provenance}). Times are predictions of the model "
             f"(docs/design.md, \"Programs\"); % of roofline is roofline / time. The problems "
             f"no program covers, and what each lacks: docs/programs.md.", ""]
    for system in systems:
        mine = [p for p in predictions if p.system == system]
        lines += [f"## {system}", "", _summary_line(mine), "",
                  "| program | problems | baseline | pksim's best | roofline (bound) | "
                  "baseline % of roofline | pksim % of roofline | speed-up |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for p in mine:
            lines.append(f"| {p.program} | {', '.join(map(str, p.covers))} | "
                         f"{format_time(p.baseline_s)} | {format_time(p.best_s)} | "
                         f"{format_time(p.roofline_s)} ({p.roofline_resource}) | "
                         f"{p.baseline_pct:.1f} | {p.best_pct:.1f} | {p.speedup:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def _summary_line(mine: list[ProgramPrediction]) -> str:
    speedups = sorted(p.speedup for p in mine)
    median = speedups[len(speedups) // 2] if speedups else 0.0
    faster = sum(1 for s in speedups if s > 1.0 + 1e-9)
    covered = sum(len(p.covers) for p in mine)
    return (f"{len(mine)} programs ({covered} problems): pksim's best is faster than the "
            f"baseline on {faster}, median speed-up {median:.2f}x, range "
            f"{speedups[0]:.2f}x-{speedups[-1]:.2f}x." if speedups else "no programs")


def rows(predictions: list[ProgramPrediction]) -> list[dict[str, Any]]:
    out = []
    for p in predictions:
        row = p.summary()
        row["covers"] = " ".join(map(str, p.covers))
        out.append(row)
    return out


def write(out: OutputDir, predictions: list[ProgramPrediction], command: str,
          provenance: str, plot: bool = True) -> None:
    # per program its summary, roofline terms and notes (the per-op rows of the longest
    # programs run to megabytes: pksim predict --program NAME --json gives them)
    out.write_json("results.json", {"command": command, "provenance": provenance,
                                    "programs": [{**p.summary(), "world": p.world,
                                                  "roofline_terms_s": dict(p.roofline_terms),
                                                  "notes": list(p.notes)}
                                                 for p in predictions]})
    out.write_csv("results.csv", rows(predictions), comment=f"{command} ({provenance})")
    path = out.target("report.md")
    path.write_text(markdown(predictions, command, provenance))
    if plot:
        points = [{"system": p.system, "program": p.program,
                   "baseline_pct_of_roofline": p.baseline_pct,
                   "best_pct_of_roofline": p.best_pct} for p in predictions]
        out.save(plots.roofline_shares(points, "% of the roofline, baseline and pksim's best"),
                 PLOT, [with_aliases(p, ("baseline_pct", "best_pct")) for p in points])
