"""validation/run/fused.py without a GPU: the case list, the row partition the runner shares
with kernels/fused, and the report tables."""
from __future__ import annotations

import ctypes

import pytest

from validation.measurement import Timing
from validation.prepare import fused as prepare_fused
from validation.report.fused_run import report
from validation.run import fused as run_fused
from validation.suites import fused_kernels
from validation.runtime.fused import PkfArgs, PkfReqs, row_lo


def test_row_partition_covers_every_row_once():
    for m, w in [(1000, 8), (1000, 3), (100, 8), (8192, 8), (9, 8), (8, 8)]:
        lo = [row_lo(r, m, w) for r in range(w + 1)]
        assert lo[0] == 0 and lo[-1] == m
        assert all(b - a >= 1 for a, b in zip(lo, lo[1:])), (m, w, lo)  # m >= w: nobody empty


def test_abi_struct_layout():
    # kernels/fused/abi.h: 5 ints (+4 padding), 5 host-array pointers (a, b, out, partial,
    # gathered), 2 multicast pointers, flags, 7 ints (+4), err, stream, table and its size,
    # timeout, one_rank and rank: 24 + 40 + 16 + 8 + 32 + 16 + 16 + 8 + 8 = 168, whatever the world (checked against
    # the compiled library in tests/kernels)
    assert ctypes.sizeof(PkfArgs) == 168 and ctypes.sizeof(PkfReqs) == 56
    assert PkfArgs.a.offset == 24 and PkfArgs.table.offset == 136
    assert PkfArgs.timeout_cycles.offset == 152
    assert PkfArgs.one_rank.offset == 160 and PkfArgs.rank.offset == 164


def test_cases_cover_every_variant_and_shape():
    libs = {fused_kernels.short(op, ov, mech): f"lib/{op}-{ov}.so"
            for op, ov, _, mech in fused_kernels.VARIANTS}
    libs.update({"gemm": "lib/libpk_gemm.so"})
    libs.update({"/".join(k): f"lib/{k[0]}.so" for k in fused_kernels.BASELINE.values()})
    cases = prepare_fused.make_cases(libs, "full", with_predictions=False)
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    fused = [c for c in cases if c["kind"] == "fused"]
    for op, ov, _, mech in fused_kernels.VARIANTS:
        shapes = {(c["world"], c["m"], c["n"], c["k"]) for c in fused
                  if (c["op"], c["overlap"], c["mechanism"]) == (op, ov, mech) and not c["time"]}
        assert shapes == set(prepare_fused.CHECK_SHAPES), (op, ov, mech)
    timed = [c for c in cases if c.get("time")]
    assert all(c["check"] and c["iters"] >= 10 for c in timed)
    assert {c["idle"] for c in timed} == {prepare_fused.DEFAULT_IDLE} == {4.0}
    assert not any("idle" in c for c in cases if not c.get("time"))
    for c in fused:
        assert (c["comm_blocks"] > 0) == (c["overlap"] == "inter-sm")
    agi = {(c["world"], c["m"]) for c in fused if (c["op"], c["overlap"]) == ("ag-gemm", "intra-sm")}
    assert {w for w, _ in agi} == {2, 3, 4, 7, 8} and (3, 1000) in agi  # ragged, odd world
    nones = {(c["op"], c["world"], c["m"]) for c in cases if c["kind"] == "none"}
    assert ("gemm-rs", 3, 1000) not in nones  # 1000 x 1024 rows do not split into 3 equal shards
    assert {c["kind"] for c in cases} == {"fused", "none", "arg_check", "timeout"}


def test_report_tables():
    rows = [
        {"kind": "fused", "op": "gemm-rs", "overlap": "intra-sm", "mechanism": "tma", "world": 8,
         "m": 1000, "n": 1024, "k": 512, "comm_blocks": 0, "ok": True, "bad": 0,
         "max_abs_err": 1.5, "rel_err": 2e-3, "time": False},
        {"kind": "none", "op": "gemm-rs", "world": 8, "m": 8192, "n": 8192, "k": 2048,
         "collective": "reduce-scatter direct/register", "ok": True, "time": True, "ms": 3.5,
         "ms_torch_none": 3.6},
        {"kind": "fused", "op": "gemm-rs", "overlap": "inter-sm", "mechanism": "register",
         "world": 8, "m": 8192, "n": 8192, "k": 2048, "comm_blocks": 2, "tile_order": 1,
         "ok": True, "time": True, "ms": 5.0, "tflops": 440.0},
    ]
    text = report(rows)
    assert "| gemm-rs intra-sm/tma | 8 | 1000x1024x512 | 0 | yes | 0 | 1.5 | 2.00e-03 |" in text
    assert "inter-sm/register, 2 comm/rank, seq | 5.000 ms | 0.70x | 440 | yes |" in text


