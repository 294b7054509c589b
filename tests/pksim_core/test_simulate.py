"""The simulator against closed forms, the bound, the analytical backend, and itself."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwmodels.catalog import list_systems, load_system
from hwmodels.errors import InfeasibleError
from pksim_core.collective_model import build, simulate
from pksim_core.nccl import nccl_schedule
from pksim_core.schedule import Schedule
from pksim_core.simulate import predict
from pksim_core.kernel_contract import SPLIT_OPS
from pksim_core.workloads.collectives import COLLECTIVES, algorithms_for
from tests.pksim_core.cases import GiB, H100, sched


def test_one_nvlink_hop():
    # broadcast from rank 0 to rank 1 on dgx-h100 with TMA and every SM (issue not binding).
    # The generated broadcast pulls: rank 1 reads the root's buffer (a read is a round trip,
    # 2 x 0.31 us path latency, plus a TMA message's round trip t = tma_message_half_bytes /
    # gpu.transfer_remote: tma_message_half_bytes / tma_write_per_sm), the root copies its own
    # locally (HBM, far from binding); the writes are local. The ranks are separate GPUs, so
    # the kernel meets both at its entry and exit (D43): an entry barrier (the arrivals'
    # 0.31 us path, a release 0.5322 us and a system-scope flag 0.9053 us, dgx-h100's figures
    # carried from h200-calibrated, D71) and, after the data and a bulk-store round trip t, the
    # exit's release and flag (1.4375 us): launch (a kernel on a stream, 3.423 us, and a moving
    # kernel's start, 0.6941 us; its grid of 132 blocks, one per SM, adds nothing) + 1.7475 us + 0.62 us + t + S / (450 GB/s x
    # 0.78 TMA efficiency) + t + 1.468 us. S = 1 GiB: 1073741824 / 351e9 = 3.059094 ms.
    from hwmodels.sm import grid_start_s
    from pksim_core.mechanisms import tma_latency_s
    s = H100
    p = predict(s, sched("broadcast", world=2, algorithm="direct"))
    link = s.gpu.nvlink.bandwidth_Bps * s.gpu.nvlink.efficiency_tma
    lat = 2 * s.gpu.nvlink.latency_s
    t = tma_latency_s(s.gpu, remote=True)
    r = s.gpu.transfer_remote
    assert t == pytest.approx(r.tma_message_half_B / r.tma_write_Bps_per_sm)
    assert grid_start_s(s.gpu, 132, 256) == pytest.approx(0.6941e-6)
    flag = s.gpu.sync.release_s + s.gpu.sync.flag_latency_sys_s
    assert flag == pytest.approx(1.4375e-6)
    barriers = s.gpu.nvlink.latency_s + 2 * flag
    expected = s.gpu.sync.stream_launch_s + 0.6941e-6 + lat + 2 * t + GiB / link + barriers
    assert p.time_s == pytest.approx(expected, rel=1e-9)
    assert p.time_s == pytest.approx(3.423e-6 + 0.6941e-6 + 0.62e-6 + 2 * t + 1073741824 / 351e9
                                     + 1.7475e-6 + 1.4375e-6, rel=1e-6)
    assert p.bound_resource in ("nvl_out", "nvl_in")


def test_a_ring_step_reads_what_the_previous_step_wrote_from_l2_when_it_fits():
    # all-gather ring on h200-virtual, w = 8: every forward step reads the shard the
    # previous step wrote. 16 MiB: shards of 2 MiB, 8 x 2 = 16 MiB written a step, within
    # the 60 MiB L2: the step's read goes to l2[0] (weight 1), HBM gets only the write.
    # 1 GiB: 8 x 128 MiB does not fit: read and write both on HBM. The first step reads the
    # caller's (cold) input from HBM either way.
    from hwmodels.topology import Topology
    from pksim_core.mechanisms.flow import move_flow, warm_sources
    from pksim_core.program import Move
    s = load_system("h200-virtual")
    topo = Topology.build(s, 8)
    MiB = 1024 * 1024
    for total, warm in ((16 * MiB, 1), (1024 * MiB, 0)):
        shard = total / 8
        sc = sched("all-gather", nbytes=total, world=8, algorithm="ring",
                   mechanism="register", comm_sms=16)
        fwd = Move(0, shard, (0,), (1,), warm=1)
        assert warm_sources(topo, fwd, False) == warm
        usage = dict(move_flow(topo, sc, fwd, shard, False, 1.0).usage)
        assert usage.get("l2[0]", 0.0) == warm
        assert usage["hbm[0]"] == pytest.approx(2 - warm)
        first = Move(0, shard, (0,), (0, 1))
        assert "l2[0]" not in dict(move_flow(topo, sc, first, shard, False, 1.0).usage)
    # a working set already resident in L2: nothing more to say
    assert warm_sources(topo, Move(0, MiB, (0,), (1,), warm=1), True) == 0



def test_warm_reads_make_a_ring_faster_never_slower(monkeypatch):
    # the same 16 MiB ring all-gather (w = 8) with its forward reads on HBM instead: slower,
    # since each step then moves 2 bytes of HBM traffic per payload byte instead of 1
    from pksim_core import collective_model
    from pksim_core.mechanisms import flow
    s = load_system("h200-virtual")
    sc = sched("all-gather", nbytes=16 << 20, world=8, algorithm="ring", mechanism="register",
               comm_sms=16)
    warm = predict(s, sc).time_s
    monkeypatch.setattr(flow, "warm_sources", lambda topo, m, resident: 0)
    collective_model.FLOWS.clear()
    cold = predict(s, sc).time_s
    collective_model.FLOWS.clear()
    assert warm < cold


def test_cold_inputs_come_from_hbm_and_are_never_faster():
    # A 1 MiB all-reduce on 8 virtual ranks: its working set (2 x 1 MiB x 8 = 16 MiB) fits
    # in the 50 MiB L2, so by default its moves use the L2 resource; with cold=True (the
    # caller has written something else over the L2, as the validation harness does) they
    # use HBM, whose rate is lower, so the prediction is never faster (a ring still reads the
    # chunk the previous step has just written from L2); the flows of the two are cached
    # apart (a cold prediction after a warm one is not the warm one). On the calibrated
    # system: L2 and HBM are separate resources in the model, so with h200-virtual's L2 figure
    # (5.5 TB/s, barely above HBM's 4.3) a cold ring that splits its traffic between the two
    # comes out 3 % faster than a warm one that puts it all on the L2.
    s = load_system("h200-virtual-calibrated")

    def used(model):
        return {name.cls for classes in model.classes.values()
                for flow in classes for name, _ in flow.usage}

    for alg, mech in (("direct", "register"), ("two-shot", "tma"), ("ring", "register")):
        sc = sched("all-reduce", nbytes=1 << 20, world=8, algorithm=alg, mechanism=mech,
                   comm_sms=16)
        warm = build(s, sc)
        cold = build(s, sc, cold=True)
        assert "l2" in used(warm) and "hbm" not in used(warm)
        assert "hbm" in used(cold)
        assert ("l2" in used(cold)) == (alg == "ring")
        assert simulate(cold).time_s >= simulate(warm).time_s
    # 1 GiB never fits: cold changes nothing
    big = sched("all-reduce", nbytes=GiB, world=8, algorithm="direct", mechanism="register",
                comm_sms=16)
    assert predict(s, big, cold=True).time_s == predict(s, big).time_s


def test_hbm_copy_between_virtual_ranks():
    # h200-virtual, 2 ranks, all-gather direct as generated: each rank reads its half (S/2)
    # once and stores it into both outputs (a 1 -> 2 move: S/2 read, 2 x S/2 written, each
    # written byte using w = 1 + fanout x log2(2) x (S/2) / (S/2 + reach) of the memory,
    # pksim_core.mechanisms.dest_writes). The blocks of both ranks (66 each, cutting S/2 into pieces of
    # whole 4 KiB: pksim_core.move_cuts.piece_blocks, 65.998 blocks' worth each) issue together at
    # soft_min(n / tau(1, 2), C / 3, knee), capped by the fan-out's ceiling C / (1 + 2w);
    # tau(1, 2) = base + 2 x dest per byte (pksim_core.mechanisms.move_time_per_B), the profile's bend
    # where the SMs meet the memory; each rank gets half. The first read waits one HBM latency
    # L, the last writes drain into the L2 (one L2 latency, L2) before the kernel ends (its one
    # phase signals nobody); the second destination buffer adds the profile's
    # move_buffer_latency (b) and the run-time set of two destinations its dest_set_latency
    # (d); the kernel's start g (transfer.move_start; its grid of 2 x 66 blocks, one per SM, adds
    # nothing): time = launch + g + L + b + d + (S/2) / (rate/2) + L2.
    from hwmodels.sm import grid_start_s, soft_min
    from pksim_core.mechanisms import dest_writes
    from pksim_core.move_cuts import piece_blocks
    s = load_system("h200-virtual")
    p = predict(s, sched("all-gather", world=2, algorithm="direct", mechanism="register",
                         comm_sms=66))
    c = s.gpu.hbm.effective_Bps
    t = s.gpu.kernel
    tau = t.ldst_move_base_s_per_B + 2 * t.ldst_move_dest_s_per_B
    w = 1 + t.ldst_fanout_write * (GiB / 2) / (GiB / 2 + t.ldst_fanout_reach_B)
    assert dest_writes(s.gpu, "register", 2, GiB / 2) == pytest.approx(w)
    n = 2 * piece_blocks(66, GiB / 2)
    assert n == pytest.approx(131.996, abs=1e-3)
    rate = min(soft_min(n / tau, c / 3, t.move_knee), c / (1 + 2 * w))
    mem = s.gpu.hbm.latency_s + s.gpu.l2.latency_s
    g = grid_start_s(s.gpu, 132, 512)
    assert g == pytest.approx(s.gpu.transfer.move_start_s)
    expected = (s.gpu.sync.stream_launch_s + g + mem + t.move_buffer_latency_s
                + t.dest_set_latency_s + (GiB / 2) / (rate / 2))
    assert p.time_s == pytest.approx(expected, rel=1e-9)
    # the two moves never exceed the memory: HBM busy at most the whole time
    assert p.breakdown["hbm"] <= p.time_s
    # at 1 GiB with pk-hopper's fan-out (0.08609 per doubling, reach 1.169 MiB: w = 1.086) the
    # SMs' bend is just below the fan-out's ceiling (1.3518 against 1.3560 TB/s): issue-bound
    assert soft_min(n / tau, c / 3, t.move_knee) < c / (1 + 2 * w)
    assert p.bound_resource == "issue"


def test_copy_engine_all_gather_between_virtual_ranks():
    # h200-virtual-calibrated, 2 ranks, all-gather direct by copy engines, S = 64 MiB: each
    # rank copies its S/2 input into both outputs, 2 copies on its stream, 4 on the GPU. The
    # first copy pays the engine's setup (no kernel is launched), every further one on a
    # stream a chain, so the launch is setup - chain and the phase 2 chains (a rank's 2
    # queued copies); the
    # first read waits one HBM latency; one GPU's copies pass its copy commands one after
    # another, each holding them for a command and its bytes at one engine's rate
    # (pksim_core.mechanisms.flow.move_flow, as pksim_core.microbench_model._ce_burst adds them), which binds here:
    # 4 x (command + (S/2) / bandwidth); the writes then drain into the L2 (no flag: the
    # ranks' streams wait on events); the second rank's stream starts one stream_start
    # later. With the host's calls issued long before (lead 1 s):
    # time = (setup - chain) + stream_start + 2 chain + L + 4 (command + S/2/bw) + L2.
    s = load_system("h200-virtual-calibrated")
    size = 64 * 2**20
    p = predict(s, sched("all-gather", nbytes=size, world=2, algorithm="direct",
                         mechanism="copy-engine", comm_sms=16), host_lead_s=1.0)
    ce, chain = s.gpu.copy_engine, s.gpu.sync.stream_chain_s
    expected = ((ce.setup_s - chain) + ce.stream_start_s + 2 * chain
                + s.gpu.hbm.latency_s + 4 * (ce.command_s + (size / 2) / ce.bandwidth_Bps)
                + s.gpu.l2.latency_s)
    assert p.time_s == pytest.approx(expected, rel=1e-9)
    assert p.bound_resource == "cecmd"


FAST_SMS = [f"gpu.transfer.tma_move_{k}_ns_per_KiB=0.001" for k in ("base", "dest", "reduce", "source")]


def test_ring_all_reduce_on_8_gpus():
    # The generated ring: 8 reduce-scatter phases (the last one local), 7 all-gather phases;
    # SMs made fast enough never to bind. 14 phases store S/8 over one link at 450 x 0.78 =
    # 351 GB/s: 0.31 us path latency, the data, 0.31 us for the writes to land, the block's
    # release (sync.release_ns, r) and a 0.9053 us system-scope flag; the local phase sums two
    # of the rank's own chunks into its output (3 x S/8 of HBM traffic at C = 3.35 TB/s x
    # hbm.efficiency) and hands off (r + 0.9053 us); the last phase's hand-off is the kernel's
    # exit barrier, and its entry barrier costs the arrivals' 0.31 us, r and the flag (D43):
    # time = 3.423 us + 14 x (1.538 us + r + (1 GiB / 8) / 351 GB/s) + (3 GiB / 8) / C
    #        + (0.31 us + r + 0.9053 us)
    # Every phase also pays a TMA message's round trip before its data and after it (bulk
    # stores completing): 2 t, t = tma_latency_s; the 7 phases that sum two sources pay
    # for the second buffer: the 6 that store to the next GPU at the profile's per-buffer
    # latency across NVLink (nvlink_buffer_latency, n), the local one at its one-GPU figure
    # (move_buffer_latency, b); the 6 wait for no first chunk of their own sources (D38), the
    # local one waits for a stage slot (32 KiB / 3) of both at the per-SM TMA rate
    # (pksim_core.mechanisms.tma_fill_s: f = 2 x 32768 / 3 B / 38.5 GB/s): + 6 n + b + f. Each GPU's
    # kernel starts in
    # transfer.move_start (0.6941 us; 132 blocks, one per SM, add nothing).
    from hwmodels.sm import grid_start_s
    from pksim_core.mechanisms import tma_latency_s
    s = load_system("dgx-h100", FAST_SMS)
    p = predict(s, sched(algorithm="ring"))
    link = s.gpu.nvlink.bandwidth_Bps * s.gpu.nvlink.efficiency_tma
    handoff = s.gpu.sync.flag_latency_sys_s + s.gpu.sync.release_s
    flag = handoff + 2 * tma_latency_s(s.gpu, remote=True)
    step = 2 * s.gpu.nvlink.latency_s + flag + GiB / 8 / link
    local = 3 * GiB / 8 / s.gpu.hbm.effective_Bps + flag
    entry = s.gpu.nvlink.latency_s + handoff
    fill = 2 * (32768 / 3) / s.gpu.transfer.tma_local_Bps_per_sm
    k = s.gpu.kernel
    extra = 6 * k.nvlink_buffer_latency_s + k.move_buffer_latency_s + fill + 0.6941e-6
    assert grid_start_s(s.gpu, 132, 256) == pytest.approx(0.6941e-6)
    assert p.time_s == pytest.approx(s.gpu.sync.stream_launch_s + 14 * step + local + entry
                                     + extra, rel=1e-6)
    assert p.busbw_GBps == pytest.approx(GiB / p.time_s / 1e9 * 14 / 8)


def test_two_flows_sharing_one_port_get_half_each():
    # gather to rank 0 from ranks 1 and 2: both shards (S/3) enter rank 0's one NVLink
    # port, so each gets half of 351 GB/s. The generated kernel's fixed costs (launch, entry
    # barrier D43, its moves' latencies) do not depend on S, so doubling S adds exactly
    # (S/3) / 175.5 GB/s = 2.04 ms for S = 1 GiB
    s = H100
    one = predict(s, sched("gather", GiB, world=3, algorithm="direct")).time_s
    two = predict(s, sched("gather", 2 * GiB, world=3, algorithm="direct")).time_s
    half = s.gpu.nvlink.bandwidth_Bps * s.gpu.nvlink.efficiency_tma / 2
    assert two - one == pytest.approx((GiB / 3) / half, rel=1e-9)
    # and the fixed part holds at least the launch, the entry barrier and a path latency
    lat = s.gpu.nvlink.latency_s
    entry = lat + s.gpu.sync.release_s + s.gpu.sync.flag_latency_sys_s
    assert one - (GiB / 3) / half >= s.gpu.sync.stream_launch_s + entry + lat


def test_few_tma_sms_cannot_fill_the_link():
    # 4 SMs x 23.3 GB/s = 93 GB/s < 351 GB/s: the SMs bind; about 16 SMs fill the link
    slow = predict(H100, sched("broadcast", world=2, algorithm="direct", comm_sms=4))
    fast = predict(H100, sched("broadcast", world=2, algorithm="direct", comm_sms=16))
    assert slow.bound_resource == "issue"
    assert slow.time_s > 3 * fast.time_s


def test_copy_engine_pays_setup_per_chunk():
    # the copy engine's setup latency (gpu.copy_engine.setup_latency_us) is paid per
    # transfer; cutting 64 MiB into 1 MiB chunks pays it 64 times in sequence
    whole = predict(H100, sched("broadcast", 64 << 20, world=2, algorithm="direct",
                                mechanism="copy-engine"))
    setup = H100.gpu.copy_engine.setup_s
    assert whole.time_s > setup
    assert whole.breakdown["ce"] > 0


ALGS = [(op, alg) for op in COLLECTIVES for alg in algorithms_for(op) if alg != "hierarchical"]


def _mechanism(alg):
    return "multimem" if alg == "in-network" else "tma"


@pytest.mark.parametrize("op, alg", ALGS)
def test_bound_never_above_des_and_reduced_equals_full(op, alg):
    s = sched(op, 64 << 20, algorithm=alg, mechanism=_mechanism(alg), comm_sms=32)
    reduced, full = predict(H100, s), predict(H100, s, reduced=False)
    assert reduced.bound_s <= reduced.time_s * (1 + 1e-9)
    assert reduced.time_s == pytest.approx(full.time_s, rel=1e-6)


@pytest.mark.parametrize("system, world, alg, domains", [
    ("h100-nvl256", 16, "ring", 1),          # two nodes: two switch tiers
    ("h100-nvl256", 16, "rhd", 1),
    ("h100-nvl256", 16, "in-network", 1),
    ("gb200-nvl72", 72, "ring", 1),
    ("gb200-nvl72", 72, "in-network", 1),
    ("dgx-h100", 16, "hierarchical", 2),     # two DGX boxes over the NICs
    ("dgx-h100", 16, "ring", 2),
])
def test_reduced_and_full_agree_within_one_percent(system, world, alg, domains):
    s = sched(nbytes=256 << 20, world=world, algorithm=alg, mechanism=_mechanism(alg),
              comm_sms=32, domains=domains)
    sys_ = load_system(system)
    reduced, full = predict(sys_, s), predict(sys_, s, reduced=False)
    assert reduced.time_s == pytest.approx(full.time_s, rel=0.01)


def test_analytical_agrees_with_des_when_nothing_contends():
    for op, alg in (("all-reduce", "ring"), ("all-gather", "direct"), ("all-reduce", "rhd"),
                    ("reduce-scatter", "ring")):
        p = predict(H100, sched(op, algorithm=alg))
        assert p.alpha_beta_s == pytest.approx(p.time_s, rel=0.01)


settings.register_profile("pksim", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])


@settings(settings.get_profile("pksim"))
@given(op_alg=st.sampled_from(ALGS), world=st.sampled_from([2, 4, 8]),
       size=st.integers(min_value=12, max_value=28), sms=st.sampled_from([8, 32, 132]),
       chunk=st.sampled_from([0, 1 << 20]))
def test_more_bandwidth_or_fewer_bytes_is_never_slower(op_alg, world, size, sms, chunk):
    op, alg = op_alg
    if alg == "rhd" and world & (world - 1):
        return
    s = sched(op, 1 << size, world=world, algorithm=alg, mechanism=_mechanism(alg),
              comm_sms=sms, chunk_bytes=chunk)
    base = predict(H100, s)
    assert base.bound_s <= base.time_s * (1 + 1e-9)
    fewer = predict(H100, s.with_(shape=(("bytes", 1 << (size - 1)),)))
    assert fewer.time_s <= base.time_s * (1 + 1e-9)
    faster = load_system("dgx-h100", ["gpu.nvlink.link_bandwidth_GBps=50",
                                      "gpu.hbm.bandwidth_GBps=6700"])
    assert predict(faster, s).time_s <= base.time_s * (1 + 1e-9)


BIG = 128


@pytest.mark.parametrize("name", list_systems())
@pytest.mark.parametrize("op", COLLECTIVES)
def test_every_op_on_every_system_runs_or_says_why(name, op):
    system = load_system(name)
    n = system.domain.gpus_per_domain
    if op in ("all-to-all",) + SPLIT_OPS and n > BIG:
        n = 64         # every pair talks (or direct only): n^2 flows; a 64-rank slice
    algs = ["ring", "in-network", "direct"] if n > BIG else algorithms_for(op)
    ran = 0
    for alg in algs:
        if alg not in algorithms_for(op) or alg == "hierarchical":
            continue
        if n > BIG and alg == "direct" and op not in ("broadcast", "reduce", "gather", "scatter"):
            continue
        for mech in ("tma", "register", "multimem", "copy-engine"):
            try:
                sms = system.gpu.sm.count // (n if system.domain.fabric == "shared-memory" else 1)
                p = predict(system, sched(op, 16 << 20, world=n, algorithm=alg, mechanism=mech,
                                          comm_sms=min(32, sms)))
            except InfeasibleError as exc:
                assert str(exc)                  # a reason, not an empty message
                continue
            assert p.time_s > 0 and p.bound_s <= p.time_s * (1 + 1e-9)
            ran += 1
    if n > 1:
        assert ran > 0


def test_infeasible_mechanisms_name_what_is_missing():
    a100 = load_system("dgx-a100")
    with pytest.raises(InfeasibleError, match="no TMA on ampere"):
        predict(a100, sched(algorithm="ring"))
    with pytest.raises(InfeasibleError, match="no in-switch reduction"):
        predict(a100, sched(algorithm="in-network", mechanism="multimem"))
    with pytest.raises(InfeasibleError, match="copy engine cannot reduce"):
        predict(H100, sched(algorithm="rhd", mechanism="copy-engine"))
    # the generated copy-engine kernels sum with SM kernels between their copies
    assert predict(H100, sched(algorithm="ring", mechanism="copy-engine")).time_s > 0
    with pytest.raises(InfeasibleError, match="no NVLink switch spans"):
        predict(load_system("h200-virtual"), sched(algorithm="in-network", mechanism="multimem"))


def test_nccl_model_picks_latency_protocols_small_and_bandwidth_large():
    small = nccl_schedule(H100, "all-reduce", 4096)
    large = nccl_schedule(H100, "all-reduce", GiB)
    assert small.protocol == "LL"
    assert large.protocol == "Simple"
    assert large.algorithm == "nvls"              # dgx-h100 has in-switch reduction
    assert nccl_schedule(load_system("dgx-a100"), "all-reduce", GiB).algorithm == "ring"
    p = predict(H100, small)
    # NCCL's base latency alone is several microseconds: pk's one-shot beats it small
    assert p.time_s > 5e-6
    with pytest.raises(InfeasibleError, match="several ranks on one GPU"):
        predict(load_system("h200-virtual"), small.with_(world=8))


def test_predictions_say_which_guesses_they_rest_on():
    rubin = load_system("rubin-ultra-nvl576")
    p = predict(rubin, sched(world=144, algorithm="ring", comm_sms=32))
    assert any(k.startswith("gpu.nvlink") for k in p.depends_on_assumed)
    ring = sched("all-gather", 1 << 20, algorithm="ring")
    timeline = predict(H100, ring, reduced=False, record=True).timeline
    assert len(timeline) == 7 * 8                   # 7 steps x 8 ranks, one flow each
    # the reduced run records one representative per symmetry class: 7 steps x 1 class
    assert len(predict(H100, ring, record=True).timeline) == 7
    assert all(e.end_s > e.start_s for e in timeline)


def test_copy_engine_phases_wait_for_the_host_calls():
    """A copy-engine all-gather (direct, 2 virtual ranks, 4 KiB) makes, on the host: a fork
    (1 record + 2 waits), 4 cudaMemcpyAsync, a record per rank after the phase and a join
    wait per rank: 4 copies + 7 event calls. With h200-virtual's copy_api 5.45 us and
    event_api 0.59 us (half per call) that is 4 x 5.45 + 7 x 0.295 = 23.9 us. Issued from an
    idle stream (lead 0) the one phase starts when its calls are issued; behind 100 us of
    queued work the calls cost nothing and the prediction is the GPU's alone."""
    system = load_system("h200-virtual-calibrated")
    sched = Schedule(op="all-gather", shape=(("bytes", 4096),), world=2, algorithm="direct",
                     mechanism="copy-engine", comm_sms=16)
    model = build(system, sched)
    sync = system.gpu.sync
    host = 4 * sync.copy_api_s + 7 * sync.event_api_s / 2
    assert model.host_issue_s == pytest.approx((host,))
    exposed = simulate(model).time_s
    hidden = predict(system, sched, host_lead_s=100e-6).time_s
    assert exposed == pytest.approx(host + hidden - model.launch_s, rel=1e-6)
    # partly hidden: the phase starts 10 us after the stream frees, lead = host - 10 us
    part = predict(system, sched, host_lead_s=host - 10e-6).time_s
    assert part == pytest.approx(10e-6 + hidden - model.launch_s, rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([("all-reduce", "two-shot"), ("all-gather", "ring"), ("broadcast", "direct")]),
       st.sampled_from([2, 4, 8]), st.sampled_from([4096, 1 << 20, 64 << 20]),
       st.floats(0, 200e-6), st.floats(0, 200e-6))
def test_more_host_lead_is_never_slower(op_alg, world, size, lead, more):
    system = load_system("h200-virtual-calibrated")
    sched = Schedule(op=op_alg[0], shape=(("bytes", size),), world=world, algorithm=op_alg[1],
                     mechanism="copy-engine", comm_sms=8)
    a = predict(system, sched, host_lead_s=lead).time_s
    b = predict(system, sched, host_lead_s=lead + more).time_s
    assert b <= a * (1 + 1e-9)
