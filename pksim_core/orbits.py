"""Which flows of a program are images of each other under a symmetry of the topology.

A rank relabelling from ``Topology.automorphisms`` maps every resource onto one of the same
class and capacity and every path onto one of the same latency. Where it also maps each
traffic pattern's moves (or transfers) onto the same pattern, it maps each flow onto a flow
of the same pattern that puts the same weights on the relabelled resources (a flow is a
function of its move's ranks, the topology and the schedule: pksim_core.mechanisms.flow). The orbits of the
relabellings that keep every pattern are therefore an equitable partition of the flows and
of the resources, which ``pksim_core.symmetry.reduce_orbits`` refines into the same classes as
the refinement of every flow, from one flow per orbit (a direct all-gather on 576 ranks: one
flow, not 576 flows of 576 stores each).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import fields
from itertools import accumulate, chain
from operator import attrgetter
from typing import Hashable, Sequence

from hwmodels.topology import Topology, resource
from pksim_core.cache import BoundedCache
from pksim_core.program import Move, Transfer

# Resource classes by what their index names (any other class: no relabelling is trusted).
# hwmodels.topology: nvl_*, nic_*, hbm, l2 and the switch tiers' sw, up, down, nvls;
# pksim_core.mechanisms.flow: issue, ce, cecmd (the copy commands of a GPU); pksim_core.nccl: copy.
RANK_INDEXED = frozenset({"nvl_out", "nvl_in", "nic_out", "nic_in", "issue", "ce", "copy"})
GPU_INDEXED = frozenset({"hbm", "l2", "cecmd"})
TIER_INDEXED = re.compile(r"(sw|up|down|nvls)(\d+)")

# A move's fields other than its ranks (issuer, sources, dests): a new field joins them,
# and tests/pksim_core/test_orbits.py asks for a decision if it holds ranks.
RANK_FIELDS = ("issuer", "sources", "dests")
_MOVE_REST = attrgetter(*(f.name for f in fields(Move) if f.name not in RANK_FIELDS))

TRAFFIC = BoundedCache(8)       # item lists as canonical forms, with what was derived from them
RELABELLED = BoundedCache(64)   # resources' images per topology and rank relabelling
Form = tuple   # an item's ranks in canonical order, and the number of its layout


def flow_orbits(topo: Topology, capacity: dict[str, float],
                items: dict[Hashable, Sequence[Move | Transfer]]
                ) -> tuple[dict[Hashable, list[int]], list[dict[str, str]]]:
    """For each pattern, the orbit of each of its items (the index of the orbit's first
    item), under the relabellings that keep every pattern and every capacity
    (``relabellings``); and those relabellings, as resource -> its image. Without any, every
    item is its own orbit."""
    traffic, kept = _kept(topo, capacity, items)
    return traffic.orbits([perm for perm, _ in kept]), [relabel for _, relabel in kept]


def relabellings(topo: Topology, capacity: dict[str, float],
                 items: dict[Hashable, Sequence[Move | Transfer]]
                 ) -> list[tuple[tuple[int, ...], dict[str, str]]]:
    """The topology's rank relabellings that keep every pattern and every capacity, each
    with its resource -> image: those of ``Topology.automorphisms`` and, where some rank has
    a role of its own (a root, a share of another size), those that keep each rank's role."""
    return _kept(topo, capacity, items)[1]


def _kept(topo: Topology, capacity: dict[str, float],
          items: dict[Hashable, Sequence[Move | Transfer]]):
    """relabellings, with the items' _Traffic: what depends only on the items and the
    topology is kept for the next call with the same item lists (a phase's moves are built
    once: pksim_core.workloads.phases)."""
    key = (id(topo.system), topo.world, topo.domains,
           tuple((k, id(its)) for k, its in items.items()))
    traffic = TRAFFIC.lookup(topo.system, key)
    if traffic is None:     # it keeps the item lists: their ids stay theirs
        traffic = TRAFFIC.store(topo.system, key, _Traffic(items))
    plain = topo.automorphisms()
    kept = traffic.kept(topo, plain, capacity, topo.diagonal_sources())
    if len(kept) < len(plain):
        colours = traffic.roles(topo.world)
        roles = topo.automorphisms(colours)
        kept += traffic.kept(topo, [p for p in roles if p not in plain], capacity,
                             topo.diagonal_sources(colours))
    return traffic, kept


