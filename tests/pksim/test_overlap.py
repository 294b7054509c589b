"""Fused compute + communication: baseline, bound, exposed communication, search."""
from __future__ import annotations

import json

from dataclasses import replace

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, InfeasibleError
from hwmodels.sm import gemm_time_s
from pksim_core.schedule import Schedule
from pksim_core.fusion import lower_bounds
from pksim_core.nccl import nccl_schedule
from pksim_core.search import fused_space, search, space
from pksim_core.simulate import predict
from pksim_core.workloads.fused_ops import FUSED_OPS, SHAPE_KEYS, expert_load

H100 = load_system("dgx-h100")
SHAPES = {"gemm-rs": dict(m=8192, n=8192, k=2048), "gemm-ar": dict(m=4096, n=8192, k=1024),
          "ag-gemm": dict(m=8192, n=4096, k=8192),
          "ring-attention": dict(batch=4, heads=16, seq=24576, head_dim=128),
          "ulysses-attention": dict(batch=4, heads=64, seq=8192, head_dim=128),
          "moe-dispatch-gemm": dict(tokens=2048, hidden=7168, experts=64, topk=8,
                                    expert_hidden=2048),
          "moe-combine": dict(tokens=2048, hidden=7168, experts=64, topk=8, expert_hidden=2048)}


def fused(op, overlap="inter-sm", **kw):
    kw.setdefault("algorithm", {"gemm-ar": "two-shot", "ring-attention": "ring"}.get(op, "direct"))
    kw.setdefault("mechanism", "tma")
    kw.setdefault("comm_sms", 16)
    shape = kw.pop("shape", SHAPES[op])
    return Schedule(op=op, shape=tuple(sorted(shape.items())), world=kw.pop("world", 8),
                    overlap=overlap, **kw)


def test_none_is_gemm_plus_the_nccl_collective():
    # baseline = 2 launches + cuBLAS-model GEMM of the whole local shape + NCCL's own
    # reduce-scatter of the M x N partial sums (bytes = 8192 x 8192 x 2)
    p = predict(H100, fused("gemm-rs", "none"))
    gemm = gemm_time_s(H100.gpu, 8192, 8192, 2048)
    rs = predict(H100, nccl_schedule(H100, "reduce-scatter", 8192 * 8192 * 2)).time_s
    assert p.time_s == pytest.approx(2 * H100.gpu.sync.kernel_launch_s + gemm + rs, rel=1e-9)
    assert p.baseline_s == p.time_s and p.speedup == 1.0


@pytest.mark.parametrize("op", FUSED_OPS)
@pytest.mark.parametrize("overlap", ["inter-sm", "intra-sm"])
def test_no_schedule_beats_the_bound(op, overlap):
    p = predict(H100, fused(op, overlap))
    assert 0 < p.bound_s <= p.time_s * (1 + 1e-9)
    assert p.exposed_comm_s >= 0 and p.baseline_s > 0
    assert p.speedup == pytest.approx(p.baseline_s / p.time_s)


def test_a_large_gemm_matches_its_roofline_times_the_calibrated_efficiency():
    # 16384^3 bf16 on one H100 (no communication): 2 x 16384^3 FLOP / (989.4 TFLOP/s x
    # gemm_efficiency x waves x K/(K + k_overhead)), at the sustained clock
    from hwmodels.sm import gemm_efficiency, sustained_factor
    m = n = k = 16384
    eff = gemm_efficiency(H100.gpu, m, n, k)
    compute = 2.0 * m * n * k / (H100.gpu.tensor.flops_bf16 * eff)
    compute /= sustained_factor(H100.gpu, compute)
    assert gemm_time_s(H100.gpu, m, n, k) == pytest.approx(compute, rel=0.01)


def test_growing_k_moves_gemm_rs_from_communication_to_compute_bound():
    exposed, bound = [], []
    for k in (256, 1024, 4096, 65536):
        p = predict(H100, fused("gemm-rs", shape=dict(m=8192, n=8192, k=k), comm_sms=32))
        exposed.append(p.exposed_comm_s / p.time_s)
        bound.append(p.bound_resource)
    # the exposed share falls as K grows, towards the last tiles' pull after the GEMM
    # (about 0.17 ms here by TMA over NVLink, D54: 1.1 % at K = 65536, 4.3 % at 16384)
    assert all(b <= a + 1e-9 for a, b in zip(exposed, exposed[1:]))
    # small K: bound by communication (the owners' communication SMs pulling the world
    # partials over NVLink, or the links themselves); large K: by the tensor cores
    assert bound[0] in ("nvl_in", "nvl_out", "issue") and bound[-1] == "tensor"
    assert exposed[-1] < 0.05


