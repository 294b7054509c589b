"""Printing: JSON for scripts, a table for people."""
from __future__ import annotations

import json
from typing import Any, Sequence

import click

from pksim.api.rows import json_entry


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """An aligned table (rich, loaded on the first table: a --json run never needs it), at
    least 150 columns wide."""
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for h in headers:
        t.add_column(h, justify="left" if h in (headers[0],) else "right")
    for row in rows:
        t.add_row(*[str(c) for c in row])
    console = Console()
    console.width = max(console.width, 150)
    console.print(t)


__all__ = ["emit_json", "json_entry", "table"]
