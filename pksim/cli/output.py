"""Printing: JSON for scripts, a table for people."""
from __future__ import annotations

import json
from typing import Any, Sequence

import click
from rich.console import Console
from rich.table import Table


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """An aligned table (rich), at least 150 columns wide."""
    t = Table(title=title, title_justify="left")
    for h in headers:
        t.add_column(h, justify="left" if h in (headers[0],) else "right")
    for row in rows:
        t.add_row(*[str(c) for c in row])
    console = Console()
    console.width = max(console.width, 150)
    console.print(t)
