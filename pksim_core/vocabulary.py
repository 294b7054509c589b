"""One vocabulary for every JSON and CSV output (docs/outputs.md): one name per concept, the
unit in the key (times ``*_s``, sizes ``*_bytes``, bandwidths ``*_GBps``), the schedule's
label under ``label`` (``<impl>_label``, ``baseline_label``) and the schedule itself under
``schedule``.

Keys renamed to that rule keep their old name for one release: ``renamed`` puts the new
key where the old one stood and writes the old one again at the end, with the same value,
so scripts that read the old name go on working until the next release drops it."""
from __future__ import annotations

from typing import Any, Iterable

# Every key renamed in this release: old name -> new name (docs/outputs.md, "Renamed keys").
RENAMED: dict[str, str] = {
    "nbytes": "size_bytes",
    "size_B": "size_bytes",
    "bytes": "size_bytes",
    "breakdown": "busy_s",
    "depends_on_assumed": "assumed",
    "seconds": "wall_s",
    "schedule": "label",
    "baseline_schedule": "baseline_label",
    "pk_schedule": "pk_label",
    "nccl_schedule": "nccl_label",
    "binding": "busiest_resource",
    "binding_group": "busiest_group",
    "same_binding": "same_busiest_group",
    "size": "x",
    "baseline_pct": "baseline_pct_of_roofline",
    "best_pct": "best_pct_of_roofline",
    "baseline_us": "baseline_s",
    "best_us": "best_s",
    "roofline_us": "roofline_s",
    "issued_us": "issued_s",
    "bound": "bound_resource",
}
# A timeline event's or a trace span's bytes are what it moves, not a buffer's size.
MOVED = {"nbytes": "moved_bytes", "bytes": "moved_bytes"}


def _names(old_keys: Iterable[str] | dict[str, str]) -> dict[str, str]:
    return dict(old_keys) if isinstance(old_keys, dict) else {k: RENAMED[k] for k in old_keys}


def renamed(entry: dict[str, Any], old_keys: Iterable[str] | dict[str, str]) -> dict[str, Any]:
    """``entry`` with each of ``old_keys`` (those it has) under its new name (``RENAMED``,
    or the mapping given), in the old key's place, and the old name again at the end as
    an alias."""
    names = {k: v for k, v in _names(old_keys).items() if k in entry}
    if not names:
        return entry
    out = {names.get(k, k): v for k, v in entry.items()}
    out.update((k, entry[k]) for k in names)
    return out


def with_aliases(entry: dict[str, Any], old_keys: Iterable[str] | dict[str, str]
                 ) -> dict[str, Any]:
    """``entry`` (under the new names) with each of ``old_keys`` added at the end, holding
    its new name's value (``RENAMED``, or the mapping given): what a file written by an
    earlier version had."""
    names = _names(old_keys)
    return entry | {old: entry[new] for old, new in names.items() if new in entry}


def aliased_columns(columns: Iterable[str], old_keys: Iterable[str] | dict[str, str]
                    ) -> list[str]:
    """CSV columns under their new names, the old names (aliases) after them."""
    columns = list(columns)
    names = {k: v for k, v in _names(old_keys).items() if k in columns}
    return [names.get(c, c) for c in columns] + list(names)


def read(record: dict[str, Any], new: str, default: Any = None) -> Any:
    """A value by its new name, or by an old one (files of earlier versions)."""
    if new in record:
        return record[new]
    for old, name in RENAMED.items():
        if name == new and old in record:
            return record[old]
    return default
