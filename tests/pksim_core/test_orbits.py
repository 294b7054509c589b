"""The flows prepared from one flow per orbit of the topology's symmetries (pksim_core.orbits,
pksim_core.symmetry.reduce_orbits) equal, bit for bit, those of every flow refined one by one
(the model's original path, kept here as the oracle ``_reference``)."""
from __future__ import annotations

from collections import Counter
from dataclasses import fields
from typing import Hashable

import pytest

from hwmodels.catalog import load_system
from hwmodels.topology import ResourceName, Topology
from pksim_core import collective_model, nccl
from pksim_core.mechanisms.flow import FlowSpec, capacities, move_flow, transfer_flow
from pksim_core.nccl import nccl_schedule
from pksim_core.orbits import RANK_FIELDS, _Layouts, _relabel_resources, flow_orbits, relabellings
from pksim_core.program import Move, Transfer
from pksim_core.schedule import Schedule
from pksim_core.symmetry import FlowClass, _recolour, name_classes, reduce_flows, refine
from pksim_core.workloads import phases as ph
from pksim_core.workloads.collectives import COLLECTIVES, algorithms_for

MiB = 1 << 20


def _reference_reduce(patterns: dict[Hashable, list[FlowSpec]], capacity: dict[str, float]):
    """The colour refinement of every flow, as the model ran it before the orbits (each
    resource's signature the sorted list of every (flow colour, weight) it carries)."""
    flows = {(key, i): spec for key, specs in patterns.items() for i, spec in enumerate(specs)}
    fcol = _recolour({(k, i): (k, s.nbytes, round(s.latency_s, 15)) for (k, i), s in flows.items()})
    users: dict[str, list[tuple[tuple, float]]] = {}
    for f, s in flows.items():
        for name, w in s.usage:
            users.setdefault(name, []).append((f, w))
    rcol = _recolour({name: (name.cls, capacity[name]) for name in users})
    fcol, rcol = refine(fcol, rcol, lambda r, fc: tuple(sorted((fc[f], w) for f, w in users[r])),
                        lambda f, rc: tuple(sorted((rc[n], w) for n, w in flows[f].usage)))
    res_name, res_count, colour_of, instances = name_classes(rcol, {name: 1 for name in rcol})
    out = {}
    for key, specs in patterns.items():
        members: dict[int, list[int]] = {}
        for i in range(len(specs)):
            members.setdefault(fcol[(key, i)], []).append(i)
        classes = []
        for idx in members.values():
            rep = specs[idx[0]]
            per_class: dict[str, float] = {}
            for name, w in rep.usage:
                per_class[res_name[rcol[name]]] = per_class.get(res_name[rcol[name]], 0.0) + w
            usage = tuple(sorted((r, len(idx) * u / res_count[colour_of[r]])
                                 for r, u in per_class.items()))
            classes.append(FlowClass(usage, len(idx), rep.latency_s, rep.nbytes, rep.issuer))
        out[key] = classes
    return out, instances


def _all_specs(model: collective_model.Model) -> dict[Hashable, list[FlowSpec]]:
    """Every flow of the model's patterns, as the model built them before the orbits."""
    schedule, topo = model.schedule, model.topo
    link_eff = (nccl.link_efficiency(model.system, schedule) if schedule.impl == "nccl"
                else model.system.gpu.nvlink.efficiency(schedule.mechanism))
    resident = collective_model.resident_in_l2(topo, schedule.dim("bytes"))
    out = {}
    for key, step in model.program.patterns().items():
        moves = step.moves()
        if moves is not None:
            queued = Counter(m.issuer for m in moves if m.engine != "sm")
            out[key] = [move_flow(topo, schedule, m, m.payload / model.lanes, resident, link_eff,
                                  queued[m.issuer] if m.engine != "sm" else 1) for m in moves]
        else:
            out[key] = [transfer_flow(topo, schedule, t, t.nbytes / model.lanes, resident, link_eff)
                        for t in step.transfers()]
    return out


def _check_same(system, schedule: Schedule) -> None:
    collective_model.FLOWS.clear()
    model = collective_model.build(system, schedule)
    caps = collective_model._instance_caps(model.system, model.topo, model.schedule)
    want, instances = _reference_reduce(_all_specs(model), caps)
    assert model.classes == want
    # the class resources' capacities: those of the instances the refinement named
    full = capacities(model.topo, model.schedule)
    if schedule.impl == "nccl":
        full.update(nccl.issue_capacities(model.system, model.topo, model.schedule))
    assert model.capacity == {name: full[inst] for name, inst in instances.items()}
    # and the reduced model's signals: those of every flow's
    unreduced = collective_model.build(system, schedule, reduced=False)
    assert model.sync_s == unreduced.sync_s


def _pk_cases():
    for op in COLLECTIVES:
        for alg in algorithms_for(op):
            if alg == "hierarchical":
                continue
            for mech in (("multimem",) if alg == "in-network" else ("tma", "register",
                                                                       "copy-engine")):
                yield op, alg, mech


