"""A table entry (a what-if summary row, a sweep row) as every command's ``--json`` and every
API result's ``to_dict()`` give it."""
from __future__ import annotations

import math
from typing import Any


def json_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A table entry as every command's --json gives it: times in seconds as the entries
    hold them (``*_s`` keys, as in every file pksim writes), the schedule's label under
    ``label`` (``*_schedule`` under ``*_label``; predict and search give the schedule
    itself under ``schedule``), and ``null`` for what does not apply."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        if key == "schedule" and isinstance(value, str):
            key = "label"
        elif key.endswith("_schedule") and isinstance(value, str):
            key = key[: -len("schedule")] + "label"
        out[key] = None if value == "" else value
    return out
