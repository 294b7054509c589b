"""validation/run/gemm.py's time_shape: torch.matmul and our configurations of one shape timed
in turn (one flushed call of each per round, docs/decisions/D80.md), against a stand-in torch
whose GPU is a clock that every call advances; a configuration that fails is recorded and
left out of the rounds."""
from types import SimpleNamespace

import pytest

from validation.run import gemm as rg


class FakeGpu:
    """A clock in milliseconds; a call takes its base time times the slowdown of its round."""

    def __init__(self):
        self.now, self.log, self.slow = 0.0, [], 1.0

    def run(self, name, ms):
        self.log.append(name)
        self.now += ms * self.slow


def fake_torch(gpu):
    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = gpu.now

        def elapsed_time(self, end):
            return end.t - self.t

    def matmul(a, b, out=None):
        gpu.run("torch", 2.0)

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: None)
    return SimpleNamespace(cuda=cuda, matmul=matmul, bfloat16="bf16",
                           randn=lambda *s, **k: object(), empty=lambda *s, **k: object())


class FakeRun:
    def __init__(self, gpu):
        self.gpu = gpu

    def gemm(self, a, b, c, v, sms=0, first_block=0, group_m=0):
        if v == 9:
            raise RuntimeError("pk_gemm_bf16_ex returned 2: out of memory")
        self.gpu.run(f"v{v}" + (f"/g{group_m}" if group_m else ""), 1.0 if v == 0 else 4.0)


class Flush:
    def __init__(self, gpu):
        self.gpu = gpu

    def zero_(self):
        self.gpu.run("flush", 0.0)
        # the clocks drift from round to round (4 flushed calls a round): every other is slower
        self.gpu.slow = 1.5 if (self.gpu.log.count("flush") - 1) // 4 % 2 else 1.0


def test_configurations_are_timed_in_turn_with_paired_ratios():
    gpu = FakeGpu()
    recs = rg.time_shape(FakeRun(gpu), fake_torch(gpu), 64, 64, 64, [0, 9, 1], Flush(gpu), 4,
                         extra=((0, 0, 8),))
    timed = gpu.log[gpu.log.index("flush"):]
    # after the trial calls (v0, v9 failing, v1, v0/g8) and 3 warm-ups of each: rounds
    assert gpu.log[:4] == ["v0", "v1", "v0/g8", "torch"]
    assert timed == ["flush", "torch", "flush", "v0", "flush", "v1", "flush", "v0/g8"] * 4
    by = {(r["impl"], r.get("variant"), r.get("group_m")): r for r in recs}
    assert "error" in by[("pk_gemm", 9, 0)] and "ms" not in by[("pk_gemm", 9, 0)]
    v0 = by[("pk_gemm", 0, 0)]
    assert v0["paired_ratio_to_torch"] == pytest.approx(2.0)   # the same round's drift cancels
    assert by[("pk_gemm", 1, 0)]["paired_ratio_to_torch"] == pytest.approx(0.5)
    assert v0["ratio_to_torch"] == pytest.approx(by[("torch.matmul", None, None)]["ms"] / v0["ms"])
    assert recs[0]["impl"] == "torch.matmul" and v0["t0"] == recs[0]["t0"]
