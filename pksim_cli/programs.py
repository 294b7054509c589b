"""``pksim programs list|show`` (the shipped programs, as ``systems list|show`` lists systems)
and what ``predict``, ``search`` and ``trace`` do with ``--program``."""
from __future__ import annotations

import click

from hwmodels.units import Seconds, format_bytes, format_time, time_unit
from pksim.api.programs import (DEFAULT_SYSTEM, check_program_options, program_prediction,
                                search_program)
from pksim_cli.group import LazyGroup
from pksim_cli.output import emit_json, table
from pksim_core.lazy import LazyTable
from pksim_core.programs import list_programs, load_program
from pksim_core.programs.model import ProgramSpec
from pksim_core.programs.predict import ProgramPrediction
from pksim_core.vocabulary import with_aliases

# ``programs report`` draws plots (matplotlib): loaded when it runs
SUBCOMMANDS = LazyTable({"report": "pksim_cli.programs_report:report"})


@click.group(cls=LazyGroup, lazy=SUBCOMMANDS)
def programs() -> None:
    """Whole multi-GPU problems as programs: list, show (and report)."""


@programs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(as_json: bool) -> None:
    """One line per shipped program, with the ParallelKernelBench problems it covers."""
    rows = [load_program(name).summary() for name in list_programs()]
    if as_json:
        emit_json(rows)
        return
    table(f"pksim programs ({len(rows)} programs, {sum(len(r['covers']) for r in rows)} "
          f"problems covered)", ["program", "covers", "ops", "collectives", "comm bytes",
                                 "FLOP", "description"],
          [[r["name"], ",".join(map(str, r["covers"])), r["ops"], r["collectives"],
            format_bytes(r["comm_bytes"]), f"{r['flops']:.3g}", r["description"][:60]]
           for r in rows])


def detail(program: ProgramSpec) -> dict:
    ops = []
    for op in program.ops:
        entry = {"name": op.name, "kind": op.kind, "reads": list(op.reads),
                 "writes": list(op.writes), "deps": list(op.deps), "dtype": op.dtype,
                 "flops": op.flops or None, "hbm_bytes": op.nbytes or None}
        if op.is_comm:
            entry.update(group=op.group, group_size=program.groups[op.group].size,
                         comm_bytes=op.comm_bytes)
        entry["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in op.params}
        ops.append(with_aliases(entry, {"bytes": "hbm_bytes"}))
    return {**program.summary(), "path": program.path, "source": program.source,
            "notes": list(program.notes), "dtype": program.dtype,
            "tensors": {t.name: with_aliases({"shape": list(t.shape), "dtype": t.dtype,
                                              "size_bytes": t.nbytes}, ("bytes",))
                        for t in program.tensors.values()},
            "groups": {g.name: [list(p) for p in g.parts] for g in program.groups.values()},
            "ops": ops}


@programs.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, as_json: bool) -> None:
    """Program NAME (a shipped name or a .toml path): tensors, groups and ops in issue order."""
    program = load_program(name)
    out = detail(program)
    if as_json:
        emit_json(out)
        return
    click.echo(f"{program.name}: {program.description}")
    click.echo(f"file: {program.path}; covers {', '.join(map(str, program.covers)) or '-'}; "
               f"world {program.world}")
    if program.source:
        click.echo(f"source: {program.source}")
    groups = ", ".join(f"{g} {len(p)}x{len(p[0])}" for g, p in out["groups"].items())
    click.echo(f"groups: {groups}")
    table("ops", ["op", "kind", "group", "size", "FLOP", "HBM bytes", "after"],
          [[o["name"], o["kind"], o.get("group", ""),
            format_bytes(o["comm_bytes"]) if o.get("comm_bytes") is not None else "",
            f"{o['flops']:.3g}" if o["flops"] else "",
            format_bytes(o["hbm_bytes"]) if o["hbm_bytes"] else "", ",".join(o["deps"])]
           for o in out["ops"]])


# ---- --program on predict, search, trace ----------------------------------------------------
def print_prediction(p: ProgramPrediction) -> None:
    covers = f"; covers {', '.join(map(str, p.covers))}" if p.covers else ""
    unit = time_unit((p.baseline_s, p.best_s, p.roofline_s))[0]

    def t(seconds: float) -> str:
        return format_time(seconds, unit)

    click.echo(f"program {p.program} on {p.system} ({p.world} ranks{covers})")
    click.echo(f"  baseline  {t(p.baseline_s):>9}   {'PyTorch + NCCL, one stream':30}"
               f"{p.baseline_pct:5.1f} % of roofline")
    click.echo(f"  pksim     {t(p.best_s):>9}   {f'speed-up {p.speedup:.2f}x':30}"
               f"{p.best_pct:5.1f} % of roofline")
    click.echo(f"  back to back (ParallelKernelBench's metric): baseline "
               f"{t(p.baseline.steady_s)}, pksim {t(p.best.steady_s)}, "
               f"speed-up {p.steady_speedup:.2f}x")
    terms = ", ".join(f"{k} {t(v)}" for k, v in p.roofline_terms.items() if v)
    click.echo(f"  roofline  {t(p.roofline_s):>9}   bound by {p.roofline_resource} "
               f"({terms})")
    for note in p.notes:
        click.echo(f"  note      {note}")
    table("per op", ["op", "kind", "size / FLOP", "baseline", "baseline runs", "pksim",
                     "pksim runs", "roofline", "roofline bound"],
          [[r.name, r.kind, format_bytes(r.comm_bytes) if r.comm_bytes is not None else
            (f"{r.flops:.3g} FLOP" if r.flops else ""),
            Seconds(r.baseline_end_s - r.baseline_start_s), r.baseline_label,
            Seconds(r.best_end_s - r.best_start_s),
            r.best_label + (f" [{r.best_task}]" if r.best_task != r.name else ""),
            Seconds(r.roofline_s), r.roofline_resource] for r in p.ops])


def prediction_json(p: ProgramPrediction) -> dict:
    return p.to_dict(timeline=True)


def print_search(found: dict) -> None:
    for entry in found["calls"]:
        table(f"{entry['op']} {format_bytes(entry['size_bytes'])} over {entry['world']} ranks "
              f"({', '.join(entry['ops'])}) on {found['system']}: {entry['candidates']} "
              f"candidates, {entry['simulated']} simulated",
              ["schedule", "time", "bound"],
              [[r["label"], Seconds(r["time_s"]), Seconds(r["bound_s"])]
               for r in entry["ranked"]])


__all__ = ["DEFAULT_SYSTEM", "check_program_options", "program_prediction", "search_program",
           "print_prediction", "print_search", "prediction_json", "detail", "programs"]
