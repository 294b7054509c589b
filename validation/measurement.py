"""The measurement record: what a GPU runner (validation/run/collectives.py, fused.py) writes
for a timed case and what the report reads, times in seconds.

A results file holds one JSON line per case: the case's own fields, ``ok`` and the checks'
fields, and, for a timed case, the fields of its ``Timing`` (``median_s``, ``min_s``,
``max_s``, ``iters``, ``idle`` where set, ``times_s`` where kept). Files written before the
fused runner wrote seconds hold ``ms``, ``ms_min``, ``ms_max`` and ``ms_<part>`` instead
(``OLD_MS``); ``seconds`` and ``Measurement.from_row`` read both.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

# a field in seconds -> its name in milliseconds in fused rows of the older runners
OLD_MS = {"median_s": "ms", "min_s": "ms_min", "max_s": "ms_max",
          "no_zeroing_s": "ms_no_zeroing", "gemm_s": "ms_gemm", "collective_s": "ms_collective",
          "torch_gemm_s": "ms_torch_gemm", "torch_none_s": "ms_torch_none"}


def seconds(row: dict, key: str) -> float | None:
    """Field ``key`` (seconds) of a results row, from its milliseconds in older rows."""
    if row.get(key) is not None:
        return row[key]
    ms = row.get(OLD_MS.get(key, ""))
    return ms * 1e-3 if ms is not None else None


@dataclass(frozen=True)
class Timing:
    """A series of timed calls of one case: median, fastest and slowest call (s)."""
    median_s: float
    min_s: float
    max_s: float
    iters: int
    idle: float = 0.0
    times_s: tuple[float, ...] = ()

    @classmethod
    def of(cls, times: list[float], idle: float = 0.0, keep: bool = False,
           median_s: float | None = None) -> "Timing":
        """The timing of ``times`` (seconds); ``median_s`` where the runner takes another
        central value (the collectives: the mean of two halves' medians)."""
        med = statistics.median(times) if median_s is None else median_s
        return cls(med, min(times), max(times), len(times), idle,
                   tuple(times) if keep else ())

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"median_s": self.median_s, "min_s": self.min_s,
                               "max_s": self.max_s, "iters": self.iters}
        if self.idle > 0:
            out["idle"] = self.idle
        if self.times_s:
            out["times_s"] = list(self.times_s)
        return out


@dataclass(frozen=True)
class Measurement:
    """One case of a results file as the report reads it."""
    id: str
    ok: bool
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    error: str | None = None

    @classmethod
    def from_row(cls, row: dict) -> "Measurement":
        return cls(row["id"], bool(row.get("ok")), seconds(row, "median_s") or None,
                   seconds(row, "min_s"), seconds(row, "max_s"), row.get("error"))

    @property
    def measured_s(self) -> float | None:
        """The case's time where it ran and passed its checks, else None."""
        return self.median_s if self.ok else None
