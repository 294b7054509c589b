"""How the report writes its numbers: signed and absolute percentages, times."""
from __future__ import annotations

from hwmodels.units import format_time


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def fmt_abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_time(x: float | None) -> str:
    return "-" if x is None else format_time(x)
