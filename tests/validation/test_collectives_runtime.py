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
    # (+4 padding), 1 i64: no per-rank array, so the size does not depend on the world
    assert ctypes.sizeof(PkcArgs) == 16 + 8 + 4 * 8 + 16 + 8 + 8 + 16 + 8 + 16 + 24 + 8
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
    from pksim.schedule import Schedule
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
