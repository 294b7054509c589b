"""``pksim codegen --program NAME``: the kernels of a program's communication
(codegen.program), their index, and optionally their builds."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

import codegen as cg
from codegen.program import emit_program
from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.units import format_time
from pksim_cli.output import emit_json
from pksim_core.programs.load import load_program

# Options of a single schedule that --program does not take (each op has its own).
_SINGLE = ("op", "size", "algorithm", "mechanism", "comm_sms", "peer_order", "label", "splits",
           "peers", "reduce_op", "epilogue", "m", "n_", "k", "overlap")


def codegen_program(name: str, out_dir: str, force: bool, do_build: bool, as_json: bool,
                    kw: dict) -> None:
    given = [k for k in _SINGLE if kw.get(k) not in (None, ())]
    if given:
        raise ConfigError(f"--program emits every communication op of the program with its own "
                          f"schedule; drop --{given[0].rstrip('_').replace('_', '-')}")
    program = load_program(name)
    system = load_system(kw["system_name"], kw["overrides"])
    index = Path(out_dir) / f"program-{program.name}.json"
    if index.exists() and not force:
        raise ConfigError(f"{index} exists: use --force to overwrite, or -o another folder")
    command = "pksim codegen " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["codegen"] else ""
    units, index = emit_program(system, program, out_dir, cg.emit, command)
    data = json.loads(index.read_text())
    libs = {}
    if do_build:
        for u in units:
            libs[u.source.name] = str(cg.build(u.source, copy_to_dir=True))
    if as_json:
        emit_json(data | {"libraries": libs})
        return
    click.echo(f"{program.name} on {system.name}: {len(units)} kernels for "
               f"{len(data['kernels'])} communication ops")
    for row in data["kernels"]:
        if "source" in row:
            t = format_time(row["predicted_s"]) if row.get("predicted_s") else "not predicted"
            click.echo(f"  {row['op']:24s} {row['kind']:16s} w{row['world']:<4d} "
                       f"{row['label']:28s} {t:>10s}  {row['source']}")
        else:
            click.echo(f"  {row['op']:24s} {row['kind']:16s} not emitted: {row['not_emitted']}")
    click.echo(f"  index     {index}")
