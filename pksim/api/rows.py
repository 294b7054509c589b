"""A table entry (a what-if summary row, a sweep row) as every command's ``--json`` and every
API result's ``to_dict()`` give it."""
from __future__ import annotations

import math
from typing import Any, Sequence

from pksim_core.vocabulary import with_aliases


def json_entry(entry: dict[str, Any], old_keys: Sequence[str] = ()) -> dict[str, Any]:
    """A table entry as every command's --json gives it (docs/outputs.md): times in seconds
    as the entries hold them (``*_s`` keys, as in every file pksim writes), the schedule's
    label under ``label`` (``<impl>_label``), ``null`` for what does not apply, and the old
    names of ``old_keys`` after the new ones for one release (pksim_core.vocabulary)."""
    out: dict[str, Any] = {}
    for key, value in with_aliases(entry, old_keys).items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = None if value == "" else value
    return out
