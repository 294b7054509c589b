"""The model of the rooted, split-size, send/recv and epilogue kernels (pksim_core.workloads.varsize_ops,
pksim_core.workloads.phases): what their programs and phases move, and how their predictions relate
to the plain collectives' (which the kernels generalise)."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, InfeasibleError
from pksim_core.program import execute_symbolic
from pksim_core.schedule import Schedule
from pksim_core.simulate import predict
from pksim_core.workloads import varsize_ops
from pksim_core.workloads.collectives import build_program, expected_state, initial_state
from pksim_core.workloads.phases import bytes_moved, kernel_phases

H200V = load_system("h200-virtual-calibrated")
H100 = load_system("dgx-h100")


def sched(op, nbytes=1 << 24, world=8, alg="direct", mech="tma", sms=16, **extra):
    return Schedule(op=op, shape=(("bytes", nbytes),), world=world, algorithm=alg, mechanism=mech,
                    comm_sms=sms, extra=tuple(sorted(extra.items())))


A2AV = "10,0,30,40;5,6,7,8;100,0,0,3;7,7,7,7"     # row r: what rank r sends to ranks 0..3


def test_splits_and_peers_parse_strictly():
    assert varsize_ops.parse_splits("all-to-all-v", "10,0,30,40;5,6,7,8;100,0,0,3;7,7,7,7", 4) == A2AV
    assert varsize_ops.parse_splits("all-gather-v", " 3, 0,5,1 ", 4) == "3,0,5,1"
    for op, text, why in [("all-gather-v", "1,2,3", "4 shares"), ("all-to-all-v", "1,2", "16 sizes"),
                          ("all-gather-v", "1,-2,3,4", "negative"), ("all-gather-v", "0,0,0,0", "every"),
                          ("all-reduce", "1,2,3,4", "takes no split")]:
        with pytest.raises(ConfigError, match=why):
            varsize_ops.parse_splits(op, text, 4)
    assert varsize_ops.parse_peers("+1, -1", 4) == "+1,-1"
    assert varsize_ops.parse_peers("0>3,1>2", 4) == "0>3,1>2"
    with pytest.raises(ConfigError, match="not a rank"):
        varsize_ops.parse_peers("0>4", 4)
    # a halo exchange: every rank to both neighbours, periodic
    assert varsize_ops.pairs("+1,-1", 4) == [(0, 1), (1, 2), (2, 3), (3, 0), (0, 3), (1, 0), (2, 1), (3, 2)]


def test_buffers_are_the_largest_rank_total():
    extra = (("splits", A2AV),)
    # sends: rows 80, 26, 103, 28; receives: columns 122, 13, 44, 58 -> 122... and 103 -> 122
    assert varsize_ops.buffer_elems("all-to-all-v", extra, 4, 0) == 122
    assert varsize_ops.buffer_elems("all-gather-v", (("splits", "3,0,5,1"),), 4, 0) == 9
    # send-recv +1,-1 of 100 elements: every rank sends two and receives two messages
    assert varsize_ops.buffer_elems("send-recv", (("peers", "+1,-1"),), 4, 100) == 200
    assert varsize_ops.split_list("send-recv", (("peers", "+1"),), 3, 5) == [0, 5, 0, 0, 0, 5, 5, 0, 0]


@pytest.mark.parametrize("op,extra", [
    ("all-to-all-v", (("splits", A2AV),)),
    ("all-gather-v", (("splits", "3,0,5,1"),)),
    ("reduce-scatter-v", (("splits", "3,0,5,1"),)),
    ("send-recv", (("peers", "+1,-1"),)),
    ("send-recv", (("peers", "0>3,2>2"),)),
])
def test_split_programs_produce_their_collective(op, extra):
    program = build_program(op, "direct", 4, 100.0 * 2, extra=extra)
    state = execute_symbolic(program, initial_state(op, 4, extra=extra, elems=100))
    want = expected_state(op, 4, extra=extra, elems=100)
    assert want and all(state.get(k) == v for k, v in want.items())


def test_split_phases_move_exactly_the_splits():
    e = 2  # bf16
    # all-to-all-v: every block read once and written once: 2 x the sum of the matrix
    steps = kernel_phases("all-to-all-v", "direct", "tma", 4, 122 * e, dtype="bf16",
                          extra=(("splits", A2AV),))
    total = sum(int(v) for row in A2AV.split(";") for v in row.split(","))
    assert bytes_moved(steps) == (total * e, total * e)
    # all-gather-v: a share read once, written to every rank (4x); the empty share moves nothing
    steps = kernel_phases("all-gather-v", "direct", "register", 4, 9 * e, dtype="bf16",
                          extra=(("splits", "3,0,5,1"),))
    assert bytes_moved(steps) == (9 * e, 4 * 9 * e)
    assert len(steps[0].moves()) == 3
    # reduce-scatter-v: share r read from every rank (4x), written once
    steps = kernel_phases("reduce-scatter-v", "direct", "tma", 4, 9 * e, dtype="bf16",
                          extra=(("splits", "3,0,5,1"),))
    assert bytes_moved(steps) == (4 * 9 * e, 9 * e)
    # the direct reduce: only the root's blocks work (one move, the GPU's knee to itself)
    steps = kernel_phases("reduce", "direct", "tma", 4, 1024, root=2)
    (m,) = steps[0].moves()
    assert (m.issuer, m.sources, m.dests, m.active) == (2, (0, 1, 2, 3), (2,), 1)
    # no copy-engine kernel reduces with an op, nor reduces to a root
    assert kernel_phases("reduce", "two-shot", "copy-engine", 4, 1024) is None
    assert kernel_phases("all-reduce", "two-shot", "copy-engine", 4, 1024,
                         extra=(("reduce_op", "max"),)) is None


@pytest.mark.parametrize("system", [H200V, H100], ids=lambda s: s.name)
@pytest.mark.parametrize("v_op,plain_op,mech", [("all-to-all-v", "all-to-all", "register"),
                                                ("all-gather-v", "all-gather", "tma"),
                                                ("reduce-scatter-v", "reduce-scatter", "register")])
def test_even_splits_predict_the_plain_collective(system, v_op, plain_op, mech):
    # with even splits the -v kernel makes the plain kernel's moves: the same prediction
    w, n = 8, 1 << 24
    shard = n // 2 // w                                     # elements per block (bf16)
    splits = (";".join([",".join([str(shard)] * w)] * w) if v_op == "all-to-all-v"
              else ",".join([str(shard)] * w))
    v = predict(system, sched(v_op, n if v_op != "all-gather-v" else n, mech=mech, splits=splits),
                cold=True)
    p = predict(system, sched(plain_op, n, mech=mech), cold=True)
    assert v.time_s == pytest.approx(p.time_s, rel=1e-9)


def test_an_epilogue_moves_what_the_sum_moves():
    # the same moves as the plain sum (D53); over NVLink (dgx-h100) its arithmetic rides in the
    # shadow of the far round trips: the same time
    plain = predict(H100, sched("all-reduce", alg="two-shot"), cold=True)
    for extra in ({"reduce_op": "max"}, {"reduce_op": "avg", "epilogue": "scale-bias"}):
        steps = kernel_phases("all-reduce", "two-shot", "tma", 8, 1 << 24, extra=tuple(extra.items()))
        assert bytes_moved(steps) == bytes_moved(kernel_phases("all-reduce", "two-shot", "tma", 8,
                                                               1 << 24))
        assert predict(H100, sched("all-reduce", alg="two-shot", **extra),
                       cold=True).time_s == plain.time_s
    # only the kernels that implement it
    with pytest.raises(InfeasibleError, match="reduce op or an epilogue"):
        predict(H100, sched("all-reduce", alg="ring", reduce_op="min"))


def test_an_epilogue_costs_its_routines_inside_one_gpu():
    # h200-virtual-calibrated, 8 ranks of 4 blocks (SM-bound: with 16 the HBM binds and the
    # epilogue is hidden, as measured): a TMA two-shot with a max costs what the sum costs (no
    # op term for TMA, D56), with a bias more; by registers (8 sources: one vector a source in
    # flight either way) an op costs nothing, a bias more
    def t(mech, **extra):
        return predict(H200V, sched("all-reduce", alg="two-shot", mech=mech, sms=4, **extra),
                       cold=True).time_s
    assert t("tma", reduce_op="max") == t("tma")
    assert t("tma", epilogue="bias") > t("tma")
    assert t("register", reduce_op="max") == t("register")
    assert t("register", epilogue="bias") > t("register")
    # at 4 ranks the register op costs too (the plain sum keeps two vectors a source in flight)
    four = dict(world=4, sms=4)
    assert predict(H200V, sched("all-reduce", alg="two-shot", mech="register", reduce_op="avg",
                                **four), cold=True).time_s > \
        predict(H200V, sched("all-reduce", alg="two-shot", mech="register", **four),
                cold=True).time_s


def test_uneven_splits_cost_their_largest_rank():
    # one rank gathering 7x the others' share takes longer than an even all-gather-v of the
    # same total, and the two-shot reduce spreads the work the direct one gives the root
    even = predict(H100, sched("all-gather-v", splits="1000000,1000000,1000000,1000000", world=4))
    skew = predict(H100, sched("all-gather-v", splits="2800000,400000,400000,400000", world=4))
    assert skew.time_s > even.time_s
    direct = predict(H200V, sched("reduce", 1 << 26, mech="register"), cold=True)
    two_shot = predict(H200V, sched("reduce", 1 << 26, alg="two-shot", mech="register"), cold=True)
    assert two_shot.time_s < direct.time_s
