"""codegen stages 1 and 2 for the rooted, split-size, send/recv and epilogue kernels (plan,
render, golden sources). No nvcc needed. Regenerate the golden files with
PKSIM_UPDATE_GOLDEN=1 after an intended change, and review the diff."""
from __future__ import annotations


import pytest

from codegen.plan import make_plan, mechanisms
from codegen.render import render
from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from pksim_core import algorithms
from pksim_core.kernel_contract import SPLIT_OPS
from pksim_core.prediction import Prediction
from pksim_core.schedule import Schedule
from tests.codegen.golden_sources import check_golden

H200V = load_system("h200-virtual")
H100 = load_system("dgx-h100")
NEW_OPS = ("reduce", "gather", "scatter") + SPLIT_OPS


def sched(op, alg="direct", mech="tma", world=8, nbytes=1 << 20, **extra):
    return Schedule(op=op, shape=(("bytes", nbytes),), world=world, algorithm=alg, mechanism=mech,
                    comm_sms=16, extra=tuple(sorted(extra.items())))


GOLDEN_CASES = {
    "reduce-two-shot-tma": sched("reduce", "two-shot", "tma"),
    "all-to-all-v-direct-copy-engine": sched("all-to-all-v", "direct", "copy-engine"),
    "send-recv-direct-register": sched("send-recv", "direct", "register", peers="+1,-1"),
    "all-reduce-two-shot-tma-max-scale-bias": sched("all-reduce", "two-shot", "tma",
                                                    reduce_op="max", epilogue="scale-bias"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_sources(name):
    s = GOLDEN_CASES[name]
    pred = Prediction(schedule=s, system=H200V.name, time_s=1.234e-3, bound_s=1.0e-3,
                      bound_resource="hbm", alpha_beta_s=1.1e-3, breakdown={"hbm": 1.0e-3},
                      link_util=0.0, nbytes=s.dim("bytes"))
    text = render(make_plan(H200V, s), pred)
    check_golden(name, text)


def test_every_new_kernel_is_extended_and_names_its_op_and_epilogue():
    for r in algorithms.kernels():
        op, alg = r.key
        if op not in NEW_OPS:
            continue
        assert r.extended
        for mech in mechanisms(alg, op):
            plan = make_plan(H200V, sched(op, alg, mech))
            text = render(plan)
            assert plan.extended and "using reduce_op = pkc::op_sum;" in text
            assert "using epilogue = pkc::ep_none;" in text
            assert "const unsigned long long* splits;" in text and "float alpha;" in text
            assert f'extern "C" int {plan.entry}(const pkc_args* a' in text
            assert f"#include \"collectives/{r.header}\"" in text
    # the plain collectives stay as they were: no extended config
    plain = render(make_plan(H200V, sched("all-reduce", "two-shot", "tma")))
    assert "reduce_op" not in plain and "splits" not in plain


def test_an_epilogue_selects_its_kernel():
    p = make_plan(H200V, sched("all-reduce", "direct", "register", reduce_op="avg"))
    assert (p.header, p.struct, p.reduce_op, p.epilogue) == (
        "collectives/epilogue.cuh", "pkc::all_reduce_one_shot_ep", "avg", "none")
    p = make_plan(H200V, sched("reduce-scatter", "direct", "tma", reduce_op="min", epilogue="bias"))
    assert p.struct == "pkc::reduce_scatter_direct_ep" and p.kernel == "reduce_scatter_direct_ep_tma"
    assert "using epilogue = pkc::ep_bias;" in render(p)
    # a reduce keeps its own kernel and takes the op in its config
    p = make_plan(H200V, sched("reduce", "two-shot", "register", reduce_op="max", epilogue="scale"))
    assert p.struct == "pkc::reduce_two_shot" and "pkc::op_max" in render(p)
    assert mechanisms("direct", "all-reduce", (("reduce_op", "max"),)) == ("tma", "register")


@pytest.mark.parametrize("schedule,why", [
    (sched("reduce", "direct", "copy-engine"), "runs on tma, register"),
    (sched("reduce-scatter-v", "direct", "copy-engine"), "runs on tma, register"),
    (sched("all-reduce", "two-shot", "copy-engine", reduce_op="max"), "runs on tma, register"),
    (sched("all-reduce", "ring", "tma", epilogue="scale"), "needs a reducing kernel"),
    (sched("all-gather", "direct", "tma", reduce_op="min"), "needs a reducing kernel"),
    (sched("all-reduce", "two-shot", "tma", reduce_op="prod"), "reduce op 'prod'"),
    (sched("reduce", "ring", "tma"), "no ring reduce kernel"),
    (sched("all-to-all-v", "pairwise", "tma"), "no pairwise"),
])
def test_infeasible_schedules_say_why(schedule, why):
    with pytest.raises(InfeasibleError, match=why):
        make_plan(H200V, schedule)
