"""The keys of a corpus entry and the strict readers of one TOML table.

Every table of an entry is checked against a spec ``{key: (kind, required)}``; kinds are
``str``, ``int``, ``num`` (a finite, non-negative number kept as the printed ``Decimal``),
``bool``, ``table`` (str -> str) or a tuple of allowed strings. Errors are one line naming
the file, the dotted key and the value."""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError

ROLES = ("judge", "primitive", "tuner-log")
KINDS = {"curve": "judge", "points": "judge", "primitive": "primitive", "tuner-log": "tuner-log"}
MODES = ("graph", "eager", "unknown")
PROCESSES = ("per-gpu", "one", "unknown")
NVLS = ("on", "off", "default", "unknown")
PLACEMENTS = ("out-of-place", "in-place", "unknown")
QUALIFIERS = ("exact", "approx", "at-least", "at-most", "min", "max")
UNKNOWN = "unknown"

TOP = {"name": (str, True), "kind": (tuple(KINDS), True), "role": (ROLES, True),
       "title": (str, True), "note": (str, False)}
SOURCE = {"title": (str, False), "url": (str, False), "repo": (str, False),
          "path": (str, False), "commit": (str, False), "ref": (str, False),
          "date": (str, False), "cited_in": (str, False), "text": (str, False)}
SOURCE_ANY = ("title", "url", "repo", "ref", "text")
SYSTEM = {"name": (str, True), "gpu": (str, True), "gpus": (int, False),
          "nodes": (int, False), "interconnect": (str, False)}
LAUNCH = {"nccl_version": (str, True), "mode": (MODES, True), "processes": (PROCESSES, True),
          "nccl_tests_version": (str, False), "warmup": (int, False), "iters": (int, False),
          "graph_launches": (int, False)}
ENVIRONMENT = {"nvls": (NVLS, True), "algo": (str, False), "proto": (str, False),
               "vars": ("table", False)}
CONVENTIONS = {"op": (str, True), "placement": (PLACEMENTS, True), "dtype": (str, True),
               "redop": (str, True), "size_means": (str, True), "timing": (str, True),
               "ranks": (int, False)}
SERIES = {"label": (str, True), "implementation": (str, False), "op": (str, False),
          "ranks": (int, False), "placement": (PLACEMENTS, False), "algo": (str, False),
          "proto": (str, False), "note": (str, False), "rows": ("rows", True)}
# Size keys (at most one per row, the same in every row of a series), in their units.
SIZE_KEYS = ("bytes", "elements", "size_MB", "size_as_labelled")
TIME_KEYS = ("time_us", "time_ms", "latency_ns")
VALUE_KEYS = TIME_KEYS + ("algbw_GBps", "busbw_GBps", "bw_GBps", "fraction", "sms")
ROW = {**{k: ("num", False) for k in SIZE_KEYS + VALUE_KEYS},
       "qualifier": (QUALIFIERS, False), "note": (str, False)}
for _k in ("bytes", "elements", "size_as_labelled", "sms"):
    ROW[_k] = (int, False)
TUNER_TABLE = {"coll": (str, True), "algo": (str, True), "proto": (str, True),
               "latency_us": ("num", True), "algbw_GBps": ("num", True)}
TUNER_CHOICE = {"coll": (str, True), "bytes": (int, True), "algo": (str, True),
                "proto": (str, True), "channel_lo": (int, False), "channel_hi": (int, False),
                "nvls": (NVLS, True), "from": (("log", "readme", "blog"), True),
                "note": (str, False)}
TUNER_CHANNELS = {"coll": (int, False), "nvls": (int, False), "p2p": (int, False),
                  "nvls_chunk_bytes": (int, False)}


def check_table(path: Path | str, dotted: str, raw: Any, spec: dict) -> dict:
    """``raw`` checked against ``spec``: unknown, missing or mistyped keys are errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {dotted or 'entry'} must be a table, got {raw!r}")
    prefix = f"{dotted}." if dotted else ""
    for key in raw:
        if key not in spec:
            raise ConfigError(f"{path}: unknown key {prefix + key!r} "
                              f"(this table takes {', '.join(spec)})")
    out: dict = {}
    for key, (kind, required) in spec.items():
        if key not in raw:
            if required:
                raise ConfigError(f"{path}: missing key {prefix + key!r}")
            continue
        out[key] = check_value(path, prefix + key, raw[key], kind)
    return out


def check_value(path: Path | str, dotted: str, value: Any, kind: Any) -> Any:
    bad = f"{path}: {dotted} = {value!r}"
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"{bad}: not one of {', '.join(kind)}")
        return value
    if kind is str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{bad}: expected a non-empty string")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{bad}: expected true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{bad}: expected an integer")
        if value < 0:
            raise ConfigError(f"{bad}: must not be negative")
        return value
    if kind == "num":
        if isinstance(value, bool) or not isinstance(value, (int, Decimal, float)):
            raise ConfigError(f"{bad}: expected a number")
        number = Decimal(str(value)) if not isinstance(value, Decimal) else value
        if not number.is_finite():
            raise ConfigError(f"{bad}: not a finite number")
        if number < 0:
            raise ConfigError(f"{bad}: must not be negative")
        return number
    if kind == "table":
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ConfigError(f"{bad}: expected a table of strings")
        return dict(value)
    if kind == "rows":
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{bad}: expected a non-empty array of row tables")
        return value
    raise TypeError(kind)