PK_CASES = list(_pk_cases())
# systems and worlds whose trees differ: one switch tier, two tiers with a partial second
# group (gb200-nvl576 at 80: a group of 72 and one of 8), eight virtual ranks on one GPU
WORLDS = [("gb200-nvl72", 6), ("gb200-nvl576", 80), ("h200-virtual-calibrated", 8),
          ("h100-nvl256", 16)]


@pytest.mark.parametrize("op, alg, mech", PK_CASES)
@pytest.mark.parametrize("name, world", WORLDS)
def test_orbits_give_the_classes_of_every_flow(name, world, op, alg, mech):
    system = load_system(name)
    if alg == "rhd" and world & (world - 1):
        pytest.skip("rhd needs a power-of-two world")
    schedule = Schedule(op=op, shape=(("bytes", 3 * MiB),), world=world, algorithm=alg,
                        mechanism=mech, comm_sms=8)
    try:
        _check_same(system, schedule)
    except collective_model.InfeasibleError:
        pytest.skip("infeasible here")


@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "reduce-scatter", "broadcast"])
@pytest.mark.parametrize("name, world, domains", [("gb200-nvl72", 72, 1), ("dgx-h100", 16, 2),
                                                  ("h100-nvl256", 32, 1)])
def test_orbits_give_the_classes_of_every_flow_for_nccl(name, world, domains, op):
    system = load_system(name)
    for size in (64 << 10, 64 * MiB):
        _check_same(system, nccl_schedule(system, op, size, world, domains))


VARIANTS = [  # (op, algorithm, mechanism, what else the schedule says)
    ("reduce", "direct", "register", dict(root=37)),          # a root in the partial rack
    ("reduce", "two-shot", "tma", dict(root=5)),
    ("broadcast", "direct", "copy-engine", dict(root=79)),
    ("gather", "direct", "tma", dict(root=72)),
    ("scatter", "direct", "register", dict(root=3)),
    ("all-reduce", "ring", "tma", dict(chunk_bytes=256 << 10, pipeline_depth=2)),
    ("all-gather", "direct", "tma", dict(peer_order="sequential")),
    ("all-reduce", "two-shot", "register", dict(extra=(("reduce_op", "max"),))),
    ("all-gather-v", "direct", "tma", dict(extra=(("splits", ",".join(
        str(64 * (1 + r % 3)) for r in range(80))),))),
    ("send-recv", "direct", "copy-engine", dict(extra=(("peers", "+1,-1"),))),
    ("all-to-all-v", "direct", "register", dict(extra=(("splits", ";".join(
        ",".join(str(8 * ((r + q) % 4)) for q in range(80)) for r in range(80))),))),
]


@pytest.mark.parametrize("op, alg, mech, more", VARIANTS)
def test_orbits_of_roots_chunks_orders_and_split_sizes(op, alg, mech, more):
    # on 80 ranks of gb200-nvl576 (a rack of 72 and one of 8): a rank with a role of its
    # own, pipelined lanes, a peer order, a reduce op, uneven split sizes and peers
    schedule = Schedule(op=op, shape=(("bytes", 3 * MiB),), world=80, algorithm=alg,
                        mechanism=mech, comm_sms=8, **more)
    _check_same(load_system("gb200-nvl576"), schedule)


def test_orbits_of_pk_schedules_over_two_domains():
    system = load_system("dgx-h100")
    for alg in ("ring", "hierarchical", "direct"):
        schedule = Schedule(op="all-reduce", shape=(("bytes", 8 * MiB),), world=16, domains=2,
                            algorithm=alg, mechanism="register", comm_sms=8)
        _check_same(system, schedule)


def test_the_diagonal_relabellings_keep_a_hierarchical_collective():
    # a ring inside each of 4 domains and an exchange across them at each local index: no
    # relabelling inside one domain keeps it (the exchange pairs the domains' ranks), the
    # same relabelling in every domain at once does (Topology.automorphisms' diagonals), so
    # the orbits are already the classes: one flow per step, as in one domain
    system = load_system("dgx-h100")
    schedule = Schedule(op="all-reduce", shape=(("bytes", 8 * MiB),), world=32, domains=4,
                        algorithm="hierarchical", mechanism="tma", comm_sms=8)
    _check_same(system, schedule)
    model = collective_model.build(system, schedule)
    caps = collective_model._instance_caps(system, model.topo, schedule)
    items = {k: s.transfers() for k, s in model.program.patterns().items()}
    orbits, relabel = flow_orbits(model.topo, caps, items)
    assert len(relabel) >= 2
    for key, orbit_of in orbits.items():
        assert len(set(orbit_of)) == len(model.classes[key]) == 1, key


