"""Reduced simulation: one representative flow per equivalence class.

Flows and resources are coloured by refinement (like graph colour refinement):
a resource's colour is its kind, capacity and the multiset of flow colours (with
weights) it carries; a flow's colour is its pattern, size, latency and the
multiset of resource colours it crosses. At the fixed point every resource of one
class carries the same flows, so a class of n_F flows crossing a class of n_R
resources loads each of them with n_F * u / n_R (u: the representative's usage
summed over that class). Max-min fairness then gives every flow of a class the
same rate as its representative: the reduced and the full simulation agree.
Without symmetry the classes are single flows and the reduction changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from hwmodels.topology import ResourceName
from pksim_core.mechanisms.flow import FlowSpec


@dataclass(frozen=True)
class FlowClass:
    usage: tuple[tuple[str, float], ...]   # class-resource -> weight
    count: int                             # flows it stands for
    latency_s: float
    nbytes: float
    issuer: int                            # rank of the representative


@dataclass(frozen=True)
class FlowOrbit:
    """Flows of one pattern that a symmetry of the topology maps onto each other
    (pksim_core.orbits): ``size`` of them, the first at index ``first``, whose flow is ``spec``."""
    key: Hashable
    first: int
    size: int
    spec: FlowSpec


def _recolour(signatures: dict) -> dict:
    ids: dict = {}
    return {item: ids.setdefault(sig, len(ids)) for item, sig in signatures.items()}


def refine(fcol: dict, rcol: dict, resource_signature, flow_signature) -> tuple[dict, dict]:
    """Colour refinement to its fixed point: each round a resource's colour takes on
    ``resource_signature(resource, fcol)`` (the flow colours it carries), then a flow's
    ``flow_signature(flow, rcol)`` (the resource colours it crosses), until neither the flows
    nor the resources split further. Colours are numbered in the order of the dicts' keys."""
    n_f, n_r = len(set(fcol.values())), len(set(rcol.values()))
    while True:
        rcol = _recolour({r: (rcol[r], resource_signature(r, fcol)) for r in rcol})
        fcol = _recolour({f: (fcol[f], flow_signature(f, rcol)) for f in fcol})
        new_f, new_r = len(set(fcol.values())), len(set(rcol.values()))
        if (new_f, new_r) == (n_f, n_r):
            return fcol, rcol
        n_f, n_r = new_f, new_r


def name_classes(rcol: dict, size: dict) -> tuple[dict, dict, dict, dict]:
    """The resource classes of a refinement: each colour's class resource (``cls#colour``),
    how many resources it stands for (``size[r]`` per resource ``r``), the colour of each
    class resource, and one instance of each (whose capacity it has)."""
    res_count: dict[int, int] = {}
    res_name: dict[int, ResourceName] = {}
    for r, c in rcol.items():
        res_count[c] = res_count.get(c, 0) + size[r]
        res_name.setdefault(c, ResourceName(f"{r.cls}#{c}", r.cls))
    colour_of = {r: c for c, r in res_name.items()}
    instances = {res_name[c]: r for r, c in rcol.items()}
    return res_name, res_count, colour_of, instances


def reduce_flows(patterns: dict[Hashable, list[FlowSpec]], capacity: dict[str, float]
                 ) -> tuple[dict[Hashable, list[FlowClass]], dict[str, str]]:
    """Group the flows of every pattern into classes. Returns the classes and, for
    each class resource, one of its instances (whose capacity it has)."""
    orbits = {key: [FlowOrbit(key, i, 1, spec) for i, spec in enumerate(specs)]
              for key, specs in patterns.items()}
    return reduce_orbits(orbits, capacity)


def reduce_orbits(orbits: dict[Hashable, list[FlowOrbit]], capacity: dict[str, float],
                  relabel: list[dict[str, str]] = ()
                  ) -> tuple[dict[Hashable, list[FlowClass]], dict[str, str]]:
    """``reduce_flows`` from one flow per orbit (each pattern's orbits in the order of
    their first flows): the resources' orbits are those of the representatives' resources
    under the relabellings ``relabel`` (none: each resource its own). Refining orbits as the
    flows would be refined gives the same classes: every member of an orbit carries the same
    colour at every round (its flows and resources map onto each other's), and a class's
    colour number is that of its first resource in the order the flows first use them, which
    the first flow of some class uses (a class's flows use the same resource classes)."""
    return classes_of(orbits, partition(orbits, capacity, relabel))


@dataclass(frozen=True)
class Partition:
    """Which orbits ``reduce_orbits`` merges into a class and onto which class resource each
    resource falls: per pattern the classes' orbit indices (its first the representative),
    each used resource's class resource, each class resource's count and one instance."""
    groups: dict[Hashable, list[list[int]]]
    class_of: dict[str, str]
    count: dict[str, int]
    instances: dict[str, str]


