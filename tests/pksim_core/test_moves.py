"""pksim_core.move_cuts and the generated collectives' moves as the collective model costs them: grid
start, dealt and cut blocks, latencies, fills, messages and fan-out writes."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim_core.simulate import predict
from tests.pksim_core.cases import H100, sched


def test_grid_start_beyond_one_block_per_sm():
    # dgx-h100 (132 SMs, move_start 694.1 ns, thread_start 21.18 ps, carried from the H200
    # by rule C2): a moving kernel starts in 0.6941 us up to one block per SM; each thread of
    # the blocks beyond adds 21.18 ps: 133 blocks of 256 threads 0.6941 us + 5.422 ns, 264 of
    # 512 0.6941 us + 132 x 512 x 21.18 ps = 2.1255 us.
    from hwmodels.sm import grid_start_s
    gpu = H100.gpu
    assert grid_start_s(gpu, 4, 512) == pytest.approx(0.6941e-6, rel=1e-9)
    assert grid_start_s(gpu, 132, 512) == pytest.approx(0.6941e-6, rel=1e-9)
    assert grid_start_s(gpu, 133, 256) == pytest.approx(0.6941e-6 + 256 * 21.18e-12, rel=1e-9)
    assert grid_start_s(gpu, 264, 512) == pytest.approx(2.1255e-6, rel=1e-3)


def test_tma_copies_use_only_the_blocks_dealt_a_chunk():
    # collective.cuh copy_range deals 32 KiB stage chunks round-robin over a rank's blocks:
    # an all-gather of 64 KiB at w2 moves a 32 KiB shard a rank, one chunk, so one block
    # works whether 16 or 66 are launched (their grids start alike, one block per SM or
    # fewer); 1 MiB: 16 chunks a rank, so 16 blocks and 66 take the same time, 8 longer.
    # Registers split the shard over every block: more blocks, more issue rate.
    s = load_system("h200-virtual")

    def t(mech, nbytes, sms):
        return predict(s, sched("all-gather", nbytes=nbytes, world=2, algorithm="direct",
                                mechanism=mech, comm_sms=sms)).time_s
    assert t("tma", 65536, 16) == pytest.approx(t("tma", 65536, 66), rel=1e-9)
    assert t("tma", 1 << 20, 16) == pytest.approx(t("tma", 1 << 20, 66), rel=1e-9)
    assert t("tma", 1 << 20, 8) > t("tma", 1 << 20, 16)
    assert t("register", 65536, 66) < t("register", 65536, 16)


def test_serial_tma_moves_wait_for_their_stores_to_reach_the_l2():
    # one rank of an all-to-all on h200-virtual (w = 4, 4 KiB blocks): its 4 copies run one
    # after another (serial = 4); each waits one loaded HBM latency L for its first read, and
    # with TMA each but the last also waits for its bulk stores to reach the L2 (one L2
    # latency, L2) before the next starts: latency = 4 L + 3 L2 (registers: 4 L).
    from hwmodels.topology import Topology
    from pksim_core.mechanisms.flow import move_flow
    from pksim_core.program import Move
    s = load_system("h200-virtual")
    topo = Topology.build(s, 4)
    m = Move(0, 4096, (0,), (1,), serial=4, dealt=True)
    L, L2 = s.gpu.hbm.latency_s, s.gpu.l2.latency_s
    for mech, expected in (("tma", 4 * L + 3 * L2), ("register", 4 * L)):
        spec = move_flow(topo, sched("all-to-all", nbytes=16384, world=4, algorithm="direct",
                                     mechanism=mech, comm_sms=8), m, 4096, False, 1.0)
        assert spec.latency_s == pytest.approx(expected, rel=1e-12), mech


def test_a_register_sum_loading_its_sources_in_rounds_waits_a_read_per_round():
    # the two-shot all-reduce by registers in fp32 loads more than 4 sources 4 at a time
    # (all_reduce.cuh reduce_to<C, 4>; bf16 all 8 at once): at w = 8 in two rounds, the first a loaded HBM
    # latency L on h200-virtual, the second transfer.load_round_ns R; the 8 -> 8 move then
    # waits L + R + 14 buffers x move_buffer_latency B (8 + 8 - 2) + the run-time set of
    # destinations D (transfer.dest_set_latency), TMA L + 14 B + D (TMA ignores the rounds)
    # + its first chunk's loads F (pksim_core.mechanisms.tma_fill_s: w sources x the block's 4096 / 4
    # bytes, under a stage slot of 32 KiB / (w + 1), at the per-SM TMA rate); at w = 4, one
    # round.
    from hwmodels.topology import Topology
    from pksim_core.mechanisms.flow import move_flow
    from pksim_core.workloads.phases import _ar_two_shot, two_shot_loads
    assert two_shot_loads("fp32") == 4 and two_shot_loads("bf16") == 8
    s = load_system("h200-virtual")
    L, B = s.gpu.hbm.latency_s, s.gpu.kernel.move_buffer_latency_s
    R, D = s.gpu.kernel.load_round_s, s.gpu.kernel.dest_set_latency_s
    assert R > 0 and D > 0
    for w, rounds in ((8, 2), (4, 1), (2, 1)):
        topo = Topology.build(s, w)
        assert _ar_two_shot(w, 4096 * w, 0, False, "bf16")[0].moves()[0].load_rounds == 1
        (step,) = _ar_two_shot(w, 4096 * w, 0, False, "fp32")
        m = step.moves()[0]
        assert m.load_rounds == rounds
        F = w * 1024 / s.gpu.transfer.tma_local_Bps_per_sm   # 1 KiB a block < the slot
        for mech, waits, fill in (("register", rounds, 0.0), ("tma", 1, F)):
            spec = move_flow(topo, sched("all-reduce", nbytes=4096 * w, world=w,
                                         algorithm="two-shot", mechanism=mech, comm_sms=4),
                             m, 4096, False, 1.0)
            assert spec.latency_s == pytest.approx(L + (waits - 1) * R + (2 * w - 2) * B + D
                                                   + fill, rel=1e-12), (w, mech)


def test_a_set_of_destinations_costs_its_latency_one_destination_does_not():
    # pksim_core.mechanisms.move_fixed_latency_s on h200-virtual: buffers beyond one source and one
    # destination at move_buffer_latency B each, and a run-time set of destinations (more
    # than one: the kernels fill it per peer) dest_set_latency D once:
    # S2 -> D1: 1 B; S1 -> D2: 1 B + D; S8 -> D8: 14 B + D
    from pksim_core.mechanisms import move_fixed_latency_s
    g = load_system("h200-virtual").gpu
    B, D = g.kernel.move_buffer_latency_s, g.kernel.dest_set_latency_s
    assert move_fixed_latency_s(g, 1, 1) == 0.0
    assert move_fixed_latency_s(g, 2, 1) == pytest.approx(B)
    assert move_fixed_latency_s(g, 1, 2) == pytest.approx(B + D)
    assert move_fixed_latency_s(g, 8, 8) == pytest.approx(14 * B + D)
    # in a whole prediction: the direct all-gather at 4 KiB writes 2 destinations, the
    # broadcast one; on a system without the set's latency the all-gather is D faster
    sc = sched("all-gather", nbytes=4096, world=2, algorithm="direct", mechanism="register",
               comm_sms=16)
    s = load_system("h200-virtual")
    zero = load_system("h200-virtual", ["gpu.transfer.dest_set_latency_ns=0"])
    assert predict(s, sc).time_s - predict(zero, sc).time_s == pytest.approx(D, rel=1e-6)
    bc = sc.with_(op="broadcast")
    assert predict(s, bc).time_s == pytest.approx(predict(zero, bc).time_s, rel=1e-12)


def test_a_tma_sum_waits_for_its_first_chunk_of_every_source():
    # pksim_core.mechanisms.tma_fill_s: S sources x min(the block's payload, 32 KiB / (S + 1)) at the
    # per-SM TMA rate r before the first store. 2 sources, 16 KiB a block: the slot of
    # 10922.7 B binds, 2 x 10922.7 / r; 4 KiB a block: 2 x 4096 / r; none for registers.
    from pksim_core.mechanisms import tma_fill_s
    g = load_system("h200-virtual").gpu
    r = g.transfer.tma_local_Bps_per_sm
    assert tma_fill_s(g, 16384, 2) == pytest.approx(2 * 32768 / 3 / r)
    assert tma_fill_s(g, 4096, 2) == pytest.approx(2 * 4096 / r)
    assert tma_fill_s(g, 0, 2) == 0.0
    # the one-shot all-reduce at w2, 1 MiB on 66 blocks a rank (16 KiB a block, 2 sources):
    # TMA waits the slot's fill, registers do not
    from hwmodels.topology import Topology
    from pksim_core.mechanisms.flow import move_flow
    from pksim_core.workloads.phases import _ar_one_shot
    s = load_system("h200-virtual")
    topo = Topology.build(s, 2)
    m = _ar_one_shot(2, 1 << 20, 0, False, "bf16")[0].moves()[0]
    lat = {mech: move_flow(topo, sched("all-reduce", nbytes=1 << 20, world=2,
                                       algorithm="direct", mechanism=mech, comm_sms=66),
                           m, m.payload, False, 1.0).latency_s
           for mech in ("tma", "register")}
    assert lat["tma"] - lat["register"] == pytest.approx(2 * 32768 / 3 / r, rel=1e-9)


def test_copy_engine_reduction_kernels_get_a_block_per_32_kib():
    # collective.cuh ce_reduce launches ceil(n / (512 threads x 8 bf16 x 4)) blocks, i.e. one
    # per 32 KiB of its sum, at most the schedule's blocks per rank: 32 KiB -> 1, 512 KiB ->
    # 16, 16 MiB -> 512, capped at 66
    from pksim_core.move_cuts import ce_reduce_blocks
    assert [ce_reduce_blocks(66, b) for b in (4096, 32768, 32769, 512 << 10, 16 << 20)] == \
        [1, 1, 2, 16, 66]
    # so the 1 MiB reduce-scatter by copy engines at w2 sums its 512 KiB chunk on 16 blocks
    # whatever comm_sms says: 66 and 16 blocks a rank predict the same time
    s = load_system("h200-virtual")
    t = {b: predict(s, sched("reduce-scatter", nbytes=1 << 20, world=2, algorithm="direct",
                             mechanism="copy-engine", comm_sms=b)).time_s for b in (16, 66)}
    assert t[16] == pytest.approx(t[66], rel=1e-12)
    assert predict(s, sched("reduce-scatter", nbytes=1 << 20, world=2, algorithm="direct",
                            mechanism="copy-engine", comm_sms=4)).time_s > t[16]


def test_piece_blocks_counts_the_blocks_the_kernels_cut_gives_work():
    # collective.cuh block_piece: whole 128-byte lines, whole 4 KiB once a block's share is
    # 64 KiB or more; the largest piece sets the time, so payload / largest piece.
    from pksim_core.move_cuts import piece_blocks
    KiB, MiB = 1024, 1024 * 1024
    assert piece_blocks(16, 4 * KiB) == 16            # 256 B = 2 lines each
    assert piece_blocks(132, 4 * KiB) == 32           # 31 B -> one 128 B line: 4096 / 128
    assert piece_blocks(132, 1 * MiB) == pytest.approx(MiB / 8064)   # 7943.8 B -> 63 lines
    assert piece_blocks(33, 1024 * MiB) == pytest.approx(1024 * MiB / (7944 * 4096))
    assert piece_blocks(132, 64 * MiB) == pytest.approx(64 * MiB / (125 * 4096))  # 127.1 KiB
    assert piece_blocks(4, 100) == 1                  # one block moves a sub-line payload
    # as the kernels compute it (elements of 2 bytes: ceil(n / parts) rounded up to the
    # alignment), over a grid of payloads and block counts: within 1 % and never above blocks
    for parts in (1, 4, 16, 33, 66, 132, 264):
        for payload in (2 * KiB, 6 * KiB, 100 * KiB, 3 * MiB, 17 * MiB + 6, 256 * MiB):
            n = payload // 2
            share = -(-n // parts) * 2
            align = 4096 if share >= 64 * KiB else 128
            step = -(-share // align) * align
            kernel = max(1.0, min(parts, payload / step))
            assert piece_blocks(parts, payload) == pytest.approx(kernel, rel=0.01), (parts, payload)
            assert 1 <= piece_blocks(parts, payload) <= parts


def test_fanout_writes_of_register_moves():
    # dgx-h100 on pk-hopper (ldst_fanout_write 0.08609, reach 1.169 MiB): a register move to 8
    # destinations of a 1.169 MiB payload uses 1 + 0.08609 x log2(8) x 1 / (1 + 1) = 1.129135
    # of the memory per destination byte; one destination, TMA, or no payload: 1.
    from pksim_core.mechanisms import dest_writes
    gpu = H100.gpu
    MiB = 1024.0**2
    assert dest_writes(gpu, "register", 8, 1.169 * MiB) == pytest.approx(1.129135)
    assert dest_writes(gpu, "register", 1, 100 * MiB) == 1.0
    assert dest_writes(gpu, "tma", 8, 100 * MiB) == 1.0
    assert dest_writes(gpu, "register", 8, 0.0) == 1.0
    # never lighter with more destinations or a larger payload
    for d in (2, 3, 4, 8):
        for p in (1 * MiB, 64 * MiB, 1024 * MiB):
            assert dest_writes(gpu, "register", d, p) <= dest_writes(gpu, "register", d + 1, p)
            assert dest_writes(gpu, "register", d, p) <= dest_writes(gpu, "register", d, 2 * p)


def test_tma_messages_of_a_sum_grow_with_its_sources_squared():
    # collective.cuh: a TMA copy moves 32 KiB chunks (1 load + D stores each); a sum of S
    # sources cuts the 32 KiB stage into S + 1 slots (S loads + D stores per slot). Per KiB:
    # copy 1 -> 1: 2 / 32; sum 2 -> 1: 3 x 3 / 32; sum 8 -> 8: 16 x 9 / 32 = 4.5 messages.
    from pksim_core.move_cuts import tma_messages_per_B
    from pksim_core.mechanisms import move_time_per_B
    KiB = 1024.0
    assert tma_messages_per_B(1, 1, False) * KiB == pytest.approx(2 / 32)
    assert tma_messages_per_B(2, 1, True) * KiB == pytest.approx(9 / 32)
    assert tma_messages_per_B(8, 8, True) * KiB == pytest.approx(4.5)
    # on h200-single with pk-hopper (41.4414 cycles = 20.93 ns a message at 1980 MHz, fitted
    # on block_moves) the sum of 8 into 1 spends 20.93 x 81 / 32 = 53.0 ns per KiB on messages
    # beyond its linear terms
    gpu = load_system("h200-single").gpu
    t = gpu.kernel
    linear = (t.tma_move_base_s_per_B + t.tma_move_dest_s_per_B + t.tma_move_reduce_s_per_B
              + 8 * t.tma_move_source_s_per_B)
    extra = move_time_per_B(gpu, "tma", 8, 1, True) - linear
    assert extra * KiB == pytest.approx(20.93e-9 * 81 / 32, rel=1e-9)
    # registers send no messages
    assert move_time_per_B(gpu, "register", 8, 1, True) == pytest.approx(
        t.ldst_move_base_s_per_B + t.ldst_move_dest_s_per_B + t.ldst_move_reduce_s_per_B
        + 8 * t.ldst_move_source_s_per_B, rel=1e-12)


def test_epilogue_time_per_byte_follows_the_routines():
    # h200-calibrated: tma_move_bias 227.5 ns per stage chunk, ldst_move_epilogue 52.37 ns/KiB
    # (x S), ldst_move_bias 30.62 ps per element (docs/decisions/D56.md)
    from pksim_core.mechanisms import epilogue_time_per_B, move_time_per_B
    gpu = load_system("h200-calibrated").gpu
    KiB = 1024
    # TMA: a sum of 2 sources cuts its 32 KiB stage in 3 chunks: 3 x 227.5 ns / 32 KiB a byte
    assert epilogue_time_per_B(gpu, "tma", 2, "bias") == pytest.approx(3 * 227.5e-9 / (32 * KiB))
    assert epilogue_time_per_B(gpu, "tma", 8, "bias") == pytest.approx(9 * 227.5e-9 / (32 * KiB))
    assert epilogue_time_per_B(gpu, "tma", 4, "op") == 0.0
    # registers: 52.37 ns/KiB / S up to 4 sources, none past; a bias per element: bf16 30.62 ps
    # / 2 B, fp32 / 4 B
    assert epilogue_time_per_B(gpu, "register", 2, "op") == pytest.approx(52.37e-9 / KiB / 2)
    assert epilogue_time_per_B(gpu, "register", 8, "op") == 0.0
    assert epilogue_time_per_B(gpu, "register", 8, "bias") == pytest.approx(30.62e-12 / 2)
    assert epilogue_time_per_B(gpu, "register", 4, "bias", 4.0) == pytest.approx(
        52.37e-9 / KiB / 4 + 30.62e-12 / 4)
    assert epilogue_time_per_B(gpu, "register", 4, "") == 0.0
    # added to the sum's time per byte, not to a copy's
    plain = move_time_per_B(gpu, "register", 2, 1, True)
    assert move_time_per_B(gpu, "register", 2, 1, True, epilogue="op") == pytest.approx(
        plain + 52.37e-9 / KiB / 2)
    assert move_time_per_B(gpu, "register", 1, 1, False, epilogue="bias") == \
        move_time_per_B(gpu, "register", 1, 1, False)


@pytest.mark.parametrize("mechanism", ["tma", "register"])
@pytest.mark.parametrize("shifts", [(), (8,)])
def test_a_copy_to_many_destinations_is_a_move_per_batch_of_eight(mechanism, shifts):
    # collective.cuh copy_list: 8 destinations (PKC_SET_SLOTS) a batch, each batch a whole
    # copy that reads the source again (D64): 72 destinations = 9 moves to 8, 20 = 2 x 8 + 4;
    # up to 8 destinations one move whose time grows with each destination
    from pksim_core.mechanisms import move_time_per_B
    gpu = load_system("h200-virtual-calibrated").gpu

    def t(d):
        return move_time_per_B(gpu, mechanism, 1, d, False, shifts=shifts)
    assert t(72) == pytest.approx(9 * t(8), rel=1e-12)
    assert t(20) == pytest.approx(2 * t(8) + t(4), rel=1e-12)
    assert all(t(d) < t(d + 1) for d in range(1, 72))
