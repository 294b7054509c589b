"""Entry point: ``pksim``. Errors of the tool become one line and exit code 2.

The commands are a table (``COMMANDS``: command -> the module and attribute that define it),
loaded when the command runs, so that each command imports only what it uses
(docs/design/layout.md)."""
from __future__ import annotations

import sys
import warnings

import click

from hwmodels.errors import PksimError, PksimNote
from pksim import __version__
from pksim_cli.group import LazyGroup
from pksim_core.lazy import LazyTable

COMMANDS = LazyTable({
    "systems": "pksim_cli.systems:systems",
    "programs": "pksim_cli.programs:programs",
    "predict": "pksim_cli.predict:predict",
    "search": "pksim_cli.predict:search",
    "calibrate": "pksim_cli.calibrate:calibrate",
    "codegen": "pksim_cli.codegen:codegen",
    "run": "pksim_cli.run:run",
    "validate": "pksim_cli.validate:validate",
    "env": "pksim_cli.env:env",
    "pkb": "pksim_cli.pkb:pkb",
    "whatif": "pksim_cli.whatif:whatif",
    "sweep": "pksim_cli.whatif:sweep",
    "trace": "pksim_cli.whatif:trace",
})


class _CliGroup(LazyGroup):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise                             # bare ``pksim``: the help, as click gives it
        except click.UsageError as exc:
            _fail(usage_line(exc))

    def invoke(self, ctx: click.Context):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", PksimNote)
                warnings.showwarning = _notes_shown(warnings.showwarning)
                return super().invoke(ctx)
        except PksimError as exc:
            _fail(str(exc))
        except click.UsageError as exc:      # a bad option value or name: one line too
            _fail(usage_line(exc))
        except KeyboardInterrupt:
            click.echo("pksim: interrupted", err=True)
            sys.exit(130)


def usage_line(exc: click.UsageError) -> str:
    """click's usage error (usage, hint and message on four lines) as one line that names
    the command and where its help is."""
    where = exc.ctx.command_path if exc.ctx is not None else "pksim"
    return f"{exc.format_message().rstrip('.')} ({where} -h for help)"


def _notes_shown(show):
    """``warnings.showwarning`` printing a PksimNote as one ``pksim: note:`` line on stderr,
    any other warning as ``show`` does."""
    def shown(message, category, *args, **kwargs) -> None:
        if issubclass(category, PksimNote):
            click.echo(f"pksim: note: {message}", err=True)
        else:
            show(message, category, *args, **kwargs)
    return shown


def _fail(message: str) -> None:
    click.echo(f"pksim: error: {' '.join(message.split())}", err=True)
    sys.exit(2)


@click.group(cls=_CliGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pksim")
def cli() -> None:
    """pksim: predict, search and generate multi-GPU kernels on modelled topologies."""


def main() -> None:
    cli(prog_name="pksim")


if __name__ == "__main__":
    main()
