"""The topology graph of a system: GPUs, switch groups per tier, NVLink ports, NICs.

Every capacity is one direction of one physical thing, in bytes per second. A path
is the list of resources a transfer crosses plus its latency; the simulator turns
a path into a fluid flow. Resource names are ``class[index]`` (``nvl_out[3]``) and carry
their class (``ResourceName.cls``: ``nvl_out``), so that symmetric simulations and reports
can reason about classes without parsing names.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hwmodels.errors import ConfigError
from hwmodels.system import System


class ResourceName(str):
    """A resource's name that carries its class: ``resource("nvl_out", 3)`` is the string
    ``"nvl_out[3]"`` with ``cls == "nvl_out"``; a symmetry class of such resources
    (``pksim_core.symmetry``) is another name of the same class."""
    cls: str

    def __new__(cls, name: str, resource_class: str) -> "ResourceName":
        obj = super().__new__(cls, name)
        obj.cls = resource_class
        return obj

    def __reduce__(self):
        return (ResourceName, (str(self), self.cls))


_NAMES: dict = {}    # (cls, index) -> its name, made once per process (see resource)


def resource(cls: str, index) -> ResourceName:
    """The name of instance ``index`` of resource class ``cls``: ``cls[index]``. Made once per
    process and shared: a 4,096-rank topology names 42,000 resources, and ``pksim predict``
    builds one again for each guessed figure it swings."""
    key = (cls, index)
    name = _NAMES.get(key)
    if name is None:
        name = _NAMES[key] = ResourceName(f"{cls}[{index}]", cls)
    return name


@dataclass(frozen=True)
class Resource:
    name: str          # "nvl_out[3]"
    cls: str           # "nvl_out"
    capacity_Bps: float
    doc: str = ""


@dataclass(frozen=True)
class Path:
    """A path between two GPUs (or a GPU and a switch's reduction unit): the resources a
    transfer crosses, and its latencies, which the path owns: one way (a store's bytes
    reaching the far end), a round trip (a load: out and back) and a drain (the writes of a
    phase landing before it may signal)."""
    resources: tuple[str, ...]
    one_way_s: float
    hops: tuple[str, ...] = ()   # human-readable node sequence, for path queries

    @property
    def round_trip_s(self) -> float:
        return 2 * self.one_way_s

    @property
    def drain_s(self) -> float:
        """A store's writes have landed at the far end one way after they left."""
        return self.one_way_s


@dataclass(frozen=True)
class Location:
    """Where a rank sits: physical GPU index, domain, and its group at each switch tier."""
    rank: int
    gpu: int
    domain: int
    groups: tuple[int, ...]   # group index (global) at tier 1, 2, ...


@dataclass
class Topology:
    system: System
    domains: int
    world: int
    locations: tuple[Location, ...]
    resources: dict[str, Resource] = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)
    # what follows from the layout alone (symmetries, shape, span): shared by re-priced copies
    _shared: dict = field(default_factory=dict, repr=False, compare=False)

    # ---- construction -------------------------------------------------------------
    @classmethod
    def build(cls, system: System, world: int | None = None, domains: int = 1) -> "Topology":
        per_domain = system.domain.gpus_per_domain
        if domains < 1:
            raise ConfigError(f"--domains must be at least 1, got {domains}")
        capacity = per_domain * domains
        world = capacity if world is None else world
        if world < 1:
            raise ConfigError(f"--world must be at least 1, got {world}")
        if world > capacity:
            raise ConfigError(f"--world {world} is larger than the cluster: {system.name} has "
                              f"{per_domain} GPUs per domain x {domains} domain(s) = {capacity}")
        layout = _layout(system, world, domains)
        base = _LAYOUTS.get(layout)
        if base is not None:
            return base._repriced(system)
        virtual = system.domain.fabric == "shared-memory"
        tiers = system.domain.switch_tiers
        locations = []
        for rank in range(world):
            gpu = 0 if virtual else rank
            domain = rank // per_domain
            local = rank % per_domain
            groups = tuple(domain * (per_domain // t.gpus_per_group) + local // t.gpus_per_group
                           for t in tiers)
            locations.append(Location(rank, gpu, domain, groups))
        topo = cls(system, domains, world, tuple(locations))
        topo._add_resources()
        while len(_LAYOUTS) >= _KEPT_LAYOUTS:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
        _LAYOUTS[layout] = topo
        return topo

    def _repriced(self, system: System) -> "Topology":
        """The topology of ``system``, whose layout (``_layout``) is this one's: the same
        ranks and resources, each class's capacity from ``system``'s figures. What the
        layout alone decides (the symmetries, the shape) is shared, not derived again."""
        caps = _class_capacities(system, self.world, self.domains)
        old = _class_capacities(self.system, self.world, self.domains)
        # (a Topology is not changed after its build: where no capacity moves, the copy
        # shares its dicts)
        resources, capacity_of = self.resources, self.capacities()
        changed = [c for c in caps if caps[c] != old[c]]
        if changed:
            resources, capacity_of = dict(resources), dict(capacity_of)
        for cls in changed:
            capacity, doc = caps[cls]
            for name in self.names_of(cls):
                resources[name] = Resource(name, cls, capacity, doc)
            capacity_of.update(dict.fromkeys(self.names_of(cls), capacity))
        topo = Topology(system, self.domains, self.world, self.locations, resources,
                        _shared=self._shared)
        topo._cache["capacities"] = capacity_of
        return topo

    def names_of(self, cls: str) -> tuple[str, ...]:
        """The names of the resources of class ``cls``, in the order of ``resources``."""
        if "names" not in self._shared:
            names: dict[str, list[str]] = {}
            for name, r in self.resources.items():
                names.setdefault(r.cls, []).append(name)
            self._shared["names"] = {c: tuple(ns) for c, ns in names.items()}
        return self._shared["names"].get(cls, ())

    def class_capacities(self) -> dict[str, float]:
        """Each resource class's capacity (B/s), in the order of ``resources``: every
        instance of a class has it (``_class_capacities``)."""
        if "class_capacities" not in self._cache:
            self.names_of("")
            caps = _class_capacities(self.system, self.world, self.domains)
            self._cache["class_capacities"] = {c: caps[c][0] for c in self._shared["names"]}
        return self._cache["class_capacities"]

    def capacities(self) -> dict[str, float]:
        """Every resource's capacity (B/s), by name, in the order of ``resources`` (kept:
        the caller copies it before changing it)."""
        if "capacities" not in self._cache:
            self._cache["capacities"] = {n: r.capacity_Bps for n, r in self.resources.items()}
        return self._cache["capacities"]

    @property
    def virtual(self) -> bool:
        return self.system.domain.fabric == "shared-memory"

    @property
    def gpus(self) -> int:
        return 1 if self.virtual else self.world

    def sms_per_rank(self) -> int:
        """SMs a rank owns: a whole GPU, or its share of the one GPU for virtual ranks."""
        count = self.system.gpu.sm.count
        return count // self.world if self.virtual else count

    def _add(self, cls: str, index, capacity: float, doc: str = "") -> None:
        name = resource(cls, index)
        self.resources[name] = Resource(name, cls, capacity, doc)

    def _add_resources(self) -> None:
        caps = _class_capacities(self.system, self.world, self.domains)

        def add(cls: str, index) -> None:
            capacity, doc = caps[cls]
            self._add(cls, index, capacity, doc)

        for g in range(self.gpus):
            add("hbm", g)
            add("l2", g)
        if self.virtual:
            return
        for loc in self.locations:
            r = loc.rank
            if "nvl_out" in caps:
                add("nvl_out", r)
                add("nvl_in", r)
            if "nic_out" in caps:
                add("nic_out", r)
                add("nic_in", r)
        tiers = self.system.domain.switch_tiers
        for level, tier in enumerate(tiers, start=1):
            used_groups = sorted({loc.groups[level - 1] for loc in self.locations})
            for g in used_groups:
                add(f"sw{level}", g)
                if tier.in_switch_reduction:
                    add(f"nvls{level}", g)
                if level < len(tiers):
                    add(f"up{level}", g)
                    add(f"down{level}", g)

    # ---- queries ----------------------------------------------------------------
    def _common_tier(self, a: Location, b: Location) -> int:
        """Lowest switch tier (1-based) whose group holds both; 0 = other domain."""
        if a.domain != b.domain:
            return 0
        for level, (ga, gb) in enumerate(zip(a.groups, b.groups), start=1):
            if ga == gb:
                return level
        return len(a.groups)

    def gpu_path(self, src: int, dst: int) -> Path:
        """Resources from rank ``src``'s NVLink/NIC port to rank ``dst``'s (no HBM, no SM)."""
        a, b = self.locations[src], self.locations[dst]
        if src == dst or self.virtual:
            return Path((), 0.0, (f"gpu{a.gpu}",))
        tiers = self.system.domain.switch_tiers
        level = self._common_tier(a, b)
        if level == 0:
            so = self.system.scaleout
            return Path((resource("nic_out", src), resource("nic_in", dst)), so.latency_s,
                        (f"gpu{src}", f"nic{src}", "scaleout", f"nic{dst}", f"gpu{dst}"))
        res = [resource("nvl_out", src)]
        hops = [f"gpu{src}"]
        latency = self.system.gpu.nvlink.latency_s
        for lvl in range(1, level):
            group = a.groups[lvl - 1]
            res += [resource(f"sw{lvl}", group), resource(f"up{lvl}", group)]
            hops.append(f"sw{lvl}.{a.groups[lvl - 1]}")
        res.append(resource(f"sw{level}", a.groups[level - 1]))
        hops.append(f"sw{level}.{a.groups[level - 1]}")
        for lvl in range(level - 1, 0, -1):
            group = b.groups[lvl - 1]
            res += [resource(f"down{lvl}", group), resource(f"sw{lvl}", group)]
            hops.append(f"sw{lvl}.{b.groups[lvl - 1]}")
            latency += tiers[lvl].latency_s
        res.append(resource("nvl_in", dst))
        hops.append(f"gpu{dst}")
        return Path(tuple(res), latency, tuple(hops))

    def first_peers(self) -> tuple[int, ...]:
        """For each switch tier at which rank 0 meets a peer (0: another domain), the first
        such peer: a path's latency follows from that tier alone (``gpu_path``), so the
        farthest peer's latency is the largest of theirs."""
        if "first_peers" not in self._shared:
            first: dict[int, int] = {}
            a = self.locations[0]
            for q in range(1, self.world):
                first.setdefault(self._common_tier(a, self.locations[q]), q)
            self._shared["first_peers"] = tuple(sorted(first.values()))
        return self._shared["first_peers"]

    def span_level(self) -> int:
        """Lowest switch tier whose one group holds every rank (0: several domains or none)."""
        if "span" not in self._shared:
            self._shared["span"] = 0
            if not (self.domains > 1 and self.locations[-1].domain != self.locations[0].domain):
                for level in range(1, len(self.system.domain.switch_tiers) + 1):
                    if len({loc.groups[level - 1] for loc in self.locations}) == 1:
                        self._shared["span"] = level
                        break
        return self._shared["span"]

    def reduction_path(self, rank: int) -> Path:
        """From a rank up to the in-switch reduction unit of the tier that spans the world:
        the path one way of a multimem operation's data."""
        key = ("reduction", rank)
        if key not in self._cache:
            self._cache[key] = self._reduction_path(rank)
        return self._cache[key]

    def _reduction_path(self, rank: int) -> Path:
        loc = self.locations[rank]
        tiers = self.system.domain.switch_tiers
        level = self.span_level()
        if self.virtual or level == 0 or not tiers[level - 1].in_switch_reduction:
            raise ConfigError(f"{self.system.name}: no in-switch reduction unit spans "
                              f"{self.world} ranks")
        res = [resource("nvl_out", rank)]
        hops = [f"gpu{rank}"]
        latency = self.system.gpu.nvlink.latency_s / 2
        for lvl in range(1, level):
            group = loc.groups[lvl - 1]
            res += [resource(f"sw{lvl}", group), resource(f"up{lvl}", group)]
            hops.append(f"sw{lvl}.{loc.groups[lvl - 1]}")
            latency += tiers[lvl].latency_s / 2
        group = loc.groups[level - 1]
        res += [resource(f"sw{level}", group), resource(f"nvls{level}", group)]
        hops.append(f"nvls{level}.{loc.groups[level - 1]}")
        return Path(tuple(res), latency, tuple(hops))

    # ---- symmetries -------------------------------------------------------------
    def shape(self) -> tuple:
        """What the symmetries depend on: where every rank sits (GPU, domain, switch groups)
        and the resources' names, not their figures. Two systems that differ only in
        figures (a what-if override, ``pksim predict``'s guessed-figure swings) share it."""
        if "shape" not in self._shared:
            self._shared["shape"] = (self.world, self.domains, self.virtual,
                                    tuple(self.locations), len(self.system.domain.switch_tiers),
                                    hash(tuple(self.resources)))
        return self._shared["shape"]

    def automorphisms(self, colours: tuple[int, ...] | None = None
                      ) -> tuple[tuple[int, ...], ...]:
        """Rank relabellings that generate the topology's symmetry group, or with
        ``colours`` (one per rank) the subgroup that maps every rank onto one of its colour;
        each is a tuple ``perm`` (rank r becomes rank ``perm[r]``). The ranks hang in a tree:
        the domains, their switch groups tier by tier, the ranks of a tier-1 group (virtual
        ranks: all on the one GPU). A path's resources and latency follow from where its two
        ends sit in that tree, so exchanging sibling subtrees of the same shape (and colours)
        maps every path onto a path of the same latency and every resource onto one of the
        same class and capacity. The generators: for each set of alike siblings, a swap of
        the first two and a cycle through all of them, then the same inside the first of
        them (inside the others it follows by conjugation), and each of those done in all
        of the siblings at once (``_diagonal``: a pattern that the swaps do not keep may
        keep it). None where the switch groups do not nest."""
        return self._automorphisms(colours)[0]

    def diagonal_sources(self, colours: tuple[int, ...] | None = None
                         ) -> dict[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """For each diagonal among ``automorphisms(colours)``, the generators listed before it
        that generate it (the relabelling inside the first subtree, and the swap and cycle
        of the subtrees): a group that holds those holds it, so it adds no orbit there."""
        return self._automorphisms(colours)[1]

    def _automorphisms(self, colours):
        key = ("automorphisms", colours)
        if key not in self._shared:
            tree = self._rank_tree()
            perms: list[tuple[int, ...]] = []
            sources: dict = {}
            if tree is not None:
                colour = colours or (0,) * self.world
                _generators(tree, self.world, perms, {}, colour, sources)
            self._shared[key] = (tuple(perms), sources)
        return self._shared[key]

    def _rank_tree(self) -> dict | None:
        """The ranks as leaves of nested dicts (domain, tier-L group, ..., tier-1 group);
        None where a switch group spans two parents."""
        if self.virtual:
            branches = [() for _ in self.locations]
        else:
            branches = [(loc.domain,) + loc.groups[::-1] for loc in self.locations]
        parent: dict = {}
        for branch in branches:
            for depth in range(1, len(branch)):
                if parent.setdefault((depth, branch[depth]), branch[depth - 1]) != branch[depth - 1]:
                    return None
        root: dict = {}
        for rank, branch in enumerate(branches):
            node = root
            for key in branch:
                node = node.setdefault(key, {})
            node[rank] = rank
        return root

    def counts(self) -> dict[str, int]:
        """Number of GPUs, switch groups per tier, switch chips, NVLink ports, NICs."""
        out = {"gpus": self.gpus, "ranks": self.world, "domains": self.domains}
        tiers = self.system.domain.switch_tiers
        for level, tier in enumerate(tiers, start=1):
            groups = sum(1 for r in self.resources.values() if r.cls == f"sw{level}")
            out[f"tier{level}_groups"] = groups
            out[f"tier{level}_chips"] = groups * tier.chips_per_group
        out["nvlink_ports"] = 0 if self.virtual else (
            self.world * self.system.gpu.nvlink.links if self.world > 1 else 0)
        out["nics"] = self.world if self.domains > 1 else 0
        return out


_LAYOUTS: dict[tuple, Topology] = {}   # the last topologies built, by layout (_layout)
_KEPT_LAYOUTS = 4


def _layout(system: System, world: int, domains: int) -> tuple:
    """What a topology's ranks and resources (not their capacities) follow from: two systems
    alike in it (a what-if override, ``pksim predict``'s guessed-figure swings: the same
    system with one figure changed) get the same ranks and resource names, and their
    topologies differ only in the capacities of ``_class_capacities``."""
    d = system.domain
    return (world, domains, d.gpus_per_domain, d.fabric == "shared-memory",
            system.gpu.nvlink.links > 0,
            tuple((t.gpus_per_group, t.in_switch_reduction) for t in d.switch_tiers))


def _class_capacities(system: System, world: int, domains: int) -> dict[str, tuple[float, str]]:
    """The capacity (B/s) and description of each resource class a topology of ``system``
    has: every instance of a class has the same."""
    gpu = system.gpu
    out = {"hbm": (gpu.hbm.effective_Bps, "HBM read+write"),
           "l2": (gpu.l2.bandwidth_Bps, "L2 read+write")}
    if system.domain.fabric == "shared-memory":
        return out
    if world > 1 and gpu.nvlink.links > 0:
        out["nvl_out"] = (gpu.nvlink.bandwidth_Bps, "NVLink egress")
        out["nvl_in"] = (gpu.nvlink.bandwidth_Bps, "NVLink ingress")
    if domains > 1:
        nic = system.scaleout.nic_bandwidth_Bps * system.scaleout.efficiency
        out["nic_out"] = (nic, "NIC egress")
        out["nic_in"] = (nic, "NIC ingress")
    tiers = system.domain.switch_tiers
    for level, tier in enumerate(tiers, start=1):
        crossbar = tier.chips_per_group * tier.ports_per_chip * tier.port_bandwidth_Bps
        out[f"sw{level}"] = (crossbar, f"tier-{level} switch group crossbar")
        if tier.in_switch_reduction:
            gpus = min(tier.gpus_per_group, world)
            out[f"nvls{level}"] = (gpus * gpu.nvlink.bandwidth_Bps * tier.reduction_efficiency,
                                   f"tier-{level} in-switch reduction")
        if level < len(tiers):
            out[f"up{level}"] = (tier.uplink_bandwidth_Bps, f"tier-{level} uplink")
            out[f"down{level}"] = (tier.uplink_bandwidth_Bps, f"tier-{level} downlink")
    return out


# ---- the rank tree's automorphisms (Topology.automorphisms) ---------------------------
def _shape(node, shapes: dict, colour) -> tuple:
    """A subtree's shape: a rank's colour, or its children's shapes, sorted (in ``shapes``,
    by the node's id)."""
    if isinstance(node, int):
        return ("rank", colour[node])
    if id(node) not in shapes:
        shapes[id(node)] = ("tree", tuple(sorted(_shape(c, shapes, colour)
                                                 for c in node.values())))
    return shapes[id(node)]


def _alike(node: dict, shapes: dict, colour) -> list[list]:
    """A node's children grouped by shape (groups in the order of their shapes)."""
    groups: dict = {}
    for child in node.values():
        groups.setdefault(_shape(child, shapes, colour), []).append(child)
    return [groups[shape] for shape in sorted(groups)]


def _leaf_pairs(a, b, shapes: dict, colour) -> list[tuple[int, int]]:
    """(rank of a, rank of b) under one isomorphism of two subtrees of the same shape."""
    if isinstance(a, int):
        return [(a, b)]
    return [pair for xs, ys in zip(_alike(a, shapes, colour), _alike(b, shapes, colour))
            for x, y in zip(xs, ys) for pair in _leaf_pairs(x, y, shapes, colour)]


def _generators(node, world: int, out: list[tuple[int, ...]], shapes: dict, colour,
                sources: dict) -> None:
    if isinstance(node, int):
        return
    for alike in _alike(node, shapes, colour):
        k = len(alike)
        moves = []
        if k > 1:
            moves.append([(alike[0], alike[1]), (alike[1], alike[0])])
        if k > 2:
            moves.append([(alike[i], alike[(i + 1) % k]) for i in range(k)])
        siblings = []
        for pairs in moves:     # the rank permutation that carries each subtree a onto b
            perm = list(range(world))
            for a, b in pairs:
                for x, y in _leaf_pairs(a, b, shapes, colour):
                    perm[x] = y
            siblings.append(tuple(perm))
        out.extend(siblings)
        out.extend(_xors(alike, world, shapes, colour))
        inner: list[tuple[int, ...]] = []
        _generators(alike[0], world, inner, shapes, colour, sources)
        out.extend(inner)
        if k > 1:
            for perm in inner:
                diagonal = _diagonal(perm, alike, shapes, colour)
                sources.setdefault(diagonal, (perm, *siblings))
                out.append(diagonal)


def _xors(alike: list, world: int, shapes: dict, colour) -> list[tuple[int, ...]]:
    """Where the alike siblings are a power of two, more than two, of them: for each bit, the
    relabelling that exchanges sibling i with sibling i xor 2^bit, all at once. They are in
    the group the swap and the cycle generate, but a recursive halving or doubling step
    (rank r with rank r xor d) is kept by them and by neither the swap nor the cycle, so
    without them such a step has no symmetry left to fold its flows (4,096 ranks: 4,096
    flows a step instead of one)."""
    k = len(alike)
    if k <= 2 or k & (k - 1):
        return []
    out = []
    bit = 1
    while bit < k:
        perm = list(range(world))
        for i in range(k):
            for x, y in _leaf_pairs(alike[i], alike[i ^ bit], shapes, colour):
                perm[x] = y
        out.append(tuple(perm))
        bit *= 2
    return out


def _diagonal(perm: tuple[int, ...], alike: list, shapes: dict, colour) -> tuple[int, ...]:
    """``perm`` (which moves ranks inside ``alike[0]`` only) done in every subtree of
    ``alike`` at once, carried over by the isomorphisms of ``_leaf_pairs``. The same
    relabelling in every rack of every domain keeps traffic that pairs the racks (a
    hierarchical collective's step across domains), which the move inside one does not."""
    out = list(perm)
    for other in alike[1:]:
        there = dict(_leaf_pairs(alike[0], other, shapes, colour))
        for x, y in there.items():
            out[y] = there[perm[x]]
    return tuple(out)