class _Traffic:
    """The items of a program's patterns as canonical forms (_Layouts), and, as they are
    asked for, where each relabelling takes them and the orbits of a set of relabellings."""

    def __init__(self, items: dict[Hashable, Sequence[Move | Transfer]]):
        self.items = items
        self.layouts = _Layouts()
        self.patterns = {key: _Pattern([self.layouts.form(it) for it in its])
                         for key, its in items.items()}
        self._images: dict[tuple[int, ...], dict | None] = {}
        self._orbits: dict[tuple, dict[Hashable, list[int]]] = {}

    def images(self, perm: tuple[int, ...]) -> dict[Hashable, list[int]] | None:
        """Per pattern, where ``perm`` takes each distinct item; None where it does not keep
        every pattern."""
        if perm not in self._images:
            out: dict | None = {}
            for key, pattern in self.patterns.items():
                image = pattern.images(perm, self.layouts)
                if image is None:
                    out = None
                    break
                out[key] = image
            self._images[perm] = out
        return self._images[perm]

    def kept(self, topo: Topology, perms, capacity: dict[str, float], sources: dict | None = None
             ) -> list[tuple[tuple[int, ...], dict[str, str]]]:
        """The relabellings of ``perms`` that keep every capacity and every pattern, each
        with its resource -> image; a diagonal whose ``sources`` (Topology.diagonal_sources)
        are all kept is left out: it would add no orbit."""
        kept, held, sources = [], set(), sources or {}
        for perm in perms:      # the patterns first: relabelling every resource costs more
            if perm in sources and held.issuperset(sources[perm]):
                continue
            if self.images(perm) is None:
                continue
            relabel = _relabel_resources(topo, perm, capacity)
            if relabel is not None:
                kept.append((perm, relabel))
                held.add(perm)
        return kept

    def orbits(self, perms: list[tuple[int, ...]]) -> dict[Hashable, list[int]]:
        key = tuple(perms)
        if key not in self._orbits:
            out = {}
            for name, p in self.patterns.items():
                label = _components(len(p.distinct), [self._images[q][name] for q in perms])
                out[name] = [p.first[label[p.index[f]]] for f in p.forms]
            self._orbits[key] = out
        return self._orbits[key]

    def roles(self, world: int) -> tuple[int, ...]:
        """A colour per rank: ranks of one colour appear as often in each place (an issuer,
        a cold or warm source, a destination) of each pattern's items of each layout. A
        relabelling that keeps a pattern keeps these counts."""
        tally: Counter = Counter()      # (rank, (pattern, layout, place)) -> appearances
        for p, pattern in enumerate(self.patterns.values()):
            places = {layout: [(p, layout, place) for place in self.layouts.places[layout]]
                      for layout in {layout for _, layout in pattern.distinct}}
            tally.update(chain.from_iterable(
                zip(ranks, places[layout]) for (ranks, layout), count
                in zip(pattern.distinct, pattern.counts) for _ in range(count)))
        seen: list[list] = [[] for _ in range(world)]
        for (rank, where), n in tally.items():
            seen[rank].append((where, n))
        ids: dict = {}
        return tuple(ids.setdefault(tuple(sorted(s)), len(ids)) for s in seen)


class _Layouts:
    """Canonical forms of items. What decides an item's flow, ranks apart, with its ranks:
    a move's issuer, its sources the step reads cold and those it reads warm (Move.warm: the
    last ones), its destinations (the order inside each set changes no flow: pksim_core.mechanisms.flow adds
    every source's reads before every destination's writes, each a resource's own constant);
    a transfer's source and destination. A form is (those ranks in that order, each set
    sorted; the number of its layout: the sets' sizes and the rank-free fields)."""

    def __init__(self):
        self.ids: dict = {}
        self.cuts: list[tuple[tuple[int, int], ...]] = []   # per layout: the sets to sort
        self.places: list[tuple[int, ...]] = []     # per layout: each rank's set (0: first)

    def form(self, item: Move | Transfer) -> Form:
        if isinstance(item, Transfer):
            return (item.src, item.dst), self._layout(("transfer", item.nbytes, item.kind), (1,))
        sources, dests = item.sources, item.dests
        n = len(sources)
        cold = n - item.warm if item.warm else n
        shape = (cold, n - cold, len(dests), _MOVE_REST(item))
        layout = self._layout(shape, shape[:3])
        if not self.cuts[layout]:       # no set of two or more ranks to sort
            return (item.issuer, *sources, *dests), layout
        return (item.issuer, *sorted(sources[:cold]), *sorted(sources[cold:]),
                *sorted(dests)), layout

    def _layout(self, shape: tuple, sizes: tuple[int, ...]) -> int:
        """The number of layout ``shape``; a new one notes which of its sets of ranks
        (``sizes`` ranks each, after the first rank) hold two or more, to sort."""
        if shape not in self.ids:
            ends = list(accumulate(sizes, initial=1))
            self.ids[shape] = len(self.cuts)
            self.cuts.append(tuple((a, b) for a, b in zip(ends, ends[1:]) if b - a > 1))
            self.places.append((0,) + tuple(i + 1 for i, n in enumerate(sizes) for _ in range(n)))
        return self.ids[shape]

    def mapped(self, form: Form, at) -> Form:
        """``form`` with every rank r replaced by at(r)."""
        ranks, layout = form
        ranks = tuple(map(at, ranks))
        for a, b in self.cuts[layout]:
            ranks = ranks[:a] + tuple(sorted(ranks[a:b])) + ranks[b:]
        return ranks, layout


