"""Sources off the destinations' 16-byte grid (docs/decisions/D63.md): which moves of the
generated collectives are shifted and in which word they read (pksim_core.shifts, as moves.cuh
plan_head / plan_source / words decide), and what the model charges for it (pksim_core.move_cuts)."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.catalog import load_system
from pksim_core.mechanisms import (move_Bps, move_latency_s, move_time_per_B, register_load_rounds,
                              shift_time_per_B, word_l2_Bps)
from pksim_core.shifts import (aligned16, lean_shifted_sums, move_shifts, shifted_sources,
                          source_shift, word_bytes)
from pksim_core.workloads.phases import kernel_phases, ring_class

H200 = load_system("h200-calibrated")
SHIFTS = st.sampled_from(range(0, 16, 2))


def test_a_shard_of_an_odd_count_of_bf16_is_read_in_2_byte_words():
    # 1 MiB of bf16 over 72 ranks: count = 524288 // 72 = 7281 (odd), a shard 14562 B, and
    # 14562 = 910 x 16 + 2: shard r starts 2r mod 16 bytes off the grid
    assert 524288 // 72 == 7281 and 7281 * 2 % 16 == 2
    # reduce-scatter: shard 1 (at 14562) summed into an output at 0: the head is empty (the
    # destination is on the grid), the source 2 bytes off: words of 2 bytes
    assert source_shift(14562, 0, 14562) == 2 and word_bytes((2,) * 72) == 2
    # all-gather: the input (at 0) into slot 1 (14562, 2 off): a 14-byte head takes the
    # destination to its boundary, after which the source sits 14 bytes off: 14 = 2 x 7
    assert source_shift(0, 14562, 14562) == 14 and word_bytes((14,)) == 2
    # slot 2 (29124 = 1820 x 16 + 4): a 12-byte head, shift 12, words of 4; slot 4 (58248,
    # 8 off): shift 8, words of 8; slot 8 (116496 = 7281 x 16): on the grid
    assert source_shift(0, 29124, 14562) == 12 and word_bytes((12,)) == 4
    assert source_shift(0, 58248, 14562) == 8 and word_bytes((8,)) == 8
    assert move_shifts((0,), 116496, 14562) == () and word_bytes(()) == 16


def test_fp32_shards_are_never_read_in_2_byte_words():
    # an odd count of fp32: count x 4 = 4 mod 8, so shards sit 4, 8 or 12 bytes off: words of
    # 4 or 8 (moves.cuh: 2-byte words only for 2-byte elements)
    count = 7281
    words = {word_bytes(move_shifts((r * count * 4,), 0, count * 4)) for r in range(16)}
    assert words == {4, 8, 16}


def test_the_word_is_the_widest_every_shift_allows():
    # moves.cuh words: every source of a register move in one word, the lowest set bit of any
    # shift: 8 and 4 -> 4; 12 (= 4 x 3) -> 4; 6 -> 2; unshifted sources do not narrow it
    assert word_bytes((8, 4)) == 4 and word_bytes((12,)) == 4 and word_bytes((6, 0)) == 2
    assert word_bytes((0, 8)) == 8 and shifted_sources((0, 8, 2)) == 2
    # a move with no whole vector after its head is all elements: nothing shifted (a 20-byte
    # move into 2 bytes off the grid: a 14-byte head, 6 bytes left)
    assert source_shift(0, 2, 20) == 0 and source_shift(0, 2, 30) == 14
    assert aligned16(0, 4096) and not aligned16(0, 14562)


def test_lean_shifted_sums_from_sm_100_on():
    # moves.cuh kLeanShiftedSums: __CUDA_ARCH__ >= 1000
    assert [lean_shifted_sums(a) for a in ("ampere", "hopper", "blackwell", "rubin")] == \
        [False, False, True, True]
    b200, h100 = load_system("dgx-b200").gpu, load_system("dgx-h100").gpu
    # a shifted register sum of 8 sources loads them one a round there; elsewhere, or aligned,
    # or a copy, as the move says
    assert register_load_rounds(b200, True, 8, (2,) * 8) == 8
    assert register_load_rounds(b200, True, 8, ()) == 1
    assert register_load_rounds(b200, False, 1, (2,)) == 1
    assert register_load_rounds(h100, True, 8, (2,) * 8, rounds=2) == 2


def test_the_kernels_moves_carry_the_shifts_of_their_offsets():
    # all-gather direct at w72, 1 MiB bf16: rank r's slot 2r mod 16 bytes off, each of the 8
    # misalignments on 9 ranks: shifts 16 - 2r mod 16; TMA deals only the aligned ranks' chunks
    moves = kernel_phases("all-gather", "direct", "tma", 72, 1 << 20)[0].moves()
    shifts = Counter(m.shifts for m in moves)
    assert shifts == Counter({(): 9, **{(s,): 9 for s in range(2, 16, 2)}})
    assert all(m.dealt == (m.shifts == ()) for m in moves)
    # reduce-scatter direct: every source of rank r's sum at r x 14562
    rs = kernel_phases("reduce-scatter", "direct", "register", 72, 1 << 20)[0].moves()
    assert Counter(word_bytes(m.shifts) for m in rs) == Counter({2: 36, 4: 18, 8: 9, 16: 9})
    assert all(len(m.shifts) in (0, 72) for m in rs)
    # the ring reduce-scatter's sums: the own shard shifted, the received slot on the grid; each
    # sum phase rotates the ranks over the same shards. 14562-byte shards (2 mod 16) put the
    # ranks' offsets off the grid in a cycle of 8 phases: 8 keys, phase p's that of p + 8
    ring = kernel_phases("reduce-scatter", "ring", "register", 72, 1 << 20)
    phases = [Counter(m.shifts for m in p.moves()) for p in ring[1:-1]]
    assert all(p == phases[0] for p in phases) and phases[0][(2, 0)] == 9
    sums = ring[1:-1]
    assert len({p.key for p in sums}) == 8
    assert all(a.key == b.key for a, b in zip(sums, sums[8:]))
    assert [ring_class(p, 72, 14562) for p in (1, 8, 9, 70)] == [1, 0, 1, 6]
    assert ring_class(5, 70, 14562) == 5          # 70 ranks: no whole cycle, every phase its own
    assert ring_class(5, 72, 14560) == 0          # shards on the grid: one key
    # copy engines: no shifts (cudaMemcpy's own alignment handling is not modelled)
    ce = kernel_phases("all-gather", "direct", "copy-engine", 72, 1 << 20)[0].moves()
    assert all(m.shifts == () for m in ce)


@pytest.mark.parametrize("op, algorithm", [
    ("all-gather", "direct"), ("all-gather", "ring"), ("reduce-scatter", "direct"),
    ("reduce-scatter", "ring"), ("all-reduce", "ring"), ("all-to-all", "direct"),
    ("gather", "direct"), ("scatter", "direct")])
def test_shards_on_the_grid_move_as_before(op, algorithm):
    # 18 MiB over 72 ranks (a multiple of 72 x 128 x 16 bytes, the scale suite's size): every
    # shard starts on 16 bytes: no move shifted, and the copies through copy_range (all-gather,
    # all-to-all, gather, scatter) dealt as before; the rings' copy_to moves pieces
    for mech in ("tma", "register"):
        for step in kernel_phases(op, algorithm, mech, 72, 18 << 20):
            for m in step.moves():
                assert m.shifts == (), (op, algorithm, mech)
                assert m.dealt == (not m.reduce and step.key[0] in ("kag", "ka2a", "kga", "ksc"))


def test_odd_splits_shift_the_v_blocks():
    # reduce-scatter-v at w4 with shares 1001, 2000, 3000, 999 bf16: share r at the sum of the
    # ones before it: 0, 2002, 6002, 12002 bytes (= 2 mod 16 for ranks 1-3), into outputs at 0
    extra = (("splits", "1001,2000,3000,999"),)
    rsv = kernel_phases("reduce-scatter-v", "direct", "register", 4, 13998, extra=extra)[0]
    assert [m.shifts for m in rsv.moves()] == [(), (2,) * 4, (2,) * 4, (2,) * 4]
    # all-gather-v: share r into its slot of every output (at 2002: a 14-byte head, shift 14)
    agv = kernel_phases("all-gather-v", "direct", "tma", 4, 13998, extra=extra)[0]
    assert [m.shifts for m in agv.moves()] == [(), (14,), (14,), (14,)]
    assert [m.dealt for m in agv.moves()] == [True, False, False, False]


def test_an_aligned_move_costs_exactly_what_it_did():
    # shifts () adds nothing: the calibrated H200's register copy to one destination is
    # base + dest = 11.61 + 12.9 = 24.51 ns per KiB, as before D63
    g = H200.gpu
    assert move_time_per_B(g, "register", 1, 1, False, shifts=()) * 1024 * 1e9 == \
        pytest.approx(11.61 + 12.9, rel=1e-9)
    for mech in ("tma", "register"):
        for s, d, red in ((1, 1, False), (1, 8, False), (2, 1, True), (8, 8, True)):
            assert shift_time_per_B(g, mech, s, d, red, ()) == 0.0
            assert move_time_per_B(g, mech, s, d, red, shifts=()) == \
                move_time_per_B(g, mech, s, d, red)
            assert move_Bps(g, mech, s, d, red, 16, 2e12, shifts=()) == \
                move_Bps(g, mech, s, d, red, 16, 2e12)
            assert word_l2_Bps(g, mech, s, d, red, ()) == float("inf")


def test_what_a_shift_costs_in_closed_form():
    g = H200.gpu
    word, l2, realign = 5.194e-9 / 1024, 10620e9, 12.98e-9 / 1024
    assert g.kernel.ldst_move_word_s_per_B == pytest.approx(word)
    # registers: a sum of 8 sources 2 bytes off reads each in 2-byte words, 8 loads a vector
    # where 1 did: 8 x 7 further loads per vector
    assert shift_time_per_B(g, "register", 8, 1, True, (2,) * 8) == pytest.approx(56 * word)
    # a copy into 72 destinations reads its source once per 8 of them (copy_list): 9 x 3
    assert shift_time_per_B(g, "register", 1, 72, False, (4,)) == pytest.approx(27 * word)
    # their L2 sectors: 8 sources x 8 (16 / 2) + 1 destination per payload byte
    assert word_l2_Bps(g, "register", 8, 1, True, (2,) * 8) == pytest.approx(l2 / 65)
    # TMA: a realignment per shifted source (and per read of a copy's source), and a shifted
    # copy costs the one-source staged sum besides
    assert shift_time_per_B(g, "tma", 2, 1, True, (2, 0)) == pytest.approx(realign)
    staged = move_time_per_B(g, "tma", 1, 1, True) + realign
    assert move_time_per_B(g, "tma", 1, 1, False, shifts=(8,)) == pytest.approx(staged)


@settings(max_examples=200, deadline=None)
@given(mech=st.sampled_from(("tma", "register")), sources=st.integers(1, 8),
       dests=st.integers(1, 8), reduce=st.booleans(), data=st.data(),
       sms=st.sampled_from((1, 4, 16, 66, 132)), shared=st.sampled_from((None, 4e11, 4e12)),
       block=st.sampled_from((512.0, 16384.0, 1 << 20)))
def test_a_shifted_move_is_never_cheaper_than_the_aligned_one(mech, sources, dests, reduce,
                                                               data, sms, shared, block):
    """For the same blocks: more SM time per byte, no higher rate, no shorter wait. (Across
    blocks a shifted TMA copy can be faster: it cuts pieces over every block where the aligned
    one deals 32 KiB chunks to fewer; block_moves --shift measured it so at 256 KiB.)"""
    if not reduce:
        sources = 1
    shifts = tuple(data.draw(SHIFTS) for _ in range(sources))
    for name in ("h200-calibrated", "dgx-b200"):
        g = load_system(name).gpu
        assert move_time_per_B(g, mech, sources, dests, reduce, shifts=shifts) >= \
            move_time_per_B(g, mech, sources, dests, reduce)
        assert move_Bps(g, mech, sources, dests, reduce, sms, shared, shifts=shifts) <= \
            move_Bps(g, mech, sources, dests, reduce, sms, shared)
        assert move_latency_s(g, mech, sources, dests, reduce, block, shifts=shifts) >= \
            move_latency_s(g, mech, sources, dests, reduce, block)
        assert register_load_rounds(g, reduce, sources, shifts) >= 1
