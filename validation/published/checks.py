"""Cross-checks of a corpus entry's printed numbers by the nccl-tests formulas.

nccl-tests (``src/all_reduce.cu``, ``all_gather.cu``, ``reduce_scatter.cu``): algBw =
bytes / time (for AllGather / ReduceScatter the printed size is the total, so the same);
busBw = algBw * 2(n-1)/n for AllReduce, algBw * (n-1)/n for AllGather / ReduceScatter.
A row agrees when the intervals of its printed values (each +- half a unit of its last
printed digit) are consistent with these formulas."""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from validation.published.corpus import Entry, PrintedRow, Series

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}
_REL = 1e-9


@dataclass(frozen=True)
class PublishedProblem:
    entry: str
    series: str
    bytes: int
    what: str

    def __str__(self) -> str:
        return f"{self.entry} [{self.series}] {self.bytes} B: {self.what}"


def half_unit(value: Decimal) -> float:
    """Half a unit of the last printed digit: 5.70 -> 0.005, 10171 -> 0.5."""
    exponent = value.as_tuple().exponent
    return 0.5 * 10.0 ** int(exponent)


def _interval(value: Decimal) -> tuple[float, float]:
    v, h = float(value), half_unit(value)
    return v - h - abs(v) * _REL, v + h + abs(v) * _REL


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def row_problems(row: PrintedRow, op: str | None, ranks: int | None) -> list[str]:
    """What in ``row`` disagrees with the nccl-tests formulas (empty: agrees or uncheckable)."""
    if op not in BUS_FACTOR or row.bytes is None or row.qualifier != "exact":
        return []
    out = []
    time_key = next((k for k in ("time_us", "time_ms") if k in row.values), None)
    scale = {"time_us": 1e-6, "time_ms": 1e-3}.get(time_key, 0.0)
    alg = None
    if time_key:
        lo, hi = _interval(row.values[time_key])
        alg = (row.bytes / (hi * scale) / 1e9, row.bytes / (lo * scale) / 1e9) if lo > 0 \
            else (row.bytes / (hi * scale) / 1e9, float("inf"))
    if "algbw_GBps" in row.values:
        printed = _interval(row.values["algbw_GBps"])
        if alg and not _overlap(alg, printed):
            out.append(f"algbw {row.values['algbw_GBps']} GB/s but bytes/time = "
                       f"{row.bytes / (float(row.values[time_key]) * scale) / 1e9:.4g} GB/s")
        alg = printed
    if "busbw_GBps" in row.values and alg and ranks:
        f = BUS_FACTOR[op](ranks)
        bus = _interval(row.values["busbw_GBps"])
        if not _overlap((alg[0] * f, alg[1] * f), bus):
            out.append(f"busbw {row.values['busbw_GBps']} GB/s but algbw x {f:.4g} = "
                       f"{alg[0] * f:.4g}..{alg[1] * f:.4g} GB/s")
    return out


def entry_problems(entry: Entry) -> list[PublishedProblem]:
    """Every row of ``entry`` that disagrees with the formulas, except rows whose note
    already records the disagreement (a transcription inconsistency kept as printed)."""
    found = []
    for s in entry.series:
        for row in s.rows:
            if row.note and "inconsistent" in row.note:
                continue
            for what in row_problems(row, entry.op(s), entry.ranks(s)):
                found.append(PublishedProblem(entry.name, s.label, row.bytes, what))
    return found


def flagged_rows(entry: Entry) -> list[tuple[Series, PrintedRow]]:
    """Rows marked in the entry as inconsistent (kept as printed, with a note)."""
    return [(s, r) for s in entry.series for r in s.rows if r.note and "inconsistent" in r.note]
