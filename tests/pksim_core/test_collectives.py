"""Every algorithm computes its collective: checked on sets of contributing ranks."""
from __future__ import annotations

import pytest

from hwmodels.errors import InfeasibleError
from pksim_core.program import StepProgram, Step, Transfer, execute_symbolic
from pksim_core.workloads.collectives import (COLLECTIVES, algorithms_for, build_program,
                                         busbw_factor, expected_state, initial_state)

CASES = [(op, alg, n) for op in COLLECTIVES for alg in algorithms_for(op)
         for n in (2, 3, 4, 8, 12) if not (alg == "rhd" and n & (n - 1))
         and not (alg == "hierarchical" and n % 2)]


@pytest.mark.parametrize("op, algorithm, n", CASES)
def test_algorithm_produces_the_collective(op, algorithm, n):
    root = n - 1
    program = build_program(op, algorithm, n, 1024.0 * n, root=root,
                            domains=2 if algorithm == "hierarchical" else 1)
    state = execute_symbolic(program, initial_state(op, n, root))
    wrong = {k: state.get(k) for k, v in expected_state(op, n, root).items() if state.get(k) != v}
    assert wrong == {}


@pytest.mark.parametrize("op, algorithm, n", CASES)
@pytest.mark.parametrize("sequential", [False, True])
def test_steps_name_the_kinds_of_their_transfers(op, algorithm, n, sequential):
    # Program.kinds reads a step's declared kinds instead of building its transfers:
    # each step's declaration is what its transfers hold
    program = build_program(op, algorithm, n, 1024.0 * n, root=n - 1, sequential=sequential,
                            domains=2 if algorithm == "hierarchical" else 1)
    for step in program.steps:
        if step.kinds is not None:
            assert set(step.kinds) == {t.kind for t in step.transfers()}, step.key
    assert program.kinds() == {t.kind for s in program.steps for t in s.transfers()}


def test_double_counting_is_caught():
    # rank 0 reduces into 1 twice: a wrong algorithm, not rounding
    step = Step(("bad",), lambda: [Transfer(0, 1, 8.0, "reduce", ("x",))])
    program = StepProgram([step, step], 2)
    with pytest.raises(ValueError, match="count ranks \\[0\\] twice"):
        execute_symbolic(program, {(0, "x"): frozenset({0}), (1, "x"): frozenset({1})})


def test_bytes_moved_per_rank_match_the_textbook():
    n, size = 8, 8 * 1024.0
    ring = build_program("all-reduce", "ring", n, size)
    sent_by_0 = sum(t.nbytes for s in ring.steps for t in s.transfers() if t.src == 0)
    assert sent_by_0 == pytest.approx(2 * (n - 1) / n * size)      # 2(n-1)/n x S
    a2a = build_program("all-to-all", "direct", n, size)
    assert sum(t.nbytes for t in a2a.steps[0].transfers() if t.src == 0) == \
        pytest.approx((n - 1) / n * size)                             # S/n to each peer


def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("all-reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all-gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == 1.0


def test_infeasible_combinations_say_why():
    with pytest.raises(InfeasibleError, match="power-of-two world, got 6"):
        build_program("all-reduce", "rhd", 6, 1024.0)
    with pytest.raises(InfeasibleError, match="all-to-all has no 'ring' algorithm"):
        build_program("all-to-all", "ring", 4, 1024.0)
    with pytest.raises(InfeasibleError, match="2 or more domains"):
        build_program("all-reduce", "hierarchical", 8, 1024.0, domains=1)
