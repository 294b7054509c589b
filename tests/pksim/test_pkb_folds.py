"""pksim.pkb.folds without a GPU: the reference's all-reduce and the division after it made one
call in the solution's text, the shim's folded call, and the prediction counting the fold."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim.pkb.folds import folded_source, program_folds
from pksim.pkb.predict import predict_solution
from pksim_core.programs.load import load_program

REF = '''import torch.distributed as dist

def solution(g, h, k, world_size):
    dist.all_reduce(g, op=dist.ReduceOp.SUM)
    g.div_(world_size)
    dist.all_reduce(h)
    h /= world_size
    dist.all_reduce(k, op=dist.ReduceOp.MAX)
    k.div_(world_size)
    for t in (g, h):
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=None)
        t.div_(2)
    dist.all_reduce(g)
    x = 1
    g.div_(world_size)
    return g, h, k
'''


class _Dist:
    """A stand-in torch.distributed of one rank whose all-reduce doubles (a world of two)."""

    class ReduceOp:
        SUM, MAX = "sum", "max"

    def __init__(self):
        self.calls = []

    def all_reduce(self, t, op=None, group=None):
        self.calls.append(("all_reduce", op))
        t[0] = t[0] * 2 if op != "max" else t[0]

    def all_reduce_div(self, t, divisor, op=None, group=None):
        self.calls.append(("all_reduce_div", op, divisor))
        self.all_reduce(t, op, group)
        self.calls.pop()
        t[0] = t[0] / divisor


class _T(list):
    """A one-number tensor: t[0], div_ and /= in place."""

    def div_(self, d):
        self[0] = self[0] / d
        return self

    def __itruediv__(self, d):
        return self.div_(d)


def _run(text: str):
    ns: dict = {}
    # the stand-in below is the module the text imports: CI has no torch
    body = text.replace("import torch.distributed as dist\n", "", 1)
    assert body != text
    exec(compile(body, "<reference>", "exec"), ns)
    ns["dist"] = _Dist()
    out = ns["solution"](_T([1.0]), _T([3.0]), _T([5.0]), 2)
    return [list(t) for t in out], ns["dist"].calls


def test_the_sum_and_its_division_become_one_call_and_compute_the_same():
    text, sites = folded_source(REF)
    # lines 4 (op SUM), 6 (op left out, /=) and 11 (in the loop); not the MAX (8) nor the
    # division that does not follow its all-reduce (13, 15)
    assert [n for n, _ in sites] == [4, 6, 11]
    assert {label for _, label in sites} == {"all-reduce + divide"}
    assert text.count("dist.all_reduce_div(") == 3 and text.count("dist.all_reduce(") == 2
    folded, calls = _run(text)
    plain, plain_calls = _run(REF)
    assert folded == plain
    assert [c[0] for c in calls] == ["all_reduce_div", "all_reduce_div", "all_reduce",
                                     "all_reduce_div", "all_reduce_div", "all_reduce"]
    assert len(plain_calls) == 6 and all(c[0] == "all_reduce" for c in plain_calls)


def test_a_division_into_a_new_tensor_folds_only_for_a_local_name():
    text = ("import torch.distributed as dist\n\ndef solution(x, n):\n    y = x * 2\n"
            "    dist.all_reduce(y)\n    y = y / n\n    dist.all_reduce(x)\n    x = x / n\n"
            "    return x, y\n")
    folded, sites = folded_source(text)
    # y is the function's own: divided in place, no caller's tensor changes; x is the
    # caller's: in place it would change the caller's input, so it is left as written
    assert sites == [(5, "all-reduce + divide")]
    assert "dist.all_reduce_div(y, n)" in folded and "x = x / n" in folded


def test_a_reduce_scatter_and_its_division_become_one_call():
    text = ("import torch.distributed as dist\n\ndef solution(x, w):\n"
            "    out = x.new_empty(2)\n"
            "    dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)\n    out.div_(w)\n"
            "    dist.reduce_scatter_tensor(out, x, dist.ReduceOp.MAX)\n    out.div_(w)\n"
            "    return out\n")
    folded, sites = folded_source(text)
    # the MAX (positional op) is left as written
    assert sites == [(5, "reduce-scatter + divide")]
    assert "dist.reduce_scatter_tensor_div(out, x, w, op=dist.ReduceOp.SUM)" in folded


def test_a_reference_without_the_pattern_is_left_as_written():
    text = "import torch.distributed as dist\n\ndef solution(x):\n    dist.all_reduce(x)\n    return x\n"
    assert folded_source(text) == (text, [])


def test_the_program_ops_the_fold_removes():
    assert program_folds(load_program("ddp")) == {"average"}
    assert program_folds(load_program("ring-attention-backward-dp")) == {
        "average_dq", "average_dk", "average_dv"}
    assert program_folds(load_program("load-balancing-loss")) == {"average"}   # into a new tensor
    assert program_folds(load_program("fsdp-step-e2e")) == {"average"}   # after a reduce-scatter
    assert program_folds(load_program("allreduce")) == set()


def test_the_prediction_counts_the_fold_and_nothing_else():
    system = load_system("dgx-h100")
    program = load_program("ddp")
    plain = predict_solution(system, program)
    folded = predict_solution(system, program, frozenset({"average"}))
    assert folded.steady_s < plain.steady_s and folded.calls == plain.calls
    # the division's task alone: its time and launch are what the fold saves at most
    assert plain.steady_s - folded.steady_s < 20e-6


def test_the_shim_runs_the_average_kernel_only_for_the_group_size():
    torch = pytest.importorskip("torch")
    from pksim.pkb.shim import PksimDist

    class Comm:
        world, torch = 4, None

        def __init__(self):
            self.torch, self.ops = torch, []

        def all_reduce(self, t, op="sum"):
            self.ops.append(op)
            return t * self.world / (self.world if op == "avg" else 1)

    comm = Comm()
    shim = PksimDist(torch.distributed)
    shim.comm = lambda group=None: comm
    x = torch.ones(3)
    shim.all_reduce_div(x, 4)
    assert comm.ops == ["avg"] and torch.equal(x, torch.ones(3))
    shim.all_reduce_div(x, 2)                        # not the group's size: the two calls
    assert comm.ops == ["avg", "sum"] and torch.equal(x, torch.full((3,), 2.0))
    shim.all_reduce_div(x.double(), 4)               # a type the kernel does not reduce
    assert comm.ops[-1] == "sum"
    assert shim.tally["all_reduce_div (avg epilogue)"] == 1
    assert shim.tally["all_reduce_div (not folded)"] == 2

    comm.reduce_scatter = lambda t, op="sum": (comm.ops.append("rs " + op), t.sum(0) / 4)[1]
    out = torch.empty(2)
    shim.reduce_scatter_tensor_div(out, torch.ones(8), 4)
    assert comm.ops[-1] == "rs avg" and torch.equal(out, torch.ones(2))
    assert shim.tally["reduce_scatter_tensor_div (avg epilogue)"] == 1


def test_check_time_runs_pkbs_measure_on_both_and_keeps_the_slowest_rank(tmp_path, monkeypatch):
    """``pksim pkb check --time`` without a GPU: PKB's measure_solution_performance (a stand-in
    in a checkout made here) called on the reference and on the solution with the first tensor
    argument, the solution under the guard on torch.distributed; the row keeps the slowest rank."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from pksim.pkb import check

    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "performance.py").write_text(
        "def measure_solution_performance(fn, t, warmup_iters=500, measure_iters=100):\n"
        "    out = [fn(t) for _ in range(warmup_iters + measure_iters)]\n"
        "    return {'wall_time_ms': float(out[-1].sum()) + measure_iters / 1000}\n")
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: None)
    guarded, real = [], torch.distributed.all_reduce

    def sol(x, k):
        guarded.append(torch.distributed.all_reduce is not real)
        return x * k + 1

    def make_inputs(rank, world, pid, shape, dtype, trial=0, device=None):
        return torch.ones(4), 3

    cfg = {"pkb": str(tmp_path), "warmup": 2, "iters": 5}
    got = check._time(cfg, 0, 8, {"id": 1}, SimpleNamespace(solution=lambda x, k: x * k),
                      SimpleNamespace(solution=sol), make_inputs, torch.device("cpu"))
    assert got == {"reference": 12.005, "solution": 16.005}
    assert len(guarded) == 7 and all(guarded) and torch.distributed.all_reduce is real
    ranks = [{"trials": [{"ok": True, "max_abs_diff": 0.0, "why": ""}], "seconds": 1.0,
              "time": {"reference": 1.0 + r, "solution": 2.0 - r / 10}} for r in range(3)]
    row = check.merge({"id": 1, "stem": "1_x"}, ranks, 3)
    assert row["reference_ms"] == 3.0 and row["solution_ms"] == 2.0
