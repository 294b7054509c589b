"""The fluid engine against hand arithmetic."""
from __future__ import annotations

import pytest
import simpy

from hwmodels.fluid import FluidEngine


def run(capacity, flows, record=False):
    env = simpy.Environment()
    engine = FluidEngine(env, capacity, record=record)
    events = [engine.transfer(nbytes, usage, latency) for nbytes, usage, latency in flows]
    env.run()
    return [e.value for e in events], engine


def test_one_flow_takes_bytes_over_capacity_plus_latency():
    # 1e9 B over a 100e9 B/s link after 1 us: 1e-6 + 1e9 / 100e9 = 0.010001 s
    (t,), _ = run({"link": 100e9}, [(1e9, {"link": 1.0}, 1e-6)])
    assert t == pytest.approx(0.010001)


def test_two_flows_on_one_port_get_half_each():
    # two 1e9 B flows share 100e9 B/s: 50e9 each, both end at 1e9 / 50e9 = 0.02 s
    times, engine = run({"port": 100e9}, [(1e9, {"port": 1.0}, 0.0)] * 2)
    assert times == pytest.approx([0.02, 0.02])
    assert engine.busy_s["port"] == pytest.approx(0.02)


def test_max_min_gives_the_unconstrained_flow_the_rest():
    # flow B is held to 20 by resource b; flow A gets 100 - 20 = 80 on resource a.
    # A: 100 B / 80 = 1.25 s. Then B alone: it moved 20 x 1.25 = 25 B, the other 75 B
    # still at 20 B/s (b binds): 1.25 + 75 / 20 = 5.0 s
    times, _ = run({"a": 100.0, "b": 20.0},
                   [(100, {"a": 1.0}, 0.0), (100, {"a": 1.0, "b": 1.0}, 0.0)])
    assert times == pytest.approx([1.25, 5.0])


def test_weights_count_protocol_overhead():
    # weight 1/0.8: 100 B/s of capacity carries 80 B/s of payload: 80 B take 1 s
    (t,), _ = run({"link": 100.0}, [(80, {"link": 1 / 0.8}, 0.0)])
    assert t == pytest.approx(1.0)


def test_rates_change_when_a_flow_starts_later():
    # A alone for 1 s at 100 B/s (100 B), then B arrives: 50 each. A has 100 B left:
    # 2 s more -> 3 s. B moved 100 B by then, 100 left alone at 100 B/s -> 4 s.
    times, _ = run({"x": 100.0}, [(200, {"x": 1.0}, 0.0), (200, {"x": 1.0}, 1.0)])
    assert times == pytest.approx([3.0, 4.0])


def test_tiny_remainders_do_not_stall_the_clock():
    # 512 B at 2.6e11 B/s after 30 us: the float clock cannot resolve the last
    # femtoseconds; the flow must still finish (regression: it spun forever)
    (t,), _ = run({"x": 2.6496e11}, [(512.0, {"x": 1.0}, 3.0639e-5)])
    assert t == pytest.approx(3.0639e-5 + 512 / 2.6496e11)


def test_records_keep_start_and_end():
    _, engine = run({"x": 10.0}, [(10, {"x": 1.0}, 0.5)], record=True)
    (rec,) = engine.records
    assert (rec.start_s, rec.end_s, rec.nbytes) == (0.5, pytest.approx(1.5), 10)
