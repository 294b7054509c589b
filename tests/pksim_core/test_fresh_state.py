"""A prediction does not depend on what this process predicted before it: the flows prepared
for one SM count are not reused for another (pksim_core.collective_model._flows keys them by the whole
schedule; the orbits, which the SM count does not change, are kept without it). Before, the
flows of a search's first SM count stood for every other one: the 1 MiB ring all-reduce by
TMA on dgx-h100 with 32 SMs came out 43.24 us after a 4-SM prediction, 42.89 us fresh."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim_core import collective_model
from pksim_core.schedule import Schedule

SYSTEM = load_system("dgx-h100")


def _time(algorithm: str, mechanism: str, sms: int) -> float:
    s = Schedule(op="all-reduce", shape=(("bytes", 1 << 20),), world=8, algorithm=algorithm,
                 mechanism=mechanism, comm_sms=sms)
    return collective_model.simulate(collective_model.build(SYSTEM, s)).time_s


def _fresh() -> None:
    collective_model.FLOWS.clear()
    collective_model.ORBITS.clear()


@pytest.mark.parametrize("algorithm, mechanism", [("ring", "tma"), ("ring", "register"),
                                                  ("direct", "tma"), ("two-shot", "register")])
def test_a_prediction_is_the_same_after_other_sm_counts(algorithm, mechanism):
    _fresh()
    fresh = {sms: _time(algorithm, mechanism, sms) for sms in (32,)}
    _fresh()
    fresh[4] = _time(algorithm, mechanism, 4)
    after = {sms: _time(algorithm, mechanism, sms) for sms in (32, 4)}   # 4 then 32, 32 then 4
    assert after == fresh
    _fresh()
    assert _time(algorithm, mechanism, 4) == fresh[4]


def test_the_sm_count_enters_the_flows():
    # the ring by TMA: 4 SMs move each step's chunk slower than 32 do
    _fresh()
    assert _time("ring", "tma", 4) > _time("ring", "tma", 32) * 1.05
