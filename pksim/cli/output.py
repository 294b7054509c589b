"""Printing: JSON for scripts, a table for people."""
from __future__ import annotations

import json
import math
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


def json_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A table entry as every command's --json gives it: times in seconds as the entries
    hold them (``*_s`` keys, as in every file pksim writes), the schedule's label under
    ``label`` (``*_schedule`` under ``*_label``; predict and search give the schedule
    itself under ``schedule``), and ``null`` for what does not apply."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        if key == "schedule" and isinstance(value, str):
            key = "label"
        elif key.endswith("_schedule") and isinstance(value, str):
            key = key[: -len("schedule")] + "label"
        out[key] = None if value == "" else value
    return out
