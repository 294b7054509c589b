"""The fluid engine against hand arithmetic."""
from __future__ import annotations

import random

import pytest
import simpy

from hwmodels.fluid import FluidEngine, single_flow_time_s


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


def test_a_capacity_raised_midway_speeds_the_flow_from_then_on():
    # 1000 B at 100 B/s for 5 s (500 B), then the port doubles to 200 B/s: the other 500 B
    # take 2.5 s more -> 7.5 s; the wake-up scheduled at the old rate (10 s) fires as a no-op
    env = simpy.Environment()
    engine = FluidEngine(env, {"port": 100.0})
    done = engine.transfer(1000.0, {"port": 1.0})

    def raise_it():
        yield env.timeout(5.0)
        engine.set_capacity("port", 200.0)

    env.process(raise_it())
    env.run(until=done)
    assert done.value == pytest.approx(7.5) and env.now == pytest.approx(7.5)
    env.run()                               # the stale wake-up: nothing moves
    assert env.now == pytest.approx(10.0) and done.value == pytest.approx(7.5)
    with pytest.raises(KeyError, match="unknown resource 'link'"):
        engine.set_capacity("link", 1.0)


def test_a_higher_priority_takes_its_share_first():
    # A (priority 1, held to 60 B/s by resource a), B and C share a port of 100 B/s. Fair,
    # all three would get 33.3. A first: it takes 60, B and C share the other 40 (20 each).
    # A: 60 B / 60 = 1 s. Then B and C have 80 B left at 50 each: 1 + 1.6 = 2.6 s
    env = simpy.Environment()
    engine = FluidEngine(env, {"port": 100.0, "a": 60.0})
    a = engine.transfer(60.0, {"port": 1.0, "a": 1.0}, priority=1)
    b = engine.transfer(100.0, {"port": 1.0})
    c = engine.transfer(100.0, {"port": 1.0})
    env.run()
    assert [a.value, b.value, c.value] == pytest.approx([1.0, 2.6, 2.6])


def _engine_time(capacity, usage, nbytes, latency_s):
    env = simpy.Environment()
    FluidEngine(env, dict(capacity)).transfer(nbytes, dict(usage), latency_s)
    env.run()
    return env.now


def test_single_flow_closed_form_equals_the_engine_bit_for_bit():
    # Random capacities, weights, sizes and latencies, 1-4 resources: the closed form must
    # give the engine's float, not one close to it (the calibration fit and the golden
    # predictions run on it).
    rng = random.Random(7)
    for _ in range(2000):
        names = rng.sample(["issue", "hbm", "l2", "nvlink", "pcie"], rng.randint(1, 4))
        capacity = {n: 10 ** rng.uniform(8, 13) for n in names}
        usage = {n: rng.choice([1.0, 2.0, 0.5, rng.uniform(0.1, 9.0)]) for n in names}
        nbytes = rng.choice([0.0, 1.0, 4096.0, 10 ** rng.uniform(0, 10)])
        latency = rng.choice([0.0, 10 ** rng.uniform(-9, -5)])
        assert single_flow_time_s(capacity, usage, nbytes, latency) == \
            _engine_time(capacity, usage, nbytes, latency)


def test_single_flow_closed_form_arithmetic_and_errors():
    # 1 MB over min(2e11 / 1, 1e12 / 4) = 2e11 B/s after 1 us: 1e-6 + 1e6 / 2e11 = 6e-6 s
    assert single_flow_time_s({"a": 2e11, "b": 1e12}, {"a": 1.0, "b": 4.0}, 1e6, 1e-6) \
        == pytest.approx(6e-6, rel=1e-15)
    with pytest.raises(KeyError, match="'c'"):
        single_flow_time_s({"a": 1.0}, {"c": 1.0}, 1.0)
    with pytest.raises(RuntimeError, match="zero-capacity"):
        single_flow_time_s({"a": 0.0}, {"a": 1.0}, 1.0)


def test_flows_of_one_usage_started_apart_land_at_their_own_times():
    # port p 10 B/s, q 10 B/s. A (100 B on p) at 0; at 5, B (30 B on p: A's usage, so A's
    # group and rate) and C (40 B on p and q). A alone 0-5 moves 50. From 5 three flows on
    # p at 10 / 3 B/s: B lands at 5 + 30 / (10/3) = 14, A then 20 short, C 10; A and C at
    # 5 B/s: C lands at 14 + 10 / 5 = 16, A 10 short; A alone: 16 + 10 / 10 = 17.
    (a, b, c), engine = run({"p": 10.0, "q": 10.0}, [(100, {"p": 1.0}, 0.0),
                                                    (30, {"p": 1.0}, 5.0),
                                                    (40, {"p": 1.0, "q": 1.0}, 5.0)])
    assert (a, b, c) == (pytest.approx(17.0), pytest.approx(14.0), pytest.approx(16.0))
    assert engine.busy_s["p"] == pytest.approx(17.0)
    assert engine.busy_s["q"] == pytest.approx(40 / 10)   # C's 40 B at q's 10 B/s


def test_many_identical_flows_share_as_their_number():
    # 1000 flows of 1 B on one 100 B/s port, one every ms: they arrive at 1000 B/s, ten
    # times what the port carries, so the port stays busy from 0 until the 1000 B have
    # passed at 100 B/s (10 s), and an equal share lands them in the order they came
    flows = [(1.0, {"p": 1.0}, i * 1e-3) for i in range(1000)]
    times, engine = run({"p": 100.0}, flows)
    assert max(times) == pytest.approx(10.0)
    assert engine.busy_s["p"] == pytest.approx(10.0)
    assert times == sorted(times)
