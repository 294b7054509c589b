"""Units: the suffixes used in key names, their SI factors, and byte-size parsing.

Key names carry their unit (``bandwidth_GBps``); the loader converts each to SI
once (bytes, seconds, bytes per second, FLOP per second, hertz).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hwmodels.errors import ConfigError

# Unit suffix in a key name -> (SI unit name, factor to SI).
UNIT_SUFFIXES: dict[str, tuple[str, float]] = {
    "GBps": ("Bps", 1e9),
    "TBps": ("Bps", 1e12),
    "Gbps": ("Bps", 1e9 / 8),
    "ns": ("s", 1e-9),
    "us": ("s", 1e-6),
    "MHz": ("Hz", 1e6),
    "KiB": ("B", 1024.0),
    "MiB": ("B", 1024.0**2),
    "GB": ("B", 1e9),
    "bytes": ("B", 1.0),
    "tflops": ("flops", 1e12),
}

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1000,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1000**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1000**3,
    "GIB": 1024**3,
    "T": 1024**4,
    "TB": 1000**4,
    "TIB": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, what: str = "--bytes") -> int:
    """Parse ``4096``, ``4KiB``, ``1.5GiB``, ``2MB`` into bytes (KiB = 1024, KB = 1000)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match or match.group(2).upper() not in _SIZE_UNITS:
            raise ConfigError(f"{what}: cannot read size {text!r} (use bytes or KiB/MiB/GiB)")
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
        if value != int(value):
            raise ConfigError(f"{what}: size {text!r} is not a whole number of bytes")
        value = int(value)
    if value <= 0:
        raise ConfigError(f"{what}: size must be positive, got {text!r}")
    return value


def parse_bytes_range(text: str, what: str = "--bytes") -> list[int]:
    """``1KiB:8GiB`` -> every power-of-two multiple from 1 KiB to 8 GiB; ``4096`` -> [4096];
    ``1KiB,1MiB`` -> the listed sizes."""
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_bytes(lo_text, what), parse_bytes(hi_text, what)
        if hi < lo:
            raise ConfigError(f"{what}: range {text!r} ends below its start")
        sizes = []
        size = lo
        while size <= hi:
            sizes.append(size)
            size *= 2
        return sizes
    return [parse_bytes(part, what) for part in text.split(",")]


def format_bytes(n: float) -> str:
    """4096 -> '4KiB'; 1536 -> '1.5KiB'."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor:
            value = n / factor
            return f"{value:g}{unit}"
    return f"{int(n)}B"


@dataclass(frozen=True)
class Seconds:
    """A time in a table cell: the table prints its column in one unit, named in the
    header (``time (us)``), each value to three significant figures; None prints '-'."""
    value: float | None


# Time units for people, largest first: (name, seconds per unit).
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def significant(value: float, digits: int = 3) -> str:
    """``value`` with at least ``digits`` significant figures and no exponent, trailing
    zeros kept: 2.0 -> '2.00', 82.83 -> '82.8', 0.805 -> '0.805', 3962.5 -> '3962'."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    if decimals and abs(float(text)) >= 10 ** (digits - decimals):
        text = f"{value:.{decimals - 1}f}"      # rounding carried a digit: 9.996 -> '10.0'
    return text


def time_unit(seconds) -> tuple[str, float]:
    """The one unit for a set of times: the largest in which the smallest non-zero time is
    at least 1 (nanoseconds at the least); ``seconds`` is a number or an iterable."""
    values = [seconds] if isinstance(seconds, (int, float)) else list(seconds)
    values = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    smallest = min(values, default=1.0)
    for name, factor in TIME_UNITS:
        if smallest >= factor * (1 - 5e-4):   # 999.7 us reads 1.00 ms, not 1000 us
            return name, factor
    return TIME_UNITS[-1]


def format_time(seconds: float, unit: str | None = None) -> str:
    """Seconds -> '12.3 us', '2.00 ms': three significant figures in ``unit`` (default:
    the largest in which the time is at least 1)."""
    name, factor = time_unit(seconds) if unit is None else (unit, dict(TIME_UNITS)[unit])
    return f"{significant(seconds / factor)} {name}"