@pytest.mark.parametrize("argv", [["--bundle", "x"], []])
def test_cli_needs_bundle_and_out(argv):
    with pytest.raises(SystemExit):
        run_fused.main(argv)


class _StubCuda:
    """Just enough of torch.cuda for run_fused._interleaved_timings without a GPU: events
    read a clock that each call of a timed function advances by its own duration."""

    def __init__(self, log):
        self.log, self.now = log, 0.0
        cuda = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = cuda.now

            def elapsed_time(self, other):
                return other.t - self.t

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")

    def _sleep(self, cycles):
        self.log.append(f"spin {cycles}")


class _StubTorch:
    uint8 = "uint8"

    def __init__(self):
        self.log = []
        self.cuda = _StubCuda(self.log)

    def empty(self, n, dtype=None, device=None):
        log = self.log

        class Flush:
            def zero_(self):
                log.append("flush")
        return Flush()


def test_interleaved_timing_takes_one_call_of_each_in_turn():
    # a (2 ms a call, 3 timed calls, 1 warm-up) and b (5 ms, 2 timed, 2 warm-up): the warm-ups
    # first, then rounds a, b, a, b, a, each after the flush; b stops after its 2 calls
    torch = _StubTorch()

    def call(name, ms):
        def fn():
            torch.log.append(name)
            torch.cuda.now += ms
        return fn

    got = run_fused._interleaved_timings(torch, [(call("a", 2.0), 3, 1), (call("b", 5.0), 2, 2)])
    calls = [x for x in torch.log if x != "flush"]
    assert calls == ["a", "b", "b", "sync", "a", "b", "a", "b", "a", "sync"]
    assert torch.log[4:] == ["flush", "a", "flush", "b", "flush", "a", "flush", "b", "flush",
                             "a", "sync"]
    assert got == [Timing.of([2e-3] * 3), Timing.of([5e-3] * 2)]


def test_idle_timing_waits_idle_times_the_previous_call_before_each(monkeypatch):
    # idle = 3: a (2 ms a call, 2 timed, 1 warm-up), b (5 ms, 1 timed, 1 warm-up). The warm-up
    # gives each its first duration; before every timed call the host waits for the GPU,
    # sleeps 3 x that call's previous duration (a: 6 ms, b: 15 ms) and queues the lead spin,
    # then the flush and the call
    torch = _StubTorch()
    monkeypatch.setattr(run_fused.time, "sleep", lambda s: torch.log.append(f"sleep {s * 1e3:g}"))

    def call(name, ms):
        def fn():
            torch.log.append(name)
            torch.cuda.now += ms
        return fn

    got = run_fused._interleaved_timings(torch, [(call("a", 2.0), 2, 1), (call("b", 5.0), 1, 1)],
                                         idle=3.0)
    spin = f"spin {run_fused.IDLE_LEAD_CYCLES}"
    assert torch.log == [
        "a", "b", "sync",
        "sync", "sleep 6", spin, "flush", "a",
        "sync", "sleep 15", spin, "flush", "b",
        "sync", "sleep 6", spin, "flush", "a",
        "sync"]
    assert got == [Timing.of([2e-3] * 2, 3.0), Timing.of([5e-3], 3.0)]


def test_a_case_without_idle_is_timed_back_to_back():
    assert run_fused.case_idle({"id": "x"}) == 0.0
    assert run_fused.case_idle({"id": "x", "idle": 4}) == 4.0


def test_only_timed_cases_of_a_group_interleave():
    timed = {"kind": "fused", "time": True, "interleave": "gemm-rs 8x8x8 w2"}
    assert run_fused.interleave_key(timed) == "gemm-rs 8x8x8 w2"
    assert run_fused.interleave_key({**timed, "kind": "none"}) == "gemm-rs 8x8x8 w2"
    assert run_fused.interleave_key({**timed, "time": False}) is None
    assert run_fused.interleave_key({**timed, "kind": "timeout"}) is None
    assert run_fused.interleave_key({"kind": "fused", "time": True}) is None


def test_a_case_without_timing_returns_its_row_from_its_steps():
    steps = run_fused._no_steps({"ok": True, "results": []})
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value == {"ok": True, "results": []}
