"""One small bounded cache for the simulator's prepared work (topologies, flows, plans, runs,
baselines).

Entries are keyed by a tuple that starts with ``id(system)``; each entry keeps the system it
was made for, and a lookup checks it is still that one (an id can be reused once a system is
freed). Past ``size`` entries the oldest goes first (FIFO). The caches are exact: a hit returns
what the same computation returned before.
"""
from __future__ import annotations

import threading
from typing import Any, Hashable

from hwmodels.system import System
from hwmodels.topology import Topology


class BoundedCache:
    """A FIFO-bounded dict of ``key -> (system, value)`` (see the module text)."""

    def __init__(self, size: int):
        self.size = size
        self._entries: dict[Hashable, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def lookup(self, system: Any, key: Hashable) -> Any:
        """The value stored for ``key`` and ``system``, or None."""
        hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] is system else None

    def store(self, system: Any, key: Hashable, value: Any) -> Any:
        """Keep ``value`` for ``key`` (dropping the oldest entry past ``size``); returns it."""
        with self._lock:    # a Dask worker's threads share the caches
            while len(self._entries) >= self.size:
                self._entries.pop(next(iter(self._entries)), None)
            self._entries[key] = (system, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


TOPOLOGIES = BoundedCache(16)   # the topology per (system, world, domains): see topology


def topology(system: System, world: int | None = None, domains: int = 1) -> Topology:
    """``Topology.build(system, world, domains)``, built once per system and shape: every
    candidate of a search, its bounds and NCCL's pick beside it share one (at 16 x NVL576 a
    build makes 56 000 resources; a search asked for it about sixty times). A Topology is
    never changed after its build; what it derives (paths, automorphisms) it keeps itself."""
    key = (id(system), world, domains)
    hit = TOPOLOGIES.lookup(system, key)
    if hit is None:
        hit = TOPOLOGIES.store(system, key, Topology.build(system, world, domains))
    return hit