def test_a_flow_and_its_image_under_every_kept_relabelling():
    # each kept relabelling maps every move's flow onto its image's flow, resource by
    # resource (the orbits rest on it): a direct all-gather and a two-shot all-reduce on
    # 80 ranks of gb200-nvl576 (two tiers, a partial group), every move against every image
    system = load_system("gb200-nvl576")
    for op, alg in (("all-gather", "direct"), ("all-reduce", "two-shot")):
        schedule = Schedule(op=op, shape=(("bytes", 3 * MiB),), world=80, algorithm=alg,
                            mechanism="tma", comm_sms=8)
        model = collective_model.build(system, schedule, reduced=False)
        specs = _all_specs(model)
        caps = collective_model._instance_caps(system, model.topo, schedule)
        items = {k: s.moves() for k, s in model.program.patterns().items()}
        kept = relabellings(model.topo, caps, items)
        assert len(kept) >= 4      # both racks' swaps and cycles, at least
        layouts = _Layouts()
        for key, moves in items.items():
            where = {layouts.form(m): i for i, m in enumerate(moves)}
            for perm, image in kept:
                for i, m in enumerate(moves):
                    moved = Move(**{f.name: getattr(m, f.name) for f in fields(Move)}
                                 | {"issuer": perm[m.issuer],
                                    "sources": tuple(perm[q] for q in m.sources),
                                    "dests": tuple(perm[q] for q in m.dests)})
                    j = where[layouts.form(moved)]
                    mine = sorted((image[n], w) for n, w in specs[key][i].usage)
                    assert mine == sorted(specs[key][j].usage)
                    assert specs[key][i].latency_s == specs[key][j].latency_s


def test_a_ring_on_two_tiers_keeps_only_the_cycle_of_the_groups():
    # ranks 0..79 on gb200-nvl576: racks of 72 and of 8; a ring r -> r + 1 is kept by no
    # swap and by no cycle of one rack's ranks (the ring leaves the rack at 71 and 79)
    topo = Topology.build(load_system("gb200-nvl576"), 80)
    ring = {"ring": [Transfer(r, (r + 1) % 80, 1.0) for r in range(80)]}
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    orbits, relabel = flow_orbits(topo, caps, ring)
    assert relabel == [] and orbits["ring"] == list(range(80))
    # all 72 ranks of one rack, every one to every other: one orbit
    topo72 = Topology.build(load_system("gb200-nvl72"), 72)
    pairs = {"all": [Transfer(r, q, 1.0) for r in range(72) for q in range(72) if q != r]}
    caps72 = {name: r.capacity_Bps for name, r in topo72.resources.items()}
    orbits, relabel = flow_orbits(topo72, caps72, pairs)
    assert set(orbits["all"]) == {0} and len(relabel) == 2


def test_an_unknown_resource_class_keeps_no_relabelling():
    topo = Topology.build(load_system("gb200-nvl72"), 8)
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    assert _relabel_resources(topo, topo.automorphisms()[0], caps) is not None
    caps[ResourceName("mystery[0]", "mystery")] = 1.0
    assert _relabel_resources(topo, topo.automorphisms()[0], caps) is None


def test_move_fields_are_ranks_or_rank_free():
    # pksim_core.orbits relabels a move's issuer, sources and dests and compares the rest as it
    # is: a new field that names ranks, or that the flow pairs with one source's rank, must
    # be added to RANK_FIELDS (and to _Layouts.form). ``shifts`` (one per source) enters the
    # flow as a whole only (pksim_core.mechanisms.flow: the move's rate, latency and load rounds)
    rank_free = {"payload", "reduce", "engine", "serial", "readers", "dealt", "warm",
                 "load_rounds", "routine", "active", "epilogue", "elem_bytes", "shifts", "crossed"}
    assert {f.name for f in fields(Move)} == set(RANK_FIELDS) | rank_free


def test_reduce_flows_is_the_reference_refinement():
    # the trivial orbits (every flow its own): the fused model's path
    system = load_system("h100-nvl256")
    schedule = Schedule(op="all-reduce", shape=(("bytes", 3 * MiB),), world=16,
                        algorithm="two-shot", mechanism="tma", comm_sms=8)
    model = collective_model.build(system, schedule, reduced=False)
    specs = _all_specs(model)
    caps = collective_model._instance_caps(system, model.topo, schedule)
    assert reduce_flows(specs, caps) == _reference_reduce(specs, caps)


@pytest.mark.parametrize("op, mechanism", [("all-gather", "tma"), ("reduce-scatter", "tma"),
                                           ("reduce-scatter", "register")])
def test_ring_phases_sharing_a_key_cost_what_each_costs_alone(op, mechanism, monkeypatch):
    # gb200-nvl576 at 144 ranks (two racks: not every rotation of the ring is a symmetry),
    # 6945 elements a rank (13 890 bytes, 2 mod 16: the offsets cycle every 8 phases): the
    # prediction with the phases' keys as built equals the one with every phase its own key
    system = load_system("gb200-nvl576")
    s = Schedule(op=op, shape=(("bytes", 6945 * 144 * 2),), world=144, algorithm="ring",
                 mechanism=mechanism, comm_sms=16)

    def predict():
        ph._phases.cache_clear()
        collective_model.FLOWS.clear()
        return collective_model.simulate(collective_model.build(system, s)).time_s
    shared = predict()
    count = iter(range(10 ** 6))
    phase = ph._phase
    monkeypatch.setattr(ph, "_phase", lambda key, moves, joins=True:
                        phase(tuple(key) + (next(count),), moves, joins))
    assert predict() == shared
    ph._phases.cache_clear()