def test_more_communication_sms_trade_compute_for_bandwidth():
    few = predict(H100, fused("gemm-rs", shape=dict(m=8192, n=8192, k=256), comm_sms=4))
    more = predict(H100, fused("gemm-rs", shape=dict(m=8192, n=8192, k=256), comm_sms=32))
    assert more.time_s < few.time_s                       # communication-bound: SMs help
    assert few.bound_resource == "issue"


def test_search_over_at_least_100_candidates_ranks_them():
    cands = fused_space(H100, "gemm-rs", dict(m=32768, n=32768, k=4096))
    assert len(cands) >= 100
    result = search(H100, cands)
    times = [p.time_s for p in result.ranked]
    assert times == sorted(times)
    assert result.ranked[0].speedup >= 1.0


@pytest.mark.parametrize("op", ["gemm-rs", "gemm-ar", "ag-gemm"])
def test_pruned_search_is_the_full_search(op):
    # branch and bound (top = K) simulates only what its lower bounds cannot rule out;
    # its K best are the full search's, same order, same numbers
    shape = {"gemm-rs": dict(m=8192, n=8192, k=1024), "gemm-ar": dict(m=4096, n=8192, k=512),
             "ag-gemm": dict(m=8192, n=4096, k=4096)}[op]
    cands = fused_space(H100, op, shape, world=4)
    full = search(H100, cands)
    for top in (1, 3, 10):
        pruned = search(H100, cands, top=top)
        assert pruned.ranked[:top] == full.ranked[:top]
        assert [p.compute_s for p in pruned.ranked[:top]] == \
            [p.compute_s for p in full.ranked[:top]]
        assert pruned.pruned and pruned.simulated < len(full.ranked)
        assert pruned.simulated + len(pruned.pruned) + len(pruned.infeasible) == len(cands)
        kth = full.ranked[top - 1].time_s
        assert all(bound > kth for _, bound in pruned.pruned)


def test_pruned_collective_search_is_the_full_search():
    cands = space(H100, "all-reduce", 16 << 20)
    full = search(H100, cands)
    pruned = search(H100, cands, top=3)
    assert pruned.ranked[:3] == full.ranked[:3] and pruned.pruned


@pytest.mark.parametrize("name", ["dgx-h100", "gb200-nvl72", "h200-virtual"])
@pytest.mark.parametrize("op", FUSED_OPS)
def test_lower_bounds_never_exceed_the_simulated_time(name, op):
    system = load_system(name)
    world = 4 if name != "gb200-nvl72" else 16
    extra = (("skew", 1.0),) if op.startswith("moe") else ()
    checked = 0
    for overlap in ("none", "inter-sm", "intra-sm"):
        for mech in ("tma", "register", "multimem"):
            alg = "in-network" if mech == "multimem" else None
            if alg and op != "gemm-ar":
                continue
            for chunk in (0, 1 << 20):
                s = fused(op, overlap, mechanism=mech, world=world, comm_sms=8, extra=extra,
                          chunk_bytes=chunk, **({"algorithm": alg} if alg else {}))
                try:
                    bounds = list(lower_bounds(system, s))
                except (InfeasibleError, ConfigError):
                    continue
                time_s = predict(system, s).time_s
                assert max(bounds) <= time_s * (1 + 1e-9), (s.label(), bounds, time_s)
                checked += 1
    assert checked >= 3


def test_compute_alone_is_the_full_simulation_without_communication():
    # the compute-alone reference is summed from idle per-chunk runs on the symmetry
    # classes; the same plan simulated for every rank (reduced=False) agrees
    s = fused("gemm-rs", "inter-sm", world=8, comm_sms=16, chunk_bytes=4 << 20)
    reduced, full = predict(H100, s), predict(H100, s, reduced=False)
    assert reduced.compute_s == pytest.approx(full.compute_s, rel=1e-9)
    assert reduced.time_s == pytest.approx(full.time_s, rel=1e-9)
    skewed = fused("moe-dispatch-gemm", world=8, extra=(("skew", 1.2),))
    assert predict(H100, skewed).compute_s == \
        pytest.approx(predict(H100, skewed, reduced=False).compute_s, rel=1e-9)


