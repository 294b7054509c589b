"""Printing: JSON for scripts, a table for people."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

import click

from hwmodels.units import Seconds, significant, time_unit
from pksim.api.rows import json_entry


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


_NUMBER = re.compile(r"^[-+]?(\d[\d,]*(\.\d*)?|\.\d+)(e[-+]?\d+)?"
                     r"( ?(x|%|[KMGT]?i?B|[KMGT]?B/s|GB/s))?$")
_EMPTY = ("", "-", "n/a")


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """The title on a line of its own, then an aligned table (rich) at its natural width,
    whatever the terminal's: no cell is ever cut. Columns of numbers are right-aligned,
    text left-aligned; a column of ``Seconds`` cells takes one unit (in its header)."""
    from rich.console import Console      # loaded on the first table: --json never needs it
    from rich.table import Table
    headers, cells = _time_columns(list(headers), [list(r) for r in rows])
    t = Table()
    for i, h in enumerate(headers):
        column = [row[i] for row in cells if i < len(row)]
        numeric = any(c not in _EMPTY for c in column) and \
            all(c in _EMPTY or _NUMBER.match(c) for c in column)
        t.add_column(h, justify="right" if numeric else "left", no_wrap=True)
    for row in cells:
        t.add_row(*row)
    if title:
        click.echo(title)
    Console(width=10_000, soft_wrap=False).print(t)


def _time_columns(headers: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells: each column holding ``Seconds`` in the one unit of
    ``hwmodels.units.time_unit`` over its values, the unit added to its header."""
    for i in range(len(headers)):
        times = [r[i].value for r in rows if i < len(r) and isinstance(r[i], Seconds)]
        if not any(isinstance(r[i], Seconds) for r in rows if i < len(r)):
            continue
        unit, factor = time_unit(times)
        headers[i] = f"{headers[i]} ({unit})"
        for r in rows:
            if i < len(r) and isinstance(r[i], Seconds):
                v = r[i].value
                r[i] = "-" if v is None or not math.isfinite(v) else significant(v / factor)
    return headers, [[str(c) for c in r] for r in rows]


__all__ = ["emit_json", "json_entry", "table"]
