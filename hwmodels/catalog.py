"""Loading system files: strict parsing, ``inherits``, dotted overrides, SI conversion.

A system file is TOML nested like the hardware. Every figure needs a source and a
provenance tag, given either for its whole table (``source = ...``,
``provenance = ...``) or on the figure itself
(``bandwidth_GBps = { value = 4800, source = "...", provenance = "datasheet" }``).
A table may also carry a free-text ``note`` (used for stated assumptions).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable

from hwmodels import system as system_module
from hwmodels.checks import check_system
from hwmodels.errors import ConfigError
from hwmodels.resources import systems_dir
from hwmodels.system import PROVENANCE_TAGS, Provenance, System

SYSTEMS_DIR = systems_dir()
_TABLE_META = ("source", "provenance", "note")
_TOP_KEYS = ("name", "description", "inherits", "calibrated", "calibration")
# Top-level tables and the dataclass each is loaded into.
_TOP_TABLES = {"gpu": "GpuSpec", "domain": "DomainSpec", "scaleout": "ScaleoutSpec"}


def list_systems() -> list[str]:
    """Names of the shipped systems, sorted."""
    return sorted(p.stem for p in SYSTEMS_DIR.glob("*.toml"))


def is_bare_name(ref: str) -> bool:
    """A name, not a path: no ``/`` and no ``.toml``. A bare name that is shipped means the
    shipped file even where a file or folder of that name is here (``./name`` names that)."""
    return "/" not in ref and not ref.endswith(".toml")


def system_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A shipped system's file, or a path to a user's file."""
    candidate = Path(name_or_path)
    shipped = SYSTEMS_DIR / f"{name_or_path}.toml"
    if is_bare_name(name_or_path) and shipped.exists():
        return shipped
    if not is_bare_name(name_or_path) or candidate.exists():
        if not candidate.is_absolute() and relative_to is not None and not candidate.exists():
            candidate = relative_to / candidate
        if not candidate.exists():
            raise ConfigError(f"system file {name_or_path}: no such file")
        if candidate.is_dir():
            raise ConfigError(f"system file {name_or_path}: is a folder, not a .toml file")
        return candidate
    raise ConfigError(f"unknown system {name_or_path!r} (shipped: {', '.join(list_systems())})")


def _schema(cls_name: str):
    return getattr(system_module, cls_name)


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None


def _check_tag(path: Path, key: str, tag: Any) -> str:
    if tag not in PROVENANCE_TAGS:
        raise ConfigError(f"{path}: {key}: provenance {tag!r} is not one of "
                          f"{', '.join(PROVENANCE_TAGS)}")
    return tag


def _unknown(path: Path, dotted: str, key: str, known: Iterable[str]) -> ConfigError:
    known = list(known)
    stem = key.rsplit("_", 1)[0]
    same_stem = [k for k in known if k.rsplit("_", 1)[0] == stem]
    hint = f" (this table takes {same_stem[0]}: check the unit)" if same_stem else ""
    return ConfigError(f"{path}: unknown key {dotted!r}{hint}")


