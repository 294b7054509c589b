"""Entry point: ``pksim``. Errors of the tool become one line and exit code 2."""
from __future__ import annotations

import sys

import click

from hwmodels.errors import PksimError
from pksim import __version__
from pksim.cli import calibrate, codegen, env, predict, programs, run, systems, validate

try:            # the what-if study, sweep, trace and programs report commands need matplotlib
    from pksim.cli import programs_report, whatif
except ImportError:
    programs_report = whatif = None


class _Group(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise                             # bare ``pksim``: the help, as click gives it
        except click.UsageError as exc:
            _fail(usage_line(exc))

    def invoke(self, ctx: click.Context):
        try:
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


def _fail(message: str) -> None:
    click.echo(f"pksim: error: {' '.join(message.split())}", err=True)
    sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pksim")
def cli() -> None:
    """pksim: predict, search and generate multi-GPU kernels on modelled topologies."""


def _register() -> None:
    cli.add_command(systems.systems)
    cli.add_command(programs.programs)
    cli.add_command(predict.predict)
    cli.add_command(predict.search)
    cli.add_command(calibrate.calibrate)
    cli.add_command(codegen.codegen)
    cli.add_command(run.run)
    cli.add_command(validate.validate)
    cli.add_command(env.env)
    if whatif is not None:
        cli.add_command(whatif.whatif)
        cli.add_command(whatif.sweep)
        cli.add_command(whatif.trace)
        programs.programs.add_command(programs_report.report)


_register()


def main() -> None:
    cli(prog_name="pksim")


if __name__ == "__main__":
    main()
