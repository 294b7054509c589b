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
from pksim.flows import FlowSpec


@dataclass(frozen=True)
class FlowClass:
    usage: tuple[tuple[str, float], ...]   # class-resource -> weight
    count: int                             # flows it stands for
    latency_s: float
    nbytes: float
    issuer: int                            # rank of the representative


def _recolour(signatures: dict) -> dict:
    ids: dict = {}
    return {item: ids.setdefault(sig, len(ids)) for item, sig in signatures.items()}


def reduce_flows(patterns: dict[Hashable, list[FlowSpec]], capacity: dict[str, float]
                 ) -> tuple[dict[Hashable, list[FlowClass]], dict[str, str]]:
    """Group the flows of every pattern into classes. Returns the classes and, for
    each class resource, one of its instances (whose capacity it has)."""
    flows = [(key, i, spec) for key, specs in patterns.items() for i, spec in enumerate(specs)]
    fcol = _recolour({(k, i): (k, s.nbytes, round(s.latency_s, 15)) for k, i, s in flows})
    users: dict[str, list[tuple[tuple, float]]] = {}
    for k, i, s in flows:
        for name, w in s.usage:
            users.setdefault(name, []).append(((k, i), w))
    rcol = _recolour({name: (name.cls, capacity[name]) for name in users})
    n_f, n_r = len(set(fcol.values())), len(set(rcol.values()))
    while True:
        rcol = _recolour({name: (rcol[name], tuple(sorted((fcol[f], w) for f, w in fl)))
                          for name, fl in users.items()})
        fcol = _recolour({(k, i): (fcol[(k, i)], tuple(sorted((rcol[n], w) for n, w in s.usage)))
                          for k, i, s in flows})
        new_f, new_r = len(set(fcol.values())), len(set(rcol.values()))
        if (new_f, new_r) == (n_f, n_r):
            break
        n_f, n_r = new_f, new_r
    res_count: dict[int, int] = {}
    res_name: dict[int, ResourceName] = {}
    for name, c in rcol.items():
        res_count[c] = res_count.get(c, 0) + 1
        res_name.setdefault(c, ResourceName(f"{name.cls}#{c}", name.cls))
    colour_of = {r: c for c, r in res_name.items()}
    instances = {res_name[c]: name for name, c in rcol.items()}
    out: dict[Hashable, list[FlowClass]] = {}
    for key, specs in patterns.items():
        members: dict[int, list[int]] = {}
        for i in range(len(specs)):
            members.setdefault(fcol[(key, i)], []).append(i)
        classes = []
        for colour, idx in members.items():
            rep = specs[idx[0]]
            per_class: dict[str, float] = {}
            for name, w in rep.usage:
                c = rcol[name]
                per_class[res_name[c]] = per_class.get(res_name[c], 0.0) + w
            count = len(idx)
            usage = tuple(sorted((r, count * u / res_count[colour_of[r]])
                                 for r, u in per_class.items()))
            classes.append(FlowClass(usage, count, rep.latency_s, rep.nbytes, rep.issuer))
        out[key] = classes
    return out, instances


def identity_flows(patterns: dict[Hashable, list[FlowSpec]]) -> dict[Hashable, list[FlowClass]]:
    """The full simulation: every flow its own class, on instance resources."""
    return {key: [FlowClass(s.usage, 1, s.latency_s, s.nbytes, s.issuer) for s in specs]
            for key, specs in patterns.items()}
