"""The inter-SM fused kernels' pull-reduce in its two forms (kernels/fused/comm.cuh
pull_reduce<kKind, kTma>; docs/decisions/D54.md): the schedule's mechanism picks the form,
the model charges each at its own rate (pksim_core.move_cuts, routine "pull"): over NVLink the
mechanism study's per-SM rate of that mechanism, inside one GPU the form's own fit on
fused_pull.cu."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.catalog import load_system
from pksim_core.microbench_model import predict_time_s
from pksim_core.mechanisms import move_Bps, move_time_per_B
from pksim_core.schedule import Schedule
from pksim_core.simulate import predict

H100 = load_system("dgx-h100")
H200 = load_system("h200-calibrated")
H200V = load_system("h200-virtual-calibrated")
PS_PER_B = 1e12


def fused(op="gemm-rs", mech="tma", comm_sms=16, world=8, k=2048, m=8192, n=8192):
    alg = "direct" if op == "gemm-rs" else "two-shot"
    return Schedule(op=op, shape=(("k", k), ("m", m), ("n", n)), world=world,
                    overlap="inter-sm", algorithm=alg, mechanism=mech, comm_sms=comm_sms)


def test_a_far_tma_pull_moves_at_the_study_tma_rates():
    # gemm-rs on dgx-h100, 8 ranks: an owner sums 8 partials, 7 of them on other GPUs, into
    # its own output. One SM's time per byte of sums is the far part alone (D38):
    #   7 far sources / tma_read_per_sm 23.3 GB/s = 300.43 ps
    # gemm-ar also stores the sum into the 7 other ranks' outputs:
    #   + 7 far destinations / tma_write_per_sm 23.3 GB/s = 600.86 ps
    # The register form of the same moves: 7 / 4.14 GB/s = 1690.8 ps, and 3381.6 ps.
    g = H100.gpu
    rs = move_time_per_B(g, "tma", 8, 1, True, far_sources=7, routine="pull")
    ar = move_time_per_B(g, "tma", 8, 8, True, far_sources=7, far_dests=7, routine="pull")
    assert rs * PS_PER_B == pytest.approx(7 / 23.3e9 * 1e12, rel=1e-9) == pytest.approx(300.43, abs=0.01)
    assert ar * PS_PER_B == pytest.approx(600.86, abs=0.01)
    reg = move_time_per_B(g, "register", 8, 1, True, far_sources=7, routine="pull")
    assert reg * PS_PER_B == pytest.approx(1690.82, abs=0.01)
    # 16 SMs pull at most 16 x 23.3 / 7 = 53.26 GB/s of sums (no knee over NVLink)
    assert move_Bps(g, "tma", 8, 1, True, 16, None, far_sources=7, routine="pull") == \
        pytest.approx(16 * 23.3e9 / 7)


def test_a_local_pull_takes_its_form_s_own_fit():
    # virtual ranks on the H200: per SM and KiB of sums, base + S x source + D x dest of the
    # form (the kernel profile's pull_tma_move_* fitted on fused_pull_tma, pull_move_* on fused_pull);
    # gemm-ar on 4 ranks, S = D = 4
    t = H200.gpu.kernel
    kib = 1024 * 1e9
    tma = move_time_per_B(H200.gpu, "tma", 4, 4, True, routine="pull") * kib
    reg = move_time_per_B(H200.gpu, "register", 4, 4, True, routine="pull") * kib
    assert tma == pytest.approx((t.pull_tma_move_base_s_per_B + 4 * t.pull_tma_move_source_s_per_B
                                 + 4 * t.pull_tma_move_dest_s_per_B) * kib)
    assert reg == pytest.approx((t.pull_move_base_s_per_B + 4 * t.pull_move_source_s_per_B
                                 + 4 * t.pull_move_dest_s_per_B) * kib)
    assert H200.provenance["profile.pull_tma_move_source_cycles_per_KiB"].tag == "calibrated"
    # the H200 measured the TMA form slower per partial and faster per output than registers
    assert t.pull_tma_move_source_s_per_B > t.pull_move_source_s_per_B
    assert t.pull_tma_move_dest_s_per_B < t.pull_move_dest_s_per_B


def test_the_tma_schedule_is_no_longer_bound_by_register_issue():
    # the symptom of the issue: dgx-h100, gemm-rs 8192 x 8192 x 2048, inter-SM TMA on 16
    # communication SMs was charged at the register NVLink rate (2.21 ms, bound "issue");
    # with the TMA pull it runs at about the unfused baseline and is bound by the tensor cores
    tma = predict(H100, fused())
    reg = predict(H100, fused(mech="register"))
    assert tma.bound_resource == "tensor" and reg.bound_resource == "issue"
    assert tma.time_s < 0.5 * reg.time_s
    assert tma.time_s == pytest.approx(tma.baseline_s, rel=0.05)


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["gemm-rs", "gemm-ar"]), world=st.sampled_from([2, 4, 8]),
       k=st.sampled_from([256, 2048, 8192]), system=st.sampled_from(["dgx-h100", "h200v"]),
       sms=st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=2, max_size=2, unique=True))
def test_more_communication_sms_never_pull_slower(op, world, k, system, sms):
    # the exposed communication of an inter-SM TMA schedule (the pull after the GEMM's last
    # tiles) never grows with more communication SMs, on NVLink and on virtual ranks
    s = H100 if system == "dgx-h100" else H200V
    few, more = sorted(sms)
    if more >= s.gpu.sm.count // (world if system == "h200v" else 1):
        return
    a = predict(s, fused(op, comm_sms=few, world=world, k=k))
    b = predict(s, fused(op, comm_sms=more, world=world, k=k))
    assert b.exposed_comm_s <= a.exposed_comm_s * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["rs", "ar"]), world=st.sampled_from([2, 4, 8]),
       dim=st.sampled_from([4096, 8192]),
       blocks=st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=2, max_size=2, unique=True))
def test_the_pull_primitive_on_more_blocks_is_never_slower(kind, world, dim, blocks):
    # fused_pull_tma as the calibration predicts it: more blocks a rank never take longer
    def t(b):
        rec = {"bench": "fused_pull_tma", "bytes": dim * dim * 2.0,
               "params": {"kind": kind, "world": world, "blocks": b, "threads": 384}}
        return predict_time_s(H200, rec)
    few, more = sorted(blocks)
    assert t(more) <= t(few) * (1 + 1e-9)