class _Pattern:
    """A pattern's items as forms: each distinct form once (in order of first appearance),
    with its position, how often it appears and its first item's index."""

    def __init__(self, forms: list[Form]):
        self.forms = forms
        counts: dict[Form, int] = {}
        first: dict[Form, int] = {}
        for i, f in enumerate(forms):
            counts[f] = counts.get(f, 0) + 1
            first.setdefault(f, i)
        self.distinct = list(first)
        self.index = {f: i for i, f in enumerate(self.distinct)}
        self.counts = [counts[f] for f in self.distinct]
        self.first = [first[f] for f in self.distinct]
        self.sorted_sets: bool | None = None    # whether a form has a set of ranks to sort

    def images(self, perm: tuple[int, ...], layouts: _Layouts) -> list[int] | None:
        """Where ``perm`` takes each distinct item (its position), or None where the pattern
        is not kept (an image missing, or appearing another number of times)."""
        at = perm.__getitem__
        if self.sorted_sets is None:
            self.sorted_sets = any(layouts.cuts[layout] for _, layout in self.distinct)
        if self.sorted_sets:
            mapped = (layouts.mapped(f, at) for f in self.distinct)
        else:       # no set to sort (one rank each): the ranks map one by one
            mapped = ((tuple(map(at, ranks)), layout) for ranks, layout in self.distinct)
        out = []
        for j in map(self.index.get, mapped):
            if j is None:       # stop at the first item without an image
                return None
            out.append(j)
        if len(self.distinct) < len(self.forms) and any(
                self.counts[j] != self.counts[i] for i, j in enumerate(out)):
            return None
        return out


def _components(n: int, maps: list[list[int]]) -> list[int]:
    """The orbits of 0..n-1 under the permutations ``maps``: each one's smallest member."""
    label = [-1] * n
    for start in range(n):
        if label[start] >= 0:
            continue
        label[start] = start
        stack = [start]
        while stack:
            x = stack.pop()
            for image in maps:
                y = image[x]
                if label[y] < 0:
                    label[y] = start
                    stack.append(y)
    return label


def _relabel_resources(topo: Topology, perm: tuple[int, ...], capacity: dict[str, float]
                       ) -> dict[str, str] | None:
    """Every resource of ``capacity`` -> its image under the rank relabelling ``perm``
    (through the GPUs and switch groups the ranks move with); None where a class is not
    known or a capacity would change. The images are kept per topology and relabelling."""
    key = (id(topo.system), topo.world, topo.domains, perm)
    images = RELABELLED.lookup(topo.system, key)
    if images is None:
        images = RELABELLED.store(topo.system, key, _Images(topo, perm, _names(topo)))
    out = images.relabel(capacity)
    if out is None:
        return None
    get = capacity.get
    for name, image in out.items():
        if get(image) != capacity[name]:
            return None
    return out if len(set(out.values())) == len(out) else None


NAMES = BoundedCache(8)         # resources' (class, index) per topology: see _Names


def _names(topo: Topology) -> _Names:
    key = (id(topo.system), topo.world, topo.domains)
    hit = NAMES.lookup(topo.system, key)
    return hit if hit is not None else NAMES.store(topo.system, key, _Names())