def test_candidates_with_the_same_plan_share_their_run():
    # 72 ranks: each peer's part is 4096 / 72 rows x 8192 x 2 B = 0.93 MB, so 4 MiB and
    # 16 MiB chunks cut it like no chunking at all (one chunk per peer), and a chunk past
    # the TMA message cap (half the shared memory) sends the same messages: one simulation
    from pksim_core.fusion import predict as fused_predict
    system = load_system("gb200-nvl72")
    base = fused("gemm-rs", world=72, shape=dict(m=4096, n=8192, k=512), comm_sms=16)
    fused_predict.RUNS.clear()
    times = {c: predict(system, base.with_(chunk_bytes=c)).time_s
             for c in (0, 4 << 20, 16 << 20)}
    assert len(set(times.values())) == 1 and len(fused_predict.RUNS) == 1
    predict(system, base.with_(chunk_bytes=1 << 10))      # smaller messages: its own run
    assert len(fused_predict.RUNS) == 2


def test_skewed_routing_loads_one_rank_more():
    load = expert_load(64, 1.0)
    assert load[0] > 10 * load[-1] and sum(load) == pytest.approx(1.0)
    uniform = predict(H100, fused("moe-dispatch-gemm"))
    skewed = predict(H100, fused("moe-dispatch-gemm", extra=(("skew", 1.0),)))
    assert skewed.time_s > uniform.time_s
    assert "every rank is simulated with its own load" in skewed.notes[0]
    assert uniform.notes == ()


def test_bad_shapes_and_infeasible_ops():
    with pytest.raises(ConfigError, match="needs --k"):
        predict(H100, fused("gemm-rs", shape=dict(m=8192, n=8192)))
    with pytest.raises(InfeasibleError, match="--heads 12: ulysses needs heads divisible by the world \\(8\\)"):
        predict(H100, fused("ulysses-attention", shape=dict(batch=1, heads=12, seq=1024,
                                                            head_dim=128)))
    with pytest.raises(InfeasibleError, match="leaves no SM to compute"):
        predict(H100, fused("gemm-rs", comm_sms=132))
    with pytest.raises(InfeasibleError, match="no fp8 tensor rate"):
        predict(load_system("dgx-a100"), fused("gemm-rs", dtype="fp8", mechanism="register"))


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-b200", "gb200-nvl72", "h200-virtual"])
@pytest.mark.parametrize("op", FUSED_OPS)
def test_every_fused_op_runs_or_says_why(name, op):
    system = load_system(name)
    world = min(8, system.domain.gpus_per_domain)
    ran = 0
    for overlap in ("none", "inter-sm", "intra-sm"):
        for mech in ("tma", "register"):
            try:
                p = predict(system, fused(op, overlap, mechanism=mech, world=world, comm_sms=4))
            except (InfeasibleError, ConfigError) as exc:
                assert str(exc)
                continue
            assert p.time_s > 0
            ran += 1
    assert ran > 0
    assert set(SHAPE_KEYS) == set(FUSED_OPS)


def test_search_command_says_what_it_simulated_and_pruned():
    from click.testing import CliRunner
    from pksim_cli.main import cli
    args = ["search", "--system", "dgx-h100", "--op", "gemm-rs", "--m", "8192", "--n", "8192",
            "--k", "1024", "--world", "4", "--top", "3"]
    out = json.loads(CliRunner().invoke(cli, args + ["--json"]).output)
    assert len(out["ranked"]) == 3 and out["pruned"]
    assert out["candidates"] == out["simulated"] + len(out["pruned"]) + len(out["infeasible"])
    table = CliRunner().invoke(cli, args)
    assert table.exit_code == 0
    assert f"{out['candidates']} candidates: {out['simulated']} simulated" in \
        " ".join(table.output.split())


def test_none_on_virtual_ranks_runs_the_gemms_one_after_another():
    # Virtual ranks share one H200: the baseline's library GEMMs of the 4 ranks run one after
    # another on the whole GPU (as validation/run/fused.py times "none"), then the pk
    # collective that it runs (reduce-scatter direct/register, 132 / 4 = 33 blocks per
    # rank) stands in for NCCL (which cannot run several ranks on one GPU):
    # 2 launches + 4 x GEMM(8192 x 8192 x 2048) + that collective's predicted time.
    from pksim_core.simulate import predict as run
    v = load_system("h200-virtual-calibrated")
    p = predict(v, fused("gemm-rs", "none", world=4))
    gemm = gemm_time_s(v.gpu, 8192, 8192, 2048)
    coll = run(v, Schedule(op="reduce-scatter", shape=(("bytes", 8192 * 8192 * 2),), world=4,
                           algorithm="direct", mechanism="register", comm_sms=33)).time_s
    assert p.time_s == pytest.approx(2 * v.gpu.sync.kernel_launch_s + 4 * gemm + coll, rel=1e-9)


