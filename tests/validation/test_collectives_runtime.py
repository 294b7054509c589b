"""validation/runtime/reference.py and validation/runtime/collectives.py without a GPU, and a small GPU check of
the generated collectives on virtual ranks (marked gpu; skipped without torch, nvcc or a GPU).
"""
from __future__ import annotations

import ctypes

import pytest

from validation.runtime import reference
from validation.runtime.collectives import PkcArgs, PkcReqs


def test_counts_follow_nccl_tests_conventions():
    # --bytes: output per rank (all-gather), input per rank (reduce-scatter, all-to-all),
    # the buffer (all-reduce, broadcast)
    assert reference.count_for_bytes("all-gather", 8, 1 << 20, "bf16") == (1 << 19) // 8
    assert reference.counts("all-gather", 8, 100) == (100, 800)
    assert reference.counts("reduce-scatter", 4, 100) == (400, 100)
    assert reference.counts("all-to-all", 4, 100) == (400, 400)
    assert reference.count_for_bytes("all-reduce", 8, 1 << 20, "fp32") == 1 << 18
    assert reference.nccl_bytes("all-gather", 8, 100, "bf16") == 1600


def test_min_traffic_is_what_one_gpu_must_read_and_write():
    n, w = 1000, 4
    # all-gather: each shard read once (w n), every output written (w x w n)
    assert reference.min_traffic_bytes("all-gather", w, n, "fp32") == 4 * (w * n + w * w * n)
    # all-reduce: every input read, every output written
    assert reference.min_traffic_bytes("all-reduce", w, n, "bf16") == 2 * 2 * w * n
    # broadcast: the root's buffer read once, w outputs written
    assert reference.min_traffic_bytes("broadcast", w, n, "bf16") == 2 * (n + w * n)


def test_ctypes_layout_matches_the_c_struct():
    # abi.h on x86-64: 4 ints, 1 u64, 4 host-array pointers, 2 pointers, u64, 2 ints, 2
    # pointers, the rank-streams array pointer, the table pointer and its u64 size, 5 ints
    # (+4 padding), 1 i64; then the splits pointer and their u64 count, the double alpha, the
    # bias pointer and its u64 count: no per-rank array, so the size does not depend on the world
    assert ctypes.sizeof(PkcArgs) == 16 + 8 + 4 * 8 + 16 + 8 + 8 + 16 + 8 + 16 + 24 + 8 + 5 * 8
    # 3 u64, 5 ints (+4 padding), u64, barriers and spins (2 ints), table_bytes u64
    assert ctypes.sizeof(PkcReqs) == 3 * 8 + 5 * 4 + 4 + 8 + 8 + 8


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is needed for the references and GPU runs")


def test_reference_check_catches_a_wrong_sum(torch):
    world, n = 4, 257
    inputs = {r: torch.randn(n, dtype=torch.bfloat16) for r in range(world)}
    total = sum(x.float() for x in inputs.values())
    outputs = {r: total.to(torch.bfloat16) for r in range(world)}
    assert reference.check("all-reduce", "bf16", world, n, inputs, outputs).ok
    outputs[2] = outputs[2].clone()
    outputs[2][17] += 1.0
    res = reference.check("all-reduce", "bf16", world, n, inputs, outputs)
    assert not res.ok and res.bad == 1 and "rank 2" in res.detail


def test_reference_check_of_copies_is_bit_exact(torch):
    world, n = 2, 33
    inputs = {r: torch.randn(n * world) for r in range(world)}
    outputs = {r: torch.cat([inputs[q][r * n:(r + 1) * n] for q in range(world)]) for r in range(world)}
    assert reference.check("all-to-all", "fp32", world, n, inputs, outputs).ok
    outputs[1][0] = -outputs[1][0] if outputs[1][0] != 0 else 1.0
    assert not reference.check("all-to-all", "fp32", world, n, inputs, outputs).ok


