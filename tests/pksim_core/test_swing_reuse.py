"""The guessed-figure swings of ``pksim predict`` (pksim_core.sensitivity) re-use what one system's
prediction prepared for the next system that differs from it in one figure: a topology of the
same layout re-priced (hwmodels.topology), a step's run by its flows and capacities, the
classes of unchanged flows (pksim_core.collective_model). Each re-used answer must be the one a fresh
process gives: these tests compute every swing again with every cache emptied first."""
from __future__ import annotations

import sys

import pytest

import hwmodels.topology as topology_module
from hwmodels.catalog import load_system
from hwmodels.topology import Topology
from pksim_core import collective_model, program, sensitivity
from pksim_core.cache import BoundedCache
from pksim_core.mechanisms.flow import capacities
from pksim_core.orbits import equal_capacities
from pksim_core.schedule import Schedule
from pksim_core.simulate import predict, predicted_time

CASES = [("dgx-h100", 1, "ring", "tma", 1 << 20), ("gb200-nvl72", 2, "hierarchical", "tma", 1 << 30),
         ("gb200-nvl72", 1, "ring", "register", 1 << 24)]


def _empty_every_cache() -> None:
    """Every simulator cache of this process, as a fresh process starts."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("pksim", "hwmodels") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, BoundedCache):
                    value.clear()
    topology_module._LAYOUTS.clear()
    program._KINDS.clear()


def _schedule(system: str, domains: int, algorithm: str, mechanism: str, nbytes: int):
    world = load_system(system).domain.gpus_per_domain * domains
    return Schedule(op="all-reduce", shape=(("bytes", nbytes),), world=world, domains=domains,
                    algorithm=algorithm, mechanism=mechanism, comm_sms=16)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}/{c[2]}")
def test_every_swing_is_the_fresh_processs(case):
    system, domains = case[0], case[1]
    schedule = _schedule(*case)
    p = predict(system, schedule)
    assert p.depends_on_assumed
    swung = sensitivity.swings(system, (), p)           # re-using what came before
    checked = 0
    for s in swung:
        for factor, got in ((1 - sensitivity.STEP, s.low_s), (1 + sensitivity.STEP, s.high_s)):
            if got is None:
                continue
            _empty_every_cache()
            changed = load_system(system, (f"{s.key}={sensitivity._scaled(s.value, factor)}",))
            assert predict(changed, schedule).time_s == got, (s.key, factor)
            checked += 1
    assert checked >= len(swung)      # both sides of most figures were simulated


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}/{c[2]}")
def test_the_time_alone_is_the_predictions(case):
    system = load_system(case[0])
    schedule = _schedule(*case)
    for s in (schedule, schedule.with_(chunk_bytes=1 << 20, pipeline_depth=2)):
        assert predicted_time(system, s) == predict(system, s).time_s


@pytest.mark.parametrize("key, value", [("gpu.nvlink.link_bandwidth_GBps", 40.0),
                                        ("scaleout.efficiency", 0.7),
                                        ("domain.switch_tier.0.chips_per_group", 20),
                                        ("gpu.nvlink.latency_ns", 400.0)])
def test_a_repriced_topology_is_the_one_built_fresh(key, value):
    base = load_system("gb200-nvl72")
    changed = load_system("gb200-nvl72", (f"{key}={value}",))
    topology_module._LAYOUTS.clear()
    first = Topology.build(base, None, 2)
    repriced = Topology.build(changed, None, 2)      # re-priced from the first
    topology_module._LAYOUTS.clear()
    fresh = Topology.build(changed, None, 2)
    assert repriced.system is changed and repriced is not first
    assert list(repriced.resources.items()) == list(fresh.resources.items())
    assert repriced.capacities() == fresh.capacities()
    assert list(repriced.capacities()) == list(fresh.capacities())
    assert repriced.locations == fresh.locations
    for q in (1, 40, 80, 143):
        assert repriced.gpu_path(0, q) == fresh.gpu_path(0, q)
    assert repriced.automorphisms() == fresh.automorphisms()
    assert repriced.first_peers() == fresh.first_peers()
    assert max(fresh.gpu_path(0, q).one_way_s for q in range(1, 144)) == \
        max(fresh.gpu_path(0, q).one_way_s for q in fresh.first_peers())


def test_a_topologys_class_has_one_capacity():
    """What the quick _equal_capacities reads (Topology.class_capacities): checked against
    every resource, and the quick answer against the one that reads every name."""
    topo = Topology.build(load_system("gb200-nvl72", ("gpu.nvlink.link_bandwidth_GBps=45",)),
                          None, 2)
    cls_caps = topo.class_capacities()
    assert all(r.capacity_Bps == cls_caps[r.cls] for r in topo.resources.values())
    schedule = _schedule("gb200-nvl72", 2, "hierarchical", "tma", 1 << 30)
    caps = capacities(topo, schedule)
    extra = {n: c for n, c in caps.items() if n not in topo.resources}
    assert equal_capacities(caps, topo, extra) == equal_capacities(caps)
    mixed = dict(extra)
    mixed[next(iter(mixed))] = 1.0      # one rank's issue unlike the others'
    caps.update(mixed)
    assert equal_capacities(caps, topo, mixed) == equal_capacities(caps)
    assert equal_capacities(caps)[1]