def _split_table(path: Path, cls: type, raw: dict, prefix: str,
                 values: dict, prov: dict[str, Provenance], origin: dict[str, Path]) -> None:
    """Check one file's table against ``cls``; record its values and each figure's provenance."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {prefix.rstrip('.')} must be a table, got {raw!r}")
    fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
    table_source = raw.get("source")
    table_tag = raw.get("provenance")
    if table_tag is not None:
        _check_tag(path, prefix + "provenance", table_tag)
    for key in raw:
        if key not in _TABLE_META and key not in fields:
            raise _unknown(path, prefix + key, key, fields)
    for key, item in raw.items():
        dotted = prefix + key
        if key in _TABLE_META:
            continue
        meta = fields[key].metadata
        if meta.get("table"):
            if meta.get("many"):
                if not isinstance(item, list):
                    raise ConfigError(f"{path}: {dotted} must be an array of tables ([[{dotted}]])")
                values[key] = []
                for index, entry in enumerate(item):
                    sub: dict = {}
                    _split_table(path, _schema(fields[key].type.split("[")[1].split(",")[0]),
                                 entry, f"{dotted}.{index}.", sub, prov, origin)
                    values[key].append(sub)
            else:
                sub = values.setdefault(key, {})
                _split_table(path, _schema(fields[key].type), item, dotted + ".", sub, prov, origin)
            continue
        source, tag = table_source, table_tag
        if isinstance(item, dict):
            extra = set(item) - {"value", "source", "provenance", "note"}
            if extra or "value" not in item:
                raise ConfigError(f"{path}: {dotted}: a figure table takes value, source, "
                                  f"provenance and note, got {sorted(item)}")
            source = item.get("source", source)
            tag = _check_tag(path, dotted, item.get("provenance", tag)) if "provenance" in item else tag
            item = item["value"]
        if meta["kind"] is not str and (source is None or tag is None):
            raise ConfigError(f"{path}: {dotted} has no source/provenance (give them on the "
                              f"figure or its table)")
        values[key] = item
        origin[dotted] = path
        if source is not None and tag is not None:
            prov[dotted] = Provenance(str(source), str(tag))


def _load_file(path: Path) -> tuple[dict, dict, dict, dict]:
    """One file -> (top-level meta, values, provenance, origin), not yet merged."""
    raw = _read(path)
    top = {k: raw[k] for k in _TOP_KEYS if k in raw}
    values: dict = {}
    prov: dict[str, Provenance] = {}
    origin: dict[str, Path] = {}
    for key, item in raw.items():
        if key in _TOP_KEYS:
            continue
        if key not in _TOP_TABLES:
            raise _unknown(path, key, key, list(_TOP_KEYS) + list(_TOP_TABLES))
        values[key] = {}
        _split_table(path, _schema(_TOP_TABLES[key]), item, key + ".", values[key], prov, origin)
    return top, values, prov, origin


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, item in over.items():
        if isinstance(item, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], item)
        else:
            out[key] = copy.deepcopy(item)
    return out


def _resolve(path: Path, chain: tuple[Path, ...]
             ) -> tuple[dict, dict, dict, dict, tuple[str, ...]]:
    """(top-level meta, values, provenance, origin, the files: ``path`` first, then its
    parents) of ``path`` with its parents merged in."""
    if path.resolve() in chain:
        names = " -> ".join(p.stem for p in chain + (path.resolve(),))
        raise ConfigError(f"{path}: inheritance cycle {names}")
    top, values, prov, origin = _load_file(path)
    parent_name = top.get("inherits")
    if parent_name is None:
        return top, values, prov, origin, (str(path),)
    if not isinstance(parent_name, str):
        raise ConfigError(f"{path}: inherits must be a system name, got {parent_name!r}")
    try:
        parent_path = system_path(parent_name, relative_to=path.parent)
    except ConfigError:
        raise ConfigError(f"{path}: inherits unknown system {parent_name!r}") from None
    p_top, p_values, p_prov, p_origin, files = _resolve(parent_path, chain + (path.resolve(),))
    for key in ("calibrated", "calibration"):   # a child of a calibrated file is calibrated
        if key not in top and key in p_top:
            top[key] = p_top[key]
    if "switch_tier" in values.get("domain", {}):  # an array of tables replaces the parent's
        p_prov = {k: v for k, v in p_prov.items() if not k.startswith("domain.switch_tier.")}
        p_values.get("domain", {}).pop("switch_tier", None)
    return (top, _merge(p_values, values), {**p_prov, **prov}, {**p_origin, **origin},
            (str(path),) + files)


def _parse_literal(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(values: dict, prov: dict, setting: str, what: str = "--set") -> None:
    """Apply ``dotted.key=value`` (e.g. ``gpu.nvlink.link_bandwidth_GBps=50``) in place."""
    key, sep, text = setting.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{what}: expected KEY=VALUE, got {setting!r}")
    parts = key.split(".")
    if parts[0] not in _TOP_TABLES:
        raise ConfigError(f"{what}: unknown key {key!r}")
    cls = _schema(_TOP_TABLES[parts[0]])
    node: Any = values.setdefault(parts[0], {})
    for i, part in enumerate(parts[1:], start=1):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{what}: {key!r}: no entry {part!r} (there are {len(node)})")
            node = node[int(part)]
            continue
        fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
        if part not in fields:
            raise ConfigError(f"{what}: unknown key {key!r}")
        meta = fields[part].metadata
        if meta.get("table"):
            if last:
                raise ConfigError(f"{what}: {key!r} is a table, not a figure")
            cls_name = fields[part].type
            cls = _schema(cls_name.split("[")[1].split(",")[0] if meta.get("many") else cls_name)
            node = node.setdefault(part, [] if meta.get("many") else {})
            continue
        if not last:
            raise ConfigError(f"{what}: unknown key {key!r}")
        node[part] = _parse_literal(text.strip())
        prov[key] = Provenance(f"{what} {setting}", "override")


def _build(cls: type, raw: dict, prefix: str, where_of: Callable[[str], str]) -> Any:
    kwargs = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        key = meta["key"]
        dotted = prefix + key
        where = where_of(dotted)
        if key not in raw:
            raise ConfigError(f"{where}: missing key {dotted!r}")
        item = raw[key]
        if meta.get("table"):
            if meta.get("many"):
                sub_cls = _schema(f.type.split("[")[1].split(",")[0])
                kwargs[f.name] = tuple(_build(sub_cls, entry, f"{dotted}.{i}.", where_of)
                                       for i, entry in enumerate(item))
            else:
                kwargs[f.name] = _build(_schema(f.type), item, dotted + ".", where_of)
            continue
        kind = meta["kind"]
        if kind is str:
            if not isinstance(item, str):
                raise ConfigError(f"{where}: {dotted} must be text, got {item!r}")
            if meta.get("choices") and item not in meta["choices"]:
                raise ConfigError(f"{where}: {dotted} = {item!r} is not one of "
                                  f"{', '.join(meta['choices'])}")
            kwargs[f.name] = item
            continue
        if kind is bool:
            if not isinstance(item, bool):
                raise ConfigError(f"{where}: {dotted} must be true or false, got {item!r}")
            kwargs[f.name] = item
            continue
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ConfigError(f"{where}: {dotted} must be a number, got {item!r}")
        if not math.isfinite(item):
            raise ConfigError(f"{where}: {dotted} = {item!r} must be a finite number")
        if kind is int and item != int(item):
            raise ConfigError(f"{where}: {dotted} must be a whole number, got {item!r}")
        lo, hi = meta["lo"], meta["hi"]
        if item < lo or (meta["lo_open"] and item == lo):
            relation = "above" if meta["lo_open"] else "at least"
            raise ConfigError(f"{where}: {dotted} = {item!r} must be {relation} {lo:g}")
        if hi is not None and item > hi:
            raise ConfigError(f"{where}: {dotted} = {item!r} must be at most {hi:g}")
        least, most = meta["plausible"]
        if item != 0 and not least <= item <= most:
            none = ", or 0: none" if lo == 0 and not meta["lo_open"] else ""
            bounds = f"at most {most:g}" if least == 0 else f"{least:g} to {most:g}{none}"
            raise ConfigError(f"{where}: {dotted} = {item!r} is outside the plausible range "
                              f"({bounds})")
        kwargs[f.name] = int(item) if kind is int else float(item) * meta["factor"]
    return cls(**kwargs)


def load_system(name_or_path: str, overrides: Iterable[str] = ()) -> System:
    """Load, inherit, override, check and convert a system to SI."""
    path = system_path(name_or_path)
    top, values, prov, origin, files = _resolve(path, ())
    for setting in overrides:
        apply_override(values, prov, setting)
    for key in ("name", "description"):
        if not isinstance(top.get(key), str) or not top.get(key):
            raise ConfigError(f"{path}: missing key {key!r}")
    for key in ("calibrated", "calibration"):
        if key in top and not isinstance(top[key], dict):
            raise ConfigError(f"{path}: {key} must be a table, got {top[key]!r}")
    def where_of(dotted: str) -> str:
        """Where a figure came from: the ``--set`` that gave it, or the file (a parent's
        for an inherited figure)."""
        given = prov.get(dotted)
        if given is not None and given.tag == "override":
            return given.source
        return str(origin.get(dotted, path))

    specs = {name: _build(_schema(cls), values.get(name, {}), name + ".", where_of)
             for name, cls in _TOP_TABLES.items()}
    system = System(name=top["name"], description=top["description"], path=str(path),
                    inherits=top.get("inherits"), provenance=MappingProxyType(prov),
                    calibrated=top.get("calibrated"), calibration=top.get("calibration"),
                    **specs)
    check_system(system, where_of, files)
    return system
