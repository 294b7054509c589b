"""``pksim programs report``: the table and plot of docs/programs/ (needs matplotlib)."""
from __future__ import annotations

import datetime

import click

from hwmodels.errors import ConfigError
from pksim_cli.output import emit_json
from pksim_core.plots import OutputDir, plot_files
from pksim_core.programs import list_programs
from pksim_core.programs.report import FILES, PLOT, predict_all, rows, write

DEFAULT_SYSTEMS = ("dgx-h100", "gb200-nvl72")


@click.command()
@click.option("-o", "--output", metavar="DIR", default="pksim-out/programs", show_default=True,
              help="Folder for report.md, results.json/.csv and the plot.")
@click.option("--system", "systems", multiple=True, metavar="NAME",
              help="Systems to predict on (repeatable; default dgx-h100 and gb200-nvl72).")
@click.option("--program", "names", multiple=True, metavar="NAME",
              help="Programs (repeatable; default every shipped program).")
@click.option("--date", default=None, metavar="YYYY-MM-DD",
              help="The date the report says it was made (default today).")
@click.option("--force", is_flag=True, help="Overwrite files already there.")
@click.option("--no-plots", is_flag=True, help="Write the table and data only.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def report(output, systems, names, date, force, no_plots, as_json) -> None:
    """Every shipped program on each system: baseline, pksim's best, roofline, % of roofline
    and speed-up, as Markdown, CSV and JSON, with a plot of the % of roofline."""
    for name in names:
        if name not in list_programs():
            raise ConfigError(f"--program {name!r}: not a shipped program (pksim programs list)")
    for flag, given in (("--system", systems), ("--program", names)):
        twice = sorted({g for g in given if given.count(g) > 1})
        if twice:
            raise ConfigError(f"{flag} {twice[0]}: given twice")
    if date is not None:
        try:
            datetime.date.fromisoformat(date)
        except ValueError:
            raise ConfigError(f"--date {date!r}: not a date (YYYY-MM-DD)") from None
    out = OutputDir(output, force)
    out.check(list(FILES) + ([] if no_plots else plot_files([PLOT])))
    systems = list(systems or DEFAULT_SYSTEMS)
    predictions = predict_all(systems, list(names) or None)
    parts = ["pksim programs report", f"-o {output}"] + [f"--system {s}" for s in systems]
    command = " ".join(parts + [f"--program {n}" for n in names])
    provenance = f"CPU, no GPU, {date or datetime.date.today().isoformat()}"
    write(out, predictions, command, provenance, plot=not no_plots)
    if as_json:
        emit_json({"rows": rows(predictions), "files": [str(f) for f in out.written]})
        return
    for f in out.written:
        click.echo(f"wrote {f}")