def test_comm_references_catch_wrong_results(torch):
    from validation.runtime import reference_comm as rc
    w = 3
    # all-to-all-v: rank r's blocks for ranks 0..2, packed; rank p receives from 0..2 in order
    s = [2, 0, 3, 1, 1, 0, 0, 4, 2]
    ins = {r: torch.randn(6) for r in range(w)}
    outs = {p: torch.cat([ins[r][sum(s[r * w:r * w + p]):sum(s[r * w:r * w + p + 1])]
                          for r in range(w)]) for p in range(w)}
    assert rc.check("all-to-all-v", "fp32", w, 6, ins, outs, splits=s).ok
    outs[2][3] += 1
    res = rc.check("all-to-all-v", "fp32", w, 6, ins, outs, splits=s)
    # rank 2 receives 3 elements from rank 0, none from 1, then 2 from itself: element 3 is its own
    assert not res.ok and res.bad == 1 and "rank 2 from 2" in res.detail
    # reduce-scatter-v with min and a bias (indexed from the share's place in the input)
    c = [2, 3, 1]
    ins = {r: torch.randn(6, dtype=torch.bfloat16) for r in range(w)}
    bias = torch.randn(4, dtype=torch.bfloat16)
    lo = torch.stack([ins[r].float() for r in range(w)]).min(0).values
    full = lo + bias.float()[torch.arange(6) % 4]
    outs = {0: full[0:2].bfloat16(), 1: full[2:5].bfloat16(), 2: full[5:6].bfloat16()}
    assert rc.check("reduce-scatter-v", "bf16", w, 6, ins, outs, splits=c, reduce_op="min",
                    bias=bias).ok
    # without the bias the same outputs are wrong
    assert not rc.check("reduce-scatter-v", "bf16", w, 6, ins, outs, splits=c, reduce_op="min").ok
    # avg then x alpha: (sum / world) x 0.5
    ins = {r: torch.randn(5) for r in range(w)}
    avg = sum(ins[r] for r in range(w)) / w * 0.5
    assert rc.check("all-reduce", "fp32", w, 5, ins, {r: avg for r in range(w)}, reduce_op="avg",
                    alpha=0.5).ok
    # gather and scatter: bit-exact at the root / from the root
    ins = {r: torch.randn(4 * w) for r in range(w)}
    assert rc.check("gather", "fp32", w, 4, ins, {1: torch.cat([ins[q][:4] for q in range(w)])},
                    root=1).ok
    assert not rc.check("scatter", "fp32", w, 4, ins, {r: ins[1][:4] for r in range(w)}, root=1).ok
    # traffic: the all-gather-v's shares read once and written to every rank
    assert rc.traffic_bytes("all-gather-v", w, 6, "bf16", c) == 2 * (6 + 3 * 6)


@pytest.mark.gpu
@pytest.mark.parametrize("op,alg,mech", [("all-gather", "ring", "tma"),
                                          ("reduce-scatter", "direct", "register"),
                                          ("all-reduce", "two-shot", "copy-engine"),
                                          ("all-reduce", "ring", "tma")])
def test_generated_collective_on_virtual_ranks(op, alg, mech, tmp_path, torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from codegen.build import find_nvcc
    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    import codegen
    from hwmodels.catalog import load_system
    from pksim_core.schedule import Schedule
    from validation.runtime.collectives import Collective, Library, VirtualRanks
    s = Schedule(op=op, shape=(("bytes", 1 << 20),), world=4, algorithm=alg, mechanism=mech,
                 comm_sms=8)
    e = codegen.emit(load_system("h200-virtual"), s, None, tmp_path)
    lib = Library(codegen.build(e.source))
    for world in (2, 4):
        coll = Collective(lib, VirtualRanks(world), 12345, "bf16")
        reference.fill_inputs(coll.inputs(), seed=world)
        coll.run()
        res = reference.check(op, "bf16", world, 12345, coll.inputs(), coll.outputs())
        assert res.ok and coll.guards_intact(), res.detail
