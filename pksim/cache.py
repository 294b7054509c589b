"""One small bounded cache for the simulator's prepared work (flows, plans, runs, baselines).

Entries are keyed by a tuple that starts with ``id(system)``; each entry keeps the system it
was made for, and a lookup checks it is still that one (an id can be reused once a system is
freed). Past ``size`` entries the oldest goes first (FIFO). The caches are exact: a hit returns
what the same computation returned before.
"""
from __future__ import annotations

from typing import Any, Hashable


class BoundedCache:
    """A FIFO-bounded dict of ``key -> (system, value)`` (see the module text)."""

    def __init__(self, size: int):
        self.size = size
        self._entries: dict[Hashable, tuple[Any, Any]] = {}

    def lookup(self, system: Any, key: Hashable) -> Any:
        """The value stored for ``key`` and ``system``, or None."""
        hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] is system else None

    def store(self, system: Any, key: Hashable, value: Any) -> Any:
        """Keep ``value`` for ``key`` (dropping the oldest entry past ``size``); returns it."""
        if len(self._entries) >= self.size:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (system, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