class _Names:
    """Resource names of one topology read once: each name's class and index, the name of
    each (class, index), and which index space a class's index is in (a rank, a GPU, a
    switch group of tier t; None: not known), so that an image is found by lookups."""

    def __init__(self):
        self.parsed: dict[str, tuple[str, int] | None] = {}
        self.named: dict[tuple[str, int], str] = {}
        self.spaces: dict[str, tuple[str, int] | None] = {}
        self._grouped: tuple | None = None

    def parse(self, name: str) -> tuple[str, int] | None:
        if name not in self.parsed:
            cls = getattr(name, "cls", None)
            hit = None if cls is None else (cls, int(name[len(cls) + 1:-1]))
            self.parsed[name] = hit
            if hit is not None:
                self.named.setdefault(hit, name)
        return self.parsed[name]

    def name(self, cls: str, index: int) -> str:
        key = (cls, index)
        if key not in self.named:
            self.named[key] = resource(cls, index)
        return self.named[key]

    def grouped(self, capacity: dict[str, float]) -> list[tuple[str, list[tuple[str, int]]]] | None:
        """The names of ``capacity`` by class, each with its index (None: a name without a
        class): read once for the relabellings of one capacity in turn."""
        if self._grouped is not None and self._grouped[0] is capacity \
                and self._grouped[1] == len(capacity):
            return self._grouped[2]
        by_class: dict[str, list[tuple[str, int]]] = {}
        out: list | None = []
        for name in capacity:
            parsed = self.parse(name)
            if parsed is None:
                out = None
                break
            by_class.setdefault(parsed[0], []).append((name, parsed[1]))
        if out is not None:
            out = list(by_class.items())
        self._grouped = (capacity, len(capacity), out)
        return out

    def space(self, cls: str) -> tuple[str, int] | None:
        if cls not in self.spaces:
            tier = TIER_INDEXED.fullmatch(cls)
            self.spaces[cls] = (("rank", 0) if cls in RANK_INDEXED else
                                ("gpu", 0) if cls in GPU_INDEXED else
                                ("tier", int(tier[2])) if tier is not None else None)
        return self.spaces[cls]


class _Images:
    """Resources' images under one rank relabelling, found as they are asked for."""

    def __init__(self, topo: Topology, perm: tuple[int, ...], names: _Names):
        locs = topo.locations
        self.perm, self.names = perm, names
        self.gpus = {locs[r].gpu: locs[perm[r]].gpu for r in range(topo.world)}
        self.groups = [{loc.groups[t]: locs[perm[loc.rank]].groups[t] for loc in locs}
                       for t in range(len(topo.system.domain.switch_tiers))]
        self.seen: dict[str, str | None] = {}

    def relabel(self, capacity: dict[str, float]) -> dict[str, str] | None:
        """Every name of ``capacity`` -> its image, as ``of`` gives them one by one, a class
        at a time (None: a name whose image is not known)."""
        grouped = self.names.grouped(capacity)
        if grouped is None:
            return None
        out: dict[str, str] = {}
        name_of = self.names.name
        for cls, members in grouped:
            space = self.names.space(cls)
            if space is None:
                return None
            kind, tier = space
            if kind == "rank":
                table = self.perm
            elif kind == "gpu":
                table = self.gpus
            elif 0 < tier <= len(self.groups):
                table = self.groups[tier - 1]
            else:
                return None
            for name, index in members:
                out[name] = name_of(cls, table[index])
        return {name: out[name] for name in capacity}    # in the order of the names

    def of(self, name: str) -> str | None:
        """The image of resource ``name`` (None: a class whose index is not known)."""
        if name not in self.seen:
            self.seen[name] = self._image(name)
        return self.seen[name]

    def _image(self, name: str) -> str | None:
        parsed = self.names.parse(name)
        if parsed is None:
            return None
        cls, index = parsed
        space = self.names.space(cls)
        if space is None:
            return None
        kind, tier = space
        if kind == "rank":
            return self.names.name(cls, self.perm[index])
        if kind == "gpu":
            return self.names.name(cls, self.gpus[index])
        if 0 < tier <= len(self.groups):
            return self.names.name(cls, self.groups[tier - 1][index])
        return None


def equal_capacities(caps: dict, topo: Topology | None = None, extra: dict = ()) -> tuple:
    """What of the capacities the orbits depend on (a relabelling keeps a resource's class and
    must keep its capacity): the classes, and the capacities of each class whose instances
    differ (one figure sets a class's instances alike, so mostly none). With ``topo``,
    ``caps`` is its capacities updated with ``extra`` (names of other classes), and a
    topology's resources of one class have one capacity (``Topology.class_capacities``):
    only ``extra``'s names are read one by one."""
    first: dict[str, float] = dict(topo.class_capacities()) if topo is not None else {}
    mixed: set[str] = set()
    names = extra if topo is not None else caps
    # each distinct (class, capacity) once, in the order of the names (9,216 ranks: 65,000
    # resources, a few dozen pairs)
    try:
        classes = list(map(_CLS, names))
    except AttributeError:      # a name without a class stands for its own
        classes = [getattr(name, "cls", name) for name in names]
    for cls, c in dict.fromkeys(zip(classes, names.values())):
        if first.setdefault(cls, c) != c:
            mixed.add(cls)
    if not mixed:
        return tuple(sorted(first)), ()
    return (tuple(sorted(first)),
            tuple(sorted((n, c) for n, c in caps.items() if getattr(n, "cls", n) in mixed)))


_CLS = attrgetter("cls")


__all__ = ["equal_capacities", "flow_orbits", "relabellings", "RANK_FIELDS"]
