"""pksim pkb without a GPU, part two: what a solution is predicted to take as it runs
(pksim.pkb.predict), the check's merging and input bookkeeping, the kernels built beforehand,
and the shim's process groups."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim.pkb import check
from pksim.pkb.predict import generated_s, predict_solution
from pksim.pkb.shim import PksimDist
from pksim_core.programs.costs import calls, nccl_call
from pksim_core.programs.load import load_program
from pksim_core.programs.plan import baseline_plan
from pksim_core.programs.predict import predict_baseline
from pksim_core.programs.timeline import run_tasks
from pksim_core.search import search
from pksim.torch.choice import choose, likely_kernels, runnable


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100")


def test_a_lone_all_reduce_costs_the_generated_kernel_its_copies_and_their_launches(h100):
    program = load_program("allreduce")
    (op,) = [o for o in program.ops if o.is_comm]
    (call,) = calls(program, op)
    kernel_s, label, kernel_alone_s = generated_s(h100, call)
    chosen = choose(h100.name, call.op, call.nbytes, call.world, call.dtype).schedule
    assert label == chosen.label()
    # the chosen kernel at the call's own size, and its 2 MiB copied in and out twice (into a
    # new tensor, then the caller's), each byte read and written once through HBM
    alone_s = search(h100, [chosen.with_(shape=(("bytes", call.nbytes),))], top=1).ranked[0].time_s
    copies_s = 2 * 3 * call.nbytes / h100.gpu.hbm.effective_Bps
    assert kernel_s == pytest.approx(alone_s + copies_s, rel=1e-12) and kernel_alone_s == alone_s
    _, base = predict_baseline(h100, program)
    sol = predict_solution(h100, program)
    launch, api = h100.gpu.sync.stream_launch_s, h100.gpu.sync.launch_api_s
    # the program runs a copy, then the collective: each starts once the host has issued it
    # (its launches' API calls, one after another) and the GPU has finished the task before
    tasks = baseline_plan(h100, program).tasks
    assert [t.kind for t in tasks] == ["compute", "comm"] and tasks[0].launches == 1
    copy_end = run_tasks(h100, tasks)[0].end_s
    assert base.time_s == pytest.approx(max(2 * api, copy_end) + nccl_call(h100, call).time_s,
                                        rel=1e-9)
    # the solution's call: its generated kernel, the copies and three more launches on the
    # GPU, issued after three more API calls on the host (which here hide the wait for the
    # copy that NCCL's call pays: the call is host-bound in the solution, GPU-bound in the
    # reference)
    want = max(5 * api, copy_end) + kernel_s + 3 * launch
    assert sol.one_s == pytest.approx(want, rel=1e-9)
    assert sol.steady_s > 0 and sol.unserved == () and sol.calls == 1
    assert sol.kernel_faster == int(alone_s < nccl_call(h100, call).time_s)


def test_every_kernel_a_world_may_ask_for_runs_without_multicast():
    ks = likely_kernels("dgx-h100", "all-reduce", 8)
    keys = [k.key() for k in ks]
    assert len(keys) == len(set(keys)) and all(runnable(k) for k in ks)
    # the kernel of every size bucket's choice is among them
    for nbytes in (16, 1 << 12, 1 << 20, 1 << 26):
        for rop in ("sum", "max"):
            assert choose("dgx-h100", "all-reduce", nbytes, 8, "bf16", rop).kernel.key() in keys


def test_merge_keeps_the_first_failure_and_where():
    prob = {"id": 3, "stem": "3_broadcast"}
    ok = {"trials": [{"trial": 0, "ok": True, "max_abs_diff": 0.0, "why": ""}], "seconds": 1.0}
    bad = {"error": "CommError: x", "where": "File a.py, line 1"}
    row = check.merge(prob, [ok, bad, None], 3)
    assert row["ok"] is False and row["errors"] == ["rank 1: CommError: x"]
    assert row["silent_ranks"] == [2] and row["where"] == "File a.py, line 1"
    row = check.merge(prob, [ok, {**ok, "seconds": 4.0}], 2)
    assert row["ok"] is True and row["seconds"] == 4.0 and row["trials"][0]["max_abs_diff"] == 0.0


class _Sized:
    def __init__(self, n, size):
        self.n, self.size = n, size

    def numel(self):
        return self.n

    def element_size(self):
        return self.size


def test_input_bytes_are_counted_through_tuples_lists_and_dicts():
    x = (_Sized(10, 2), [_Sized(3, 4), 7], {"a": _Sized(1, 8), "b": "text"}, None)
    assert check.tensor_bytes(x) == 20 + 12 + 8
    assert check.COPY_LIMIT == 1 << 30


class _Dist:
    """torch.distributed's group calls as the shim uses them, for rank ``rank`` of 4."""

    def __init__(self, rank, backend="nccl"):
        self.rank, self.backend, self.made = rank, backend, []

    def new_group(self, ranks=None, timeout=None, backend=None):
        self.made.append((tuple(ranks or ()), backend))
        return object() if ranks is None or self.rank in ranks else "NON_MEMBER"

    def get_backend(self, group=None):
        if group == "NON_MEMBER":
            raise ValueError("Invalid process group specified")
        return self.backend

    def get_rank(self, group=None):
        return self.rank


@pytest.mark.parametrize("rank", [0, 3])
def test_every_rank_makes_every_gloo_twin_and_keeps_its_own(rank):
    d = _Dist(rank)
    shim = PksimDist(d)
    a = shim.new_group([0, 1])
    b = shim.new_group([2, 3])
    # new_group is a call of the whole world: each group and its twin, on every rank
    assert d.made == [((0, 1), None), ((0, 1), "gloo"), ((2, 3), None), ((2, 3), "gloo")]
    mine = a if rank in (0, 1) else b
    assert list(shim._twins) == [id(mine)]
    gloo = PksimDist(_Dist(rank, backend="gloo"))
    gloo.new_group([0, 1])
    assert gloo._twins == {} and gloo._dist.made == [((0, 1), None)]
