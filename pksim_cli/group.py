"""A click group whose commands are a table (command -> ``"module:attribute"``, a
``pksim_core.lazy.LazyTable``), imported when the command is asked for: ``pksim predict`` loads
the predict command's modules, not calibrate's scipy or whatif's matplotlib."""
from __future__ import annotations

import click

from pksim_core.lazy import LazyTable


class LazyGroup(click.Group):
    """``click.Group`` with ``lazy``: the commands not imported until used (``--help``
    lists them all, which imports them)."""

    def __init__(self, *args, lazy: LazyTable | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or LazyTable({})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy.names()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            self.add_command(self.lazy.load(name), name)
        return super().get_command(ctx, name)
