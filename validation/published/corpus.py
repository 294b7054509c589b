"""The published-measurement corpus: one TOML file per public curve or table.

An entry (``corpus/<name>.toml``) carries where the numbers come from (``[source]``), the
machine (``[system]``), how NCCL was launched (``[launch]``), the environment
(``[environment]``: NVLS, a forced algorithm or protocol), the nccl-tests conventions
(``[conventions]``: op, placement, dtype, reduce op, what "size" means) and its numbers:
``[[series]]`` of rows (``bytes``, ``time_us``, ``algbw_GBps``, ``busbw_GBps``... as printed;
a field the source lacks is absent, never invented) and/or NCCL's logged cost table
(``[[table]]``) and picks (``[[choice]]``): required in a ``tuner-log``, optional in a curve. Roles: ``judge`` (whole collectives:
they judge the model, never tune it), ``primitive`` (may be fitted), ``tuner-log``.
Numbers keep their printed digits (``Decimal``) so that tests know their rounding; the
properties convert to SI (bytes, seconds, bytes/s) once."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from hwmodels.errors import ConfigError
from hwmodels.resources import corpus_dir
from validation.published.schema import (CONVENTIONS, ENVIRONMENT, KINDS, LAUNCH, ROW, SERIES,
                                         SIZE_KEYS, SOURCE, SOURCE_ANY, SYSTEM, TOP,
                                         TUNER_CHANNELS, TUNER_CHOICE, TUNER_TABLE, UNKNOWN,
                                         VALUE_KEYS, check_table)

CORPUS_DIR = corpus_dir()
DTYPE_BYTES = {"float": 4, "float32": 4, "fp32": 4, "half": 2, "float16": 2, "fp16": 2,
               "bfloat16": 2, "bf16": 2, "double": 8, "float64": 8, "int8": 1, "uint8": 1,
               "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "fp8": 1}
_TIME_SCALE = {"time_us": Decimal("1e-6"), "time_ms": Decimal("1e-3"),
               "latency_ns": Decimal("1e-9")}


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class PrintedRow:
    """One printed row: ``size_key`` names what ``size`` is; ``values`` keep printed digits."""
    size_key: str | None
    size: Decimal | int | None
    values: Mapping[str, Decimal]
    qualifier: str = "exact"
    note: str | None = None
    dtype_bytes: int | None = None

    @property
    def bytes(self) -> int | None:
        if self.size_key == "bytes":
            return int(self.size)
        if self.size_key == "elements" and self.dtype_bytes:
            return int(self.size) * self.dtype_bytes
        return None

    @property
    def time_s(self) -> float | None:
        for key, scale in _TIME_SCALE.items():
            if key in self.values:
                return float(self.values[key] * scale)
        return None

    def gbps(self, key: str) -> float | None:
        """``algbw_GBps`` / ``busbw_GBps`` / ``bw_GBps`` in bytes per second, or None."""
        return float(self.values[key]) * 1e9 if key in self.values else None


@dataclass(frozen=True)
class Series:
    label: str
    implementation: str
    op: str | None
    ranks: int | None
    placement: str | None
    algo: str | None
    proto: str | None
    rows: tuple[PrintedRow, ...]
    note: str | None = None


@dataclass(frozen=True)
class TunerEntry:
    coll: str
    algo: str
    proto: str
    latency_us: Decimal
    algbw_GBps: Decimal


@dataclass(frozen=True)
class TunerChoice:
    coll: str
    bytes: int
    algo: str
    proto: str
    nvls: str
    origin: str
    channel_lo: int | None = None
    channel_hi: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class TunerLog:
    table: tuple[TunerEntry, ...]
    choices: tuple[TunerChoice, ...]
    channels: Mapping[str, int]


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str
    role: str
    title: str
    path: Path | None
    source: Mapping[str, str]
    system: Mapping[str, Any]
    launch: Mapping[str, Any]
    environment: Mapping[str, Any]
    conventions: Mapping[str, Any] | None
    series: tuple[Series, ...]
    tuner: TunerLog | None = None
    note: str | None = None

    @property
    def nccl_version(self) -> str | None:
        v = self.launch["nccl_version"]
        return None if v == UNKNOWN else v

    def ranks(self, series: Series) -> int | None:
        """The ranks of ``series``: its own, else the conventions', else the system's GPUs."""
        if series.ranks is not None:
            return series.ranks
        if self.conventions and self.conventions.get("ranks") is not None:
            return self.conventions["ranks"]
        return self.system.get("gpus")

    def op(self, series: Series) -> str | None:
        return series.op or (self.conventions or {}).get("op")


def _rows(path, dotted: str, raw: list, dtype_bytes: int | None, need_size: bool) -> tuple:
    rows = []
    for i, item in enumerate(raw):
        where = f"{dotted}.{i}"
        r = check_table(path, where, item, ROW)
        sizes = [k for k in SIZE_KEYS if k in r]
        if len(sizes) > 1:
            raise ConfigError(f"{path}: {where}: give one size key, got {', '.join(sizes)}")
        if not any(k in r for k in VALUE_KEYS):
            raise ConfigError(f"{path}: {where}: a row needs a value ({', '.join(VALUE_KEYS)})")
        if need_size and not sizes:
            raise ConfigError(f"{path}: {where}: a curve row needs a size ({', '.join(SIZE_KEYS)})")
        key = sizes[0] if sizes else None
        rows.append(PrintedRow(key, r.get(key) if key else None,
                        _frozen({k: r[k] for k in VALUE_KEYS if k in r}),
                        r.get("qualifier", "exact"), r.get("note"), dtype_bytes))
    keys = {row.size_key for row in rows}
    if len(keys) > 1:
        raise ConfigError(f"{path}: {dotted}: rows mix size keys {sorted(map(str, keys))}")
    if None in keys and len(rows) > 1:
        raise ConfigError(f"{path}: {dotted}: several rows without a size")
    for i in range(1, len(rows)):
        if rows[i].size is not None and rows[i].size <= rows[i - 1].size:
            what = "duplicate" if rows[i].size == rows[i - 1].size else "unsorted"
            raise ConfigError(f"{path}: {dotted}.{i}.{rows[i].size_key} = {rows[i].size}: "
                              f"{what} size (sizes must increase)")
    return tuple(rows)


def _tuner(path, raw: dict) -> TunerLog:
    table = raw.pop("table", [])
    choices = raw.pop("choice", [])
    channels = raw.pop("channels", {})
    for key, item in (("table", table), ("choice", choices)):
        if not isinstance(item, list):
            raise ConfigError(f"{path}: {key} must be an array of tables ([[{key}]])")
    if not table and not choices:
        raise ConfigError(f"{path}: a tuner-log needs [[table]] or [[choice]] rows")
    entries = tuple(TunerEntry(**check_table(path, f"table.{i}", t, TUNER_TABLE))
                    for i, t in enumerate(table))
    picks = []
    for i, c in enumerate(choices):
        c = check_table(path, f"choice.{i}", c, TUNER_CHOICE)
        c["origin"] = c.pop("from")
        picks.append(TunerChoice(**c))
    return TunerLog(entries, tuple(picks),
                    _frozen(check_table(path, "channels", channels, TUNER_CHANNELS)))


def parse_entry(raw: dict, path: Path | str) -> Entry:
    """A checked ``Entry`` from a TOML document (numbers parsed as ``Decimal``)."""
    raw = dict(raw)
    tables = {"source": SOURCE, "system": SYSTEM, "launch": LAUNCH,
              "environment": ENVIRONMENT, "conventions": CONVENTIONS}
    top = {k: raw.pop(k) for k in list(raw) if k in TOP}
    kind = top.get("kind")
    parts = {k: raw.pop(k) for k in list(raw) if k in tables}
    series_raw = raw.pop("series", None)
    has_tuner = kind == "tuner-log" or any(k in raw for k in ("table", "choice", "channels"))
    tuner = _tuner(path, raw) if has_tuner else None
    if raw:
        raise ConfigError(f"{path}: unknown key {next(iter(raw))!r}")
    top = check_table(path, "", top, TOP)
    if KINDS[top["kind"]] != top["role"]:
        raise ConfigError(f"{path}: role = {top['role']!r}: a {top['kind']} entry has role "
                          f"{KINDS[top['kind']]!r}")
    if isinstance(path, Path) and top["name"] != path.stem:
        raise ConfigError(f"{path}: name = {top['name']!r}: must be the file name {path.stem!r}")
    needed = ["source", "system", "launch", "environment"]
    if top["kind"] in ("curve", "points"):
        needed.append("conventions")
    for key in needed:
        if key not in parts:
            raise ConfigError(f"{path}: missing table [{key}]")
    got = {k: check_table(path, k, v, tables[k]) for k, v in parts.items()}
    if not any(k in got["source"] for k in SOURCE_ANY):
        raise ConfigError(f"{path}: [source] needs one of {', '.join(SOURCE_ANY)}")
    conv = got.get("conventions")
    series: list[Series] = []
    if top["kind"] == "tuner-log":
        if series_raw is not None:
            raise ConfigError(f"{path}: a tuner-log has [[table]]/[[choice]], not [[series]]")
    else:
        if not isinstance(series_raw, list) or not series_raw:
            raise ConfigError(f"{path}: missing [[series]] (an array of tables with rows)")
        dtype_bytes = DTYPE_BYTES.get(conv["dtype"]) if conv else None
        labels = set()
        for i, s in enumerate(series_raw):
            s = check_table(path, f"series.{i}", s, SERIES)
            if s["label"] in labels:
                raise ConfigError(f"{path}: series.{i}.label = {s['label']!r}: duplicate")
            labels.add(s["label"])
            rows = _rows(path, f"series.{i}.rows", s.pop("rows"), dtype_bytes,
                         top["kind"] == "curve")
            series.append(Series(s["label"], s.get("implementation", "nccl"), s.get("op"),
                                 s.get("ranks"), s.get("placement"), s.get("algo"),
                                 s.get("proto"), rows, s.get("note")))
    return Entry(top["name"], top["kind"], top["role"], top["title"],
                 path if isinstance(path, Path) else None,
                 _frozen(got["source"]), _frozen(got["system"]), _frozen(got["launch"]),
                 _frozen(got["environment"]), _frozen(conv) if conv else None,
                 tuple(series), tuner, top.get("note"))


def load_entry(path: Path | str) -> Entry:
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_entry(raw, path)


def list_entries() -> list[str]:
    return sorted(p.stem for p in CORPUS_DIR.glob("*.toml"))


def load_corpus() -> tuple[Entry, ...]:
    """Every shipped entry, by name."""
    return tuple(load_entry(CORPUS_DIR / f"{name}.toml") for name in list_entries())


def find_entry(name_or_path: str | Path) -> Entry:
    """A shipped entry by name, or an entry file by path."""
    text = str(name_or_path)
    candidate = Path(text)
    if candidate.suffix == ".toml" or "/" in text or candidate.exists():
        if not candidate.exists():
            raise ConfigError(f"corpus entry {text}: no such file")
        return load_entry(candidate)
    shipped = CORPUS_DIR / f"{text}.toml"
    if not shipped.exists():
        raise ConfigError(f"unknown corpus entry {text!r} (shipped: {', '.join(list_entries())})")
    return load_entry(shipped)
