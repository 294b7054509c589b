"""Entry point: ``pksim``. Errors of the tool become one line and exit code 2.

The commands are a table (``COMMANDS``: command -> the module and attribute that define it),
loaded when the command runs, so that each command imports only what it uses
(docs/design.md, Code layout)."""
from __future__ import annotations

import sys

import click

from hwmodels.errors import PksimError
from pksim import __version__
from pksim.cli.group import LazyGroup
from pksim.lazy import LazyTable

COMMANDS = LazyTable({
    "systems": "pksim.cli.systems:systems",
    "programs": "pksim.cli.programs:programs",
    "predict": "pksim.cli.predict:predict",
    "search": "pksim.cli.predict:search",
    "calibrate": "pksim.cli.calibrate:calibrate",
    "codegen": "pksim.cli.codegen:codegen",
    "run": "pksim.cli.run:run",
    "validate": "pksim.cli.validate:validate",
    "env": "pksim.cli.env:env",
    "pkb": "pksim.cli.pkb:pkb",
    "whatif": "pksim.cli.whatif:whatif",
    "sweep": "pksim.cli.whatif:sweep",
    "trace": "pksim.cli.whatif:trace",
})


class _Group(LazyGroup):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PksimError as exc:
            click.echo(f"pksim: error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("pksim: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pksim")
def cli() -> None:
    """pksim: predict, search and generate multi-GPU kernels on modelled topologies."""


def main() -> None:
    cli(prog_name="pksim")


if __name__ == "__main__":
    main()