def equality_pattern(orbits: dict[Hashable, list[FlowOrbit]], capacity: dict[str, float]
                     ) -> tuple:
    """What of the orbits and capacities ``partition`` reads, the numbers replaced by the
    order of their first appearance: it compares the weights, sizes, latencies (to 1e-15 s)
    and capacities only for equality (in its signatures and their sorted multisets), so two
    inputs of one pattern (and one ``relabel``) give one partition, whatever the numbers."""
    ids: dict = {}
    out = []
    for key, pattern in orbits.items():
        for o in pattern:
            s = o.spec
            out.append((key, o.first, o.size,
                        ids.setdefault((s.nbytes, round(s.latency_s, 15)), len(ids)),
                        tuple((n, ids.setdefault(w, len(ids)),
                               ids.setdefault(("c", capacity.get(n)), len(ids)))
                              for n, w in s.usage)))
    return tuple(out)


def partition(orbits: dict[Hashable, list[FlowOrbit]], capacity: dict[str, float],
              relabel: list[dict[str, str]] = ()) -> Partition:
    """The refinement of ``reduce_orbits``: its classes before their weights are summed."""
    flows = [o for key in orbits for o in orbits[key]]
    res: dict[str, str] = {}        # resource -> the first of its orbit the flows use
    size: dict[str, int] = {}       # an orbit's resources, by its first
    for o in flows:
        for name, _ in o.spec.usage:
            if name not in res:
                _close(name, relabel, res, size)
    # users[r][(flow orbit, weight)]: how many flows of that orbit use each resource of
    # orbit r with that weight (the orbit's uses of r, spread evenly over r's resources)
    users: dict[str, dict[tuple[int, float], int]] = {r: {} for r in size}
    for j, o in enumerate(flows):
        uses: dict[tuple[str, float], int] = {}
        for name, w in o.spec.usage:
            uses[(res[name], w)] = uses.get((res[name], w), 0) + 1
        for (r, w), n in uses.items():
            count, left = divmod(o.size * n, size[r])
            if left:
                raise RuntimeError(f"flow orbit {o.key} step {o.first}: uses of {r} do not "
                                   f"spread evenly: the relabellings are not symmetries")
            users[r][(j, w)] = count
    fcol = _recolour({j: (o.key, o.spec.nbytes, round(o.spec.latency_s, 15))
                      for j, o in enumerate(flows)})
    rcol = _recolour({r: (r.cls, capacity[r]) for r in users})
    fcol, rcol = refine(
        fcol, rcol, lambda r, fc: _users_signature(users[r], fc),
        lambda j, rc: tuple(sorted((rc[res[n]], w) for n, w in flows[j].spec.usage)))
    res_name, res_count, colour_of, instances = name_classes(rcol, size)
    groups: dict[Hashable, list[list[int]]] = {}
    j = 0
    for key, pattern in orbits.items():
        members: dict[int, list[int]] = {}
        for _ in pattern:
            members.setdefault(fcol[j], []).append(j)
            j += 1
        groups[key] = list(members.values())
    class_of = {name: res_name[rcol[r]] for name, r in res.items()}
    count = {name: res_count[c] for c, name in res_name.items()}
    return Partition(groups, class_of, count, instances)


def classes_of(orbits: dict[Hashable, list[FlowOrbit]], part: Partition
               ) -> tuple[dict[Hashable, list[FlowClass]], dict[str, str]]:
    """The classes of ``part`` with the orbits' numbers: each class's representative's
    weights summed per class resource and spread over its resources."""
    flows = [o for key in orbits for o in orbits[key]]
    out: dict[Hashable, list[FlowClass]] = {}
    for key, groups in part.groups.items():
        classes = []
        for group in groups:
            rep = flows[group[0]].spec
            per_class: dict[str, float] = {}
            for name, w in rep.usage:
                r = part.class_of[name]
                per_class[r] = per_class.get(r, 0.0) + w
            count = sum(flows[j].size for j in group)
            usage = tuple(sorted((r, count * u / part.count[r]) for r, u in per_class.items()))
            classes.append(FlowClass(usage, count, rep.latency_s, rep.nbytes, rep.issuer))
        out[key] = classes
    return out, part.instances


def _close(name: str, relabel, res: dict[str, str], size: dict[str, int]) -> None:
    """Enter the orbit of ``name`` under the relabellings in ``res``, ``name`` first."""
    res[name] = name
    stack, n = [name], 1
    while stack:
        x = stack.pop()
        for image in relabel:
            y = image[x]
            if y not in res:
                res[y] = name
                stack.append(y)
                n += 1
    size[name] = n


def _users_signature(users: dict[tuple[int, float], int], fcol: dict) -> tuple:
    """The multiset of (flow colour, weight) on a resource, as sorted (pair, count)."""
    seen: dict[tuple[int, float], int] = {}
    for (j, w), count in users.items():
        seen[(fcol[j], w)] = seen.get((fcol[j], w), 0) + count
    return tuple(sorted(seen.items()))


def identity_flows(patterns: dict[Hashable, list[FlowSpec]]) -> dict[Hashable, list[FlowClass]]:
    """The full simulation: every flow its own class, on instance resources."""
    return {key: [FlowClass(s.usage, 1, s.latency_s, s.nbytes, s.issuer) for s in specs]
            for key, specs in patterns.items()}