def test_fused_chunks_share_the_whole_gemms_hbm_traffic():
    # gemm-rs, world 8, 8192 x 8192 x 2048 per rank, 16 chunks per peer: 128 chunks of
    # 64 rows. The persistent GEMM reads A and writes C once and reads B once per band of
    # 16 x 128 = 2048 rows (4 bands), so the chunks together stream, per rank,
    # 2 B x (8192 x 2048 + 4 x 2048 x 8192 + 8192 x 8192) = 301,989,888 B (not 128 copies
    # of B); the intra-SM kernel writes no C locally (its tiles leave as store-adds):
    # 2 x (8192 x 2048 + 4 x 2048 x 8192) = 167,772,160 B.
    from pksim_core.workloads.fused_ops import plan
    shape = dict(m=8192, n=8192, k=2048)
    p = plan("gemm-rs", shape, 8, 2, "direct", 16)
    assert len(p.chunks) == 128
    assert sum(c.work[0].nbytes for c in p.chunks) == pytest.approx(301_989_888)
    assert sum(c.work[0].flop for c in p.chunks) == pytest.approx(2 * 8192 * 8192 * 2048)
    q = plan("gemm-rs", shape, 8, 2, "direct", 16, store_add=True)
    assert sum(c.work[0].nbytes for c in q.chunks) == pytest.approx(167_772_160)


def test_intra_sm_store_adds_every_tile_and_read_no_memory_for_their_source():
    # The intra-SM epilogue store-adds every tile, the own rows too (gemm-rs: into the
    # owner; gemm-ar: into all 8 outputs), from shared memory: per rank 8192 x 8192 x 2 B
    # (gemm-rs) and 8 x that (gemm-ar) of store-add payload, whose flows weigh on HBM only
    # the destination's read-modify-write at the tile rate
    # (hwmodels.sm.tile_reduce_memory_weight: 2 x hbm.efficiency / hbm.tile_reduce_efficiency),
    # and as much on the GPU's memory path, which the main loops share (pksim_core.fusion.des.run_plan)
    from hwmodels.sm import tile_reduce_memory_weight
    from pksim_core.fusion.setup import Setup
    v = load_system("h200-virtual-calibrated")
    w = tile_reduce_memory_weight(v.gpu)
    assert w == pytest.approx(2 * v.gpu.hbm.efficiency / v.gpu.hbm.tile_reduce_efficiency)
    for op, dests in (("gemm-rs", 1), ("gemm-ar", 8)):
        s = Setup(v, fused(op, "intra-sm", algorithm="direct", world=8,
                            shape=dict(m=8192, n=8192, k=2048)), reduced=False)
        sent = sum(t.nbytes for c in s.plan.chunks for t in c.transfers if t.src == 0)
        assert sent == pytest.approx(dests * 8192 * 8192 * 2)
        classes, _, _ = s.flows()
        usage = [dict(fc.usage) for key, specs in classes.items() if key[0] == "comm"
                 for fc in specs]
        assert usage and all(u["hbm[0]"] == pytest.approx(w) for u in usage)
        assert all(u["mempath[0]"] == pytest.approx(w) for u in usage)


def test_intra_sm_epilogue_holds_the_compute_while_the_bulk_engines_read_the_tiles():
    # gemm-ar at w8 store-adds 8 x 8192 x 8192 x 2 B = 1 GiB per rank; the rank's 16 SMs
    # (132 // 8) hand it to their bulk engines at transfer.tma_reduce_per_sm_GBps each:
    # 2^30 B / (16 x 49.78e9 B/s) = 1.348 ms of stalls over the chunks, gemm-rs 1/8 of it
    from pksim_core.fusion.des import epilogue_stall_s
    from pksim_core.fusion.setup import Setup
    v = load_system("h200-virtual-calibrated")
    rate = v.gpu.transfer.tma_reduce_Bps_per_sm
    for op, dests in (("gemm-rs", 1), ("gemm-ar", 8)):
        s = Setup(v, fused(op, "intra-sm", algorithm="direct", world=8,
                            shape=dict(m=8192, n=8192, k=2048)))
        assert s.compute_sms == 16
        stall = sum(epilogue_stall_s(v, c, s.compute_sms) for c in s.plan.chunks)
        assert stall == pytest.approx(dests * 8192 * 8192 * 2 / (16 * rate))


