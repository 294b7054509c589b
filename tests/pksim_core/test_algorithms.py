"""pksim_core.algorithms, walked row by row: each (op, algorithm) is modelled (a small case predicted
through the simulator, its kernel's phases where it has a kernel), emitted (codegen renders the
header and struct the row names, on every mechanism it lists), listed in the validation suite
the row names, and built in CI: tests/codegen/test_build.py and test_comm_build.py (nvcc
marker, through the content-hash cache) compile one library or more per row, and the last test
here checks that none is missed. Adding an algorithm: docs/design/codegen.md, "Adding an algorithm"."""
from __future__ import annotations

import math

import pytest

from codegen.plan import make_plan, mechanisms
from codegen.render import render
from hwmodels.catalog import load_system
from pksim_core import algorithms
from pksim_core.kernel_contract import RUNNABLE_MECHANISMS, SPLIT_OPS, emit_reason
from pksim_core.schedule import ALGORITHMS, Schedule
from pksim_core.simulate import predict
from pksim_core.workloads import collectives, phases
from pksim_core.workloads.phases import kernel_phases
from tests.codegen import test_build, test_comm_build
from validation.prepare import collectives as matrix
from validation.suites.comm_suite import load_comm_suite

H100 = load_system("dgx-h100")
ROWS = {f"{r.op}/{r.algorithm}": r for r in algorithms.ROWS}
KERNEL_ROWS = {k: r for k, r in ROWS.items() if r.mechanisms}


def _schedule(r: algorithms.Algorithm, mechanism: str, world: int = 4, **extra) -> Schedule:
    if r.op == "send-recv":
        extra.setdefault("peers", "+1,-1")
    domains = 2 if r.scale_out else 1
    return Schedule(op=r.op, shape=(("bytes", 1 << 20),), world=world * domains, domains=domains,
                    algorithm=r.algorithm, mechanism=mechanism, comm_sms=16,
                    extra=tuple(sorted(extra.items())))


def test_rows_are_unique_and_every_name_is_a_schedule_algorithm():
    assert len({r.key for r in algorithms.ROWS}) == len(algorithms.ROWS)
    assert set(r.algorithm for r in algorithms.ROWS) <= set(ALGORITHMS)
    assert set(algorithms.NCCL_ALGORITHMS) <= set(ALGORITHMS)
    assert {r.op for r in algorithms.ROWS} == set(collectives.COLLECTIVES)


@pytest.mark.parametrize("key", sorted(ROWS))
def test_row_is_modelled(key):
    r = ROWS[key]
    assert callable(algorithms.resolve(vars(collectives), r.transfers, r, "transfer"))
    # modelled only: in-network through the switch (multimem), the others by TMA
    mech = r.mechanisms[0] if r.mechanisms else ("multimem" if "network" in r.algorithm else "tma")
    s = _schedule(r, mech)
    p = predict(H100, s)
    assert math.isfinite(p.time_s) and 0 < p.bound_s <= p.time_s * (1 + 1e-9)
    if r.phases:        # the generated kernel's moves, on every mechanism it runs on
        assert callable(algorithms.resolve(vars(phases), r.phases, r, "phase"))
        for m in r.mechanisms:
            assert kernel_phases(r.op, r.algorithm, m, 4, 1 << 20, extra=s.extra), (key, m)
    else:
        assert kernel_phases(r.op, r.algorithm, mech, 4, 1 << 20, extra=s.extra) is None


@pytest.mark.parametrize("key", sorted(ROWS))
def test_row_is_emitted_as_it_says(key):
    r = ROWS[key]
    if r.scale_out:     # its NVLink part, the op's ring kernel; NCCL's part named, not emitted
        plan = make_plan(H100, _schedule(r, "register"))
        assert plan.domains == 2 and dict(plan.scale_out)["op"] == r.scale_out
        assert plan.struct == f"pkc::{algorithms.find(r.op, 'ring').cpp_struct}"
        return
    if not r.mechanisms:
        assert "codegen has no" in emit_reason(H100, _schedule(r, "tma"))
        return
    assert mechanisms(r.algorithm, r.op) == r.mechanisms
    for mech in r.mechanisms:
        plan = make_plan(H100, _schedule(r, mech))
        text = render(plan)
        assert f'#include "collectives/{r.header}"' in text
        assert f"using algorithm = pkc::{r.cpp_struct};" in text
        kernel = f"{r.op}_{r.kernel}".replace("-", "_")
        assert plan.entry.startswith(f"pk_{kernel}_"), plan.entry
        assert plan.extended == r.extended
    if r.epilogue_kernel:       # with a reduce op: the epilogue form, on SMs only
        plan = make_plan(H100, _schedule(r, "register", reduce_op="max"))
        assert plan.header == "collectives/epilogue.cuh" and plan.extended
        assert plan.struct == f"pkc::{r.op.replace('-', '_')}_{r.epilogue_kernel}"


@pytest.mark.parametrize("key", sorted(ROWS))
def test_row_is_listed_in_its_suite(key):
    r = ROWS[key]
    if r.suite == "matrix":
        listed = {(op, alg) for op, alg, _ in matrix.runnable() + matrix.emulated_in_network()}
    elif r.suite == "comm":
        listed = {(v.op, v.algorithm) for v in load_comm_suite("comm").variants}
    else:       # no suite: modelled only, or compile-only (nothing of it runs here)
        assert not set(r.mechanisms) & set(RUNNABLE_MECHANISMS) and not r.streamed
        return
    assert r.key in listed


def test_every_kernel_row_is_built_in_ci():
    built = {(op, alg) for op, alg, *_ in test_build.matrix()}
    built |= {(v.op, v.algorithm) for v in test_comm_build.MATRIX}
    assert {r.key for r in KERNEL_ROWS.values()} <= built
    assert built <= {r.key for r in KERNEL_ROWS.values()}


def test_split_ops_are_direct_only():
    assert {r.op for r in algorithms.ROWS if r.transfers == "_sized_direct"} == set(SPLIT_OPS)
    assert all(r.algorithm == "direct" for r in algorithms.ROWS if r.op in SPLIT_OPS)
