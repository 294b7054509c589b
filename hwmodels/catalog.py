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

from hwmodels import profile as kernel_profile
from hwmodels import system as system_module
from hwmodels.checks import check_system
from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from hwmodels.resources import systems_dir
from hwmodels.system import PROVENANCE_TAGS, Provenance, System, split_figure

SYSTEMS_DIR = systems_dir()
_TABLE_META = ("source", "provenance", "note")
_TOP_KEYS = ("name", "description", "inherits", "calibrated", "calibration", "profile")
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
    if not name_or_path.strip():
        raise ConfigError(f"system {name_or_path!r}: give a shipped system's name or a system "
                          f"file (shipped: {', '.join(list_systems())})")
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
    return read_toml(path, "system file")


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
    fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)
              if not f.metadata.get("derived")}
    table_source = raw.get("source")
    table_tag = raw.get("provenance")
    if table_tag is not None:
        _check_tag(path, prefix + "provenance", table_tag)
    legacy = prefix == "gpu.transfer."       # kernel figures a file held before the split
    for key in raw:
        if key not in _TABLE_META and key not in fields and not (
                legacy and key in kernel_profile.LOCAL_FIELDS):
            raise _unknown(path, prefix + key, key, fields)
    for key, item in raw.items():
        dotted = prefix + key
        if key in _TABLE_META:
            continue
        if legacy and key in kernel_profile.LOCAL_FIELDS:
            _migrate(path, key, item, table_source, table_tag, values, prov, origin)
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
        item, source, tag = split_figure(str(path), dotted, item, table_source, table_tag,
                                         required=meta["kind"] is not str)
        values[key] = item
        origin[dotted] = path
        if source is not None and tag is not None:
            prov[dotted] = Provenance(str(source), str(tag))


def _migrate(path: Path, key: str, item: Any, source: Any, tag: Any, values: dict,
             prov: dict[str, Provenance], origin: dict[str, Path]) -> None:
    """A kernel figure a system file gives in ``[gpu.transfer]`` under its old key (one GPU's
    unit, e.g. ``tma_move_base_ns_per_KiB``): kept as an override of the system's kernel
    profile on this GPU (``values["kernel"]`` of the table, read by ``_kernel``), provenance
    under the profile's key (``profile.tma_move_base_cycles_per_KiB``)."""
    dotted = f"profile.{kernel_profile.LOCAL_FIELDS[key].metadata['portable']}"
    item, source, tag = split_figure(str(path), f"gpu.transfer.{key}", item, source, tag)
    meta = kernel_profile.LOCAL_FIELDS[key].metadata
    values.setdefault("kernel", {})[key] = kernel_profile.check_range(
        str(path), f"gpu.transfer.{key}", meta, item)
    origin[dotted] = path
    prov[dotted] = Provenance(f"{source} (gpu.transfer.{key} of {path.name}, an override of "
                              f"the kernel profile)", str(tag))


def _load_file(path: Path) -> tuple[dict, dict, dict, dict]:
    """One file -> (top-level meta, values, provenance, origin), not yet merged: read and
    checked once per version of the file (a what-if or a sensitivity check loads one system
    with other overrides many times), a copy each call."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        _LOADED[key] = _check_file(path)
        while len(_LOADED) > 64:
            _LOADED.pop(next(iter(_LOADED)))
    top, values, prov, origin = _LOADED[key]
    return dict(top), copy.deepcopy(values), dict(prov), dict(origin)


_LOADED: dict[tuple, tuple[dict, dict, dict, dict]] = {}


def _check_file(path: Path) -> tuple[dict, dict, dict, dict]:
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
    if "profile" in top:
        top["profile_file"] = str(path)        # a profile's path is relative to its file
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
    # a child of a calibrated file is calibrated; it uses its parent's kernel profile
    for key in ("calibrated", "calibration", "profile", "profile_file"):
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
    if parts[0] == "profile" and len(parts) == 2:        # a kernel-profile figure, portable
        values.setdefault("profile", {})[parts[1]] = kernel_profile.check_value(
            f"{what} {setting}", parts[1], _parse_literal(text.strip()))
        prov[key] = Provenance(f"{what} {setting}", "override")
        return
    if len(parts) == 3 and parts[:2] == ["gpu", "transfer"] \
            and parts[2] in kernel_profile.LOCAL_FIELDS:    # its old key, one GPU's unit
        meta = kernel_profile.LOCAL_FIELDS[parts[2]].metadata
        values.setdefault("gpu", {}).setdefault("transfer", {}).setdefault(
            "kernel", {})[parts[2]] = \
            kernel_profile.check_range(f"{what} {setting}", key, meta,
                                       _parse_literal(text.strip()))
        prov[f"profile.{meta['portable']}"] = Provenance(f"{what} {setting}", "override")
        return
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
        fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)
                  if not f.metadata.get("derived")}
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
        if meta.get("derived"):           # GpuSpec.kernel: load_system sets it (_kernel)
            kwargs[f.name] = None
            continue
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
    kernel, use = _kernel(path, top, values, prov, specs["gpu"])
    specs["gpu"] = dataclasses.replace(specs["gpu"], kernel=kernel)
    system = System(name=top["name"], description=top["description"], path=str(path),
                    inherits=top.get("inherits"), provenance=MappingProxyType(prov),
                    calibrated=top.get("calibrated"), calibration=top.get("calibration"),
                    profile=use, **specs)
    check_system(system, where_of, files)
    return system


def _kernel(path: Path, top: dict, values: dict, prov: dict, gpu) -> tuple:
    """The system's kernel figures on its GPU (``hwmodels.profile.KernelSpec``) and which
    profile gave them (``ProfileUse``): the profile its file (or a parent) names, ``profile =
    { name = "...", why = "..." }``, else the one the rule picks for its architecture
    (``hwmodels.profile.nearest_profile``); overridden by old ``gpu.transfer`` kernel keys of
    its files and by ``--set profile.KEY=VALUE``. Each figure's provenance goes under
    ``profile.KEY``: the profile's, tagged assumed where the profile was fitted on another
    GPU than this calibrated system's (it is carried)."""
    ref = top.get("profile")
    if ref is None:
        name = kernel_profile.nearest_profile(gpu.architecture)
        ref = {"name": name, "why": f"not named: the rule's choice for {gpu.architecture} "
                                    f"(docs/design.md, kernel profiles, P1)"}
        where = path
    else:
        where = Path(top.get("profile_file", path))
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) \
            or set(ref) - {"name", "why"}:
        raise ConfigError(f"{where}: profile must be {{ name = \"pk-hopper\", why = \"...\" }} "
                          f"(a kernel profile's name or path, and why it applies), got {ref!r}")
    profile = kernel_profile.load_profile(ref["name"], where.parent)
    local = dict(values.get("gpu", {}).get("transfer", {}).get("kernel", {}))   # _migrate
    for key, value in values.get("profile", {}).items():        # --set profile.KEY=VALUE
        meta = kernel_profile.FIELDS[key].metadata
        local[meta["key"]] = kernel_profile.local_value(meta, value, gpu)
    calibrated = top.get("calibrated") or {}
    carried = calibrated.get("device") != profile.device
    for key, given in profile.provenance.items():
        dotted = f"profile.{key}"
        if dotted in prov:                                      # overridden
            continue
        source = f"kernel profile {profile.name} (fitted on {profile.device}): {given.source}"
        prov[dotted] = Provenance(source, "assumed" if carried else given.tag)
    use = kernel_profile.ProfileUse(profile.name, profile.path, str(ref.get("why", "")),
                                    profile.device, carried)
    return kernel_profile.kernel_spec(profile, gpu, local), use