@pytest.mark.parametrize("op", ["gemm-rs", "gemm-ar"])
def test_a_larger_share_of_the_memory_path_for_the_epilogue_is_never_slower(op):
    base = load_system("h200-virtual-calibrated")

    def with_figures(system, values):       # dimensionless figures of gpu.<part>.<name>
        for dotted, value in values.items():
            _, part, name = dotted.split(".")
            gpu = replace(system.gpu, **{part: replace(getattr(system.gpu, part), **{name: value})})
            system = replace(system, gpu=gpu)
        return system

    s = fused(op, "intra-sm", algorithm="direct", world=8, shape=dict(m=8192, n=8192, k=2048))
    times = [predict(with_figures(base, {"gpu.tensor.epilogue_overlap": h}), s).time_s
             for h in (0.2, 0.5, 0.8, 1.0)]
    assert times == sorted(times, reverse=True) and times[0] > times[-1]
    faster = predict(with_figures(base, {"gpu.hbm.tile_reduce_efficiency": 0.9}), s).time_s
    assert faster <= predict(base, s).time_s


def test_the_timeline_shows_each_waves_epilogue_hand_off():
    # gemm-ar w8 intra-SM: the compute track of every simulated rank holds one hand-off per
    # chunk after its tiles, together as long as the chunks' stalls (epilogue_stall_s)
    from pksim_core.fusion.des import epilogue_stall_s
    from pksim_core.fusion.predict import predict_fused
    from pksim_core.fusion.setup import Setup
    v = load_system("h200-virtual-calibrated")
    s = fused("gemm-ar", "intra-sm", algorithm="direct", world=8,
              shape=dict(m=8192, n=8192, k=2048))
    setup = Setup(v, s)
    events = [e for e in predict_fused(v, s, record=True).timeline if "epilogue" in e.name]
    tracks = {e.track for e in events}
    assert tracks and all("compute SMs" in t for t in tracks)
    per_track = len(events) // len(tracks)
    assert per_track == len(setup.plan.chunks)
    total = sum(epilogue_stall_s(v, c, setup.compute_sms) for c in setup.plan.chunks)
    assert sum(e.end_s - e.start_s for e in events) / len(tracks) == pytest.approx(total)


def test_the_store_add_kernels_clear_their_outputs_first():
    # gemm-ar w2 8192 x 8192 on the virtual H200: both ranks' outputs, 2 x 8192 x 8192 x 2 B
    # = 256 MiB, cleared by 2 memsets on the stream: 2 x stream_launch + 2^28 B / (HBM peak x
    # hbm.efficiency); gemm-rs clears a rank's m / world rows: 2 x 4096 x 8192 x 2 B =
    # 128 MiB. On a real 8-GPU board each GPU clears its own rank's output (gemm-ar: 128 MiB,
    # one memset). Kernels that do not store-add clear nothing.
    from pksim_core.fusion.plans import output_clear_s
    from pksim_core.fusion.predict import predict_fused
    from pksim_core.fusion.setup import Setup
    v = load_system("h200-virtual-calibrated")
    g = v.gpu
    shape = dict(m=8192, n=8192, k=2048)
    ar = fused("gemm-ar", "intra-sm", algorithm="direct", world=2, shape=shape)
    rs = fused("gemm-rs", "intra-sm", algorithm="direct", world=2, shape=shape)
    topo = Setup(v, ar).topo
    assert output_clear_s(v, topo, ar) == pytest.approx(
        2 * g.sync.stream_launch_s + 2 ** 28 / g.hbm.effective_Bps)
    assert output_clear_s(v, topo, rs) == pytest.approx(
        2 * g.sync.stream_launch_s + 2 ** 27 / g.hbm.effective_Bps)
    assert output_clear_s(v, topo, fused("gemm-ar", "inter-sm", world=2, shape=shape)) == 0.0
    h = fused("gemm-ar", "intra-sm", algorithm="direct", world=8, shape=shape)
    assert output_clear_s(H100, Setup(H100, h).topo, h) == pytest.approx(
        H100.gpu.sync.stream_launch_s + 2 ** 27 / H100.gpu.hbm.effective_Bps)
    # the prediction carries it before the launch: in the breakdown and as the timeline's
    # first span on every compute track
    clear = output_clear_s(v, topo, ar)
    p = predict_fused(v, ar, record=True)
    assert p.breakdown["clear"] == pytest.approx(clear)
    spans = [e for e in p.timeline if e.name == "outputs cleared (memset)"]
    assert spans and all(e.start_s == 0.0 and e.end_s == pytest.approx(clear) for e in spans)
    launches = [e for e in p.timeline if e.name == "kernel launch"]
    assert all(e.start_s == pytest.approx(clear) for e in launches)
    assert p.bound_s <= p.time_s
