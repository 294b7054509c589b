"""The classes of the orbits are kept per equality pattern of the numbers the refinement
compares (pksim_core.symmetry.equality_pattern, pksim_core.collective_model.PARTITIONS): the flows of a
schedule prepared after other SM counts are those prepared fresh, bit for bit, and a pattern
that differs (two weights equal at one SM count and not at another) is refined again."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.catalog import load_system
from hwmodels.topology import ResourceName
from pksim_core import collective_model
from pksim_core.mechanisms.flow import FlowSpec
from pksim_core.schedule import Schedule
from pksim_core.symmetry import (FlowOrbit, classes_of, equality_pattern, partition,
                            reduce_orbits)

SYSTEM = load_system("dgx-h100")


def _fresh() -> None:
    for cache in (collective_model.FLOWS, collective_model.ORBITS, collective_model.PARTITIONS):
        cache.clear()


def _flows(algorithm: str, mechanism: str, sms: int):
    s = Schedule(op="all-reduce", shape=(("bytes", 1 << 20),), world=8, algorithm=algorithm,
                 mechanism=mechanism, comm_sms=sms)
    m = collective_model.build(SYSTEM, s)
    return m.classes, m.capacity, m.sync_s, collective_model.simulate(m).time_s


@pytest.mark.parametrize("algorithm, mechanism", [("ring", "tma"), ("ring", "register"),
                                                  ("direct", "tma"), ("two-shot", "register")])
def test_flows_after_other_sm_counts_are_the_fresh_ones(algorithm, mechanism):
    fresh = {}
    for sms in (4, 32, 132):
        _fresh()
        fresh[sms] = _flows(algorithm, mechanism, sms)
    _fresh()
    after = {sms: _flows(algorithm, mechanism, sms) for sms in (132, 4, 32)}
    assert after == fresh
    # one refinement per pattern, not per SM count
    assert len(collective_model.PARTITIONS) < 3


def test_the_ring_by_tma_refines_again_where_its_pattern_changes():
    _fresh()
    for sms in (4, 32, 132):
        _flows("ring", "tma", sms)
    assert len(collective_model.ORBITS) == 1 and len(collective_model.PARTITIONS) == 2


def _spec(usage, latency=1e-6, nbytes=1024.0, issuer=0):
    return FlowSpec(usage=tuple(usage), latency_s=latency, nbytes=nbytes, issuer=issuer)


R = [ResourceName(f"link{i}", "link") for i in range(4)]
CAPS = {r: 100.0 for r in R}


def _orbits(a: float, b: float) -> dict:
    # two flows on two links each; the flows are alike exactly when a == b
    return {"s": [FlowOrbit("s", 0, 1, _spec([(R[0], a), (R[1], 1.0)])),
                  FlowOrbit("s", 1, 1, _spec([(R[2], b), (R[3], 1.0)]))]}


def test_a_pattern_keeps_the_partition_and_new_numbers_enter_the_classes():
    one, other = _orbits(2.0, 2.0), _orbits(3.0, 3.0)
    assert equality_pattern(one, CAPS) == equality_pattern(other, CAPS)
    part = partition(one, CAPS)
    assert classes_of(other, part) == reduce_orbits(other, CAPS)
    (cls,) = classes_of(other, part)[0]["s"]
    assert cls.count == 2 and sorted(u for _, u in cls.usage) == [1.0, 3.0]


def test_weights_that_part_make_another_pattern():
    alike, apart = _orbits(2.0, 2.0), _orbits(2.0, 3.0)
    assert equality_pattern(alike, CAPS) != equality_pattern(apart, CAPS)
    assert len(reduce_orbits(alike, CAPS)[0]["s"]) == 1
    assert len(reduce_orbits(apart, CAPS)[0]["s"]) == 2
    caps = dict(CAPS, **{R[2]: 50.0})
    assert equality_pattern(alike, caps) != equality_pattern(alike, CAPS)
