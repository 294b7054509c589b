"""Calibrate from primitives only (docs/decisions/D1.md, issue #43): a microbenchmark point
whose size and world are a validation suite's (size, world) is a judged case in disguise
(block_moves' 4 KiB shared reads on 8 readers are the one-shot all-reduce of 4 KiB at w8), so
``pksim calibrate`` leaves such points out of the fit. A point's world is the ranks it moves
for (block_moves' readers, block_moves_own / _cross and signal_chain's groups, fused_pull's
world, ce_burst's streams); one without (copies, launches, GEMMs) has world 1, which no suite
runs. Sizes are compared to 0.1 % (results files round large sizes to 6 digits)."""
from __future__ import annotations

import tomllib
from typing import Any, Iterable, Mapping

from hwmodels.resources import suites_dir
from hwmodels.units import parse_bytes

WORLD_KEYS = ("readers", "groups", "world", "streams")
SIZE_KEYS = ("sizes", "check_sizes", "timed_sizes")
TOLERANCE = 1e-3


def suite_points() -> set[tuple[int, int]]:
    """(nccl-tests bytes, world) of every shipped suite's collectives (validation/suites)."""
    points = set()
    for path in sorted(suites_dir().glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        worlds = doc.get("worlds", [])
        for key in SIZE_KEYS:
            for size in doc.get(key, []):
                points |= {(parse_bytes(size, f"{path}: {key}"), w) for w in worlds}
    return points


def world_of(record: Mapping[str, Any]) -> int:
    p = record.get("params") or {}
    return max([int(p[k]) for k in WORLD_KEYS if isinstance(p.get(k), (int, float))] or [1])


def size_of(record: Mapping[str, Any]) -> float | None:
    p = record.get("params") or {}
    for value in (record.get("bytes"), p.get("copy_bytes"), p.get("size_bytes")):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def is_suite_point(record: Mapping[str, Any], points: set[tuple[int, int]]) -> bool:
    size, world = size_of(record), world_of(record)
    return size is not None and any(w == world and abs(size / b - 1) <= TOLERANCE
                                    for b, w in points)


def suite_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records that sit on a suite's (size, world)."""
    points = suite_points()
    return [r for r in records if is_suite_point(r, points)]
