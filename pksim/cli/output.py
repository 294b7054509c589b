"""Printing: JSON for scripts, a table for people."""
from __future__ import annotations

import json
from typing import Any, Sequence

import click


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table (rich where the terminal supports it)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        Console = None
    if Console is not None:
        t = Table(title=title, title_justify="left")
        for h in headers:
            t.add_column(h, justify="left" if h in (headers[0],) else "right")
        for row in rows:
            t.add_row(*[str(c) for c in row])
        console = Console()
        console.width = max(console.width, 150)
        console.print(t)
        return
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    click.echo(title)
    click.echo("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)))
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
