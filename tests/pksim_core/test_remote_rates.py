"""NVLink-side transfer rates per mechanism (gpu.transfer_remote, docs/decisions/D38.md):
moves over NVLink take the mechanism study's per-SM rates, moves inside one GPU the one-GPU
fit's; the fit never writes the remote figures, and halving every fitted local-copy rate
leaves dgx-h100's large all-reduces where they were."""
from __future__ import annotations

import dataclasses

import pytest

from hwmodels.catalog import load_system
from hwmodels.sm import grid_start_s
from pksim_core.mechanisms import tma_latency_s
from pksim_core.collective_model import _run_step, build
from pksim_core.mechanisms import move_Bps, move_time_per_B
from pksim_core.nccl import nccl_schedule
from pksim_core.simulate import predict
from tests.pksim_core.cases import GiB, H100, sched
from validation.calibrate.fit import STAGES, get_figure, with_figures

MiB = 1 << 20


def test_remote_figures_per_system():
    # every multi-GPU system states the study's figures; TMA saturates NVLink with about
    # 15 SMs on H100 and B200, registers need about 76 on H100 (ParallelKittens sec. 3.1.2)
    for name, tma_sms, reg_sms in (("dgx-h100", 15, 76), ("dgx-b200", 15, 148)):
        g = load_system(name).gpu
        r = g.transfer_remote
        table1 = {"dgx-h100": (350.01e9, 315e9), "dgx-b200": (669.12e9, 628.35e9)}[name]
        assert table1[0] / r.tma_write_Bps_per_sm == pytest.approx(tma_sms, rel=0.01)
        assert table1[1] / r.ldst_write_Bps_per_sm == pytest.approx(reg_sms, rel=0.01)
    for name in ("dgx-a100", "hgx-h200", "h100-nvl256", "gb200-nvl72", "gb300-nvl72",
                 "hgx-b300", "vr-nvl144", "rubin-ultra-nvl576", "gb200-nvl576"):
        s = load_system(name)
        assert s.figure_source("gpu.transfer_remote.ldst_write_per_sm_GBps").source
    # the figures without a published value say so
    s = load_system("dgx-h100")
    for key in ("tma_reduce_per_sm_GBps", "multimem_per_sm_GBps", "tma_read_per_sm_GBps"):
        assert s.figure_source("gpu.transfer_remote." + key).tag == "estimate"


@pytest.mark.parametrize("n", [1, 15, 132])
def test_one_remote_tma_read(n):
    # broadcast from rank 0 to rank 1 on dgx-h100 with TMA on n SMs: rank 1 loads the
    # root's 1 GiB (a far source) into its own buffer. One SM's time per byte is the larger
    # of the far load, 1 / tma_read_per_sm (23.3 GB/s: 42.9 ns per KiB), and the routine's
    # near part (base 8.7 + one destination 16.2 ns per KiB, local figures): 1 / 23.3 GB/s.
    # So n SMs move min(n x 23.3 GB/s, 450 GB/s x 0.78 TMA efficiency = 351 GB/s):
    #   n = 1:   1073741824 / 23.3e9  = 46.08 ms (the SM binds)
    #   n = 15:  1073741824 / 349.5e9 = 3.072 ms (the SMs, just below the link)
    #   n = 132: 1073741824 / 351e9   = 3.059 ms (the link)
    # plus the fixed part: a kernel on a stream, the grid's start, the read's round trip
    # (2 x 0.31 us) and two TMA round trips t = 110 B / 23.3 GB/s (gpu.transfer_remote), and
    # the kernel's entry and exit barriers across the two GPUs (D43): each a release
    # (0.5322 us) and a system-scope flag (0.9053 us; both carried from the H200 by rule C2),
    # the entry's arrivals over NVLink (0.31 us) = 1.7475 + 1.4375 us.
    g = H100.gpu
    r = g.transfer_remote.tma_read_Bps_per_sm
    assert move_Bps(g, "tma", 1, 1, False, n, None, far_sources=1) == pytest.approx(n * r)
    p = predict(H100, sched("broadcast", world=2, algorithm="direct", comm_sms=n))
    link = g.nvlink.bandwidth_Bps * g.nvlink.efficiency_tma
    barriers = g.nvlink.latency_s + 2 * (g.sync.release_s + g.sync.flag_latency_sys_s)
    assert barriers == pytest.approx(3.185e-6)
    fixed = (g.sync.stream_launch_s + grid_start_s(g, n, 256) + 2 * g.nvlink.latency_s
             + 2 * tma_latency_s(g, remote=True) + barriers)
    assert p.time_s == pytest.approx(fixed + GiB / min(n * r, link), rel=1e-6)
    # with the fixed part (about 7 us): 46.09, 3.079 and 3.066 ms
    assert p.time_s == pytest.approx({1: 46.09e-3, 15: 3.079e-3, 132: 3.066e-3}[n], rel=2e-3)


def _scaled(system, factor: float, prefix: str, keys: tuple[str, ...]):
    return with_figures(system, {prefix + k: get_figure(system, prefix + k) * factor
                                 for k in keys})


REMOTE_RATES = ("tma_write_per_sm_GBps", "tma_read_per_sm_GBps", "tma_reduce_per_sm_GBps",
                "ldst_write_per_sm_GBps", "ldst_read_per_sm_GBps", "multimem_per_sm_GBps")


@pytest.mark.parametrize("schedule", [
    sched("all-reduce", 64 * MiB, algorithm="two-shot", comm_sms=16),
    sched("all-reduce", 64 * MiB, algorithm="ring", mechanism="register", comm_sms=32),
    sched("all-gather", 16 * MiB, algorithm="direct", comm_sms=8),
    sched("broadcast", 4 * MiB, world=2, algorithm="direct", comm_sms=4),
], ids=lambda s: f"{s.op}-{s.algorithm}-{s.mechanism}")
def test_more_remote_bandwidth_never_slower(schedule):
    times = [predict(_scaled(H100, f, "gpu.transfer_remote.", REMOTE_RATES), schedule).time_s
             for f in (0.5, 1.0, 2.0, 8.0)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:])), times


def test_fit_writes_no_remote_figure():
    # the one-GPU calibration moves local-path figures only
    fitted = [p.key for stage in STAGES for p in stage.params]
    assert fitted and not [k for k in fitted if k.startswith("gpu.transfer_remote.")]
    assert not [k for k in fitted if k.startswith(("gpu.nvlink.", "domain."))]


# The local-copy rates the one-GPU fit writes (validation.calibrate.fit.STAGES), as figures
# of a rate (halved) or of a time per byte (doubled).
LOCAL_RATES = ("gpu.transfer.ldst_local_per_sm_GBps", "gpu.transfer.tma_local_per_sm_GBps",
               "gpu.transfer.tma_reduce_per_sm_GBps", "gpu.copy_engine.bandwidth_GBps")


def _halved_local(system):
    fitted = {p.key for stage in STAGES for p in stage.params}
    per_byte = sorted(k for k in fitted if k.endswith("_ns_per_KiB"))
    assert set(LOCAL_RATES) <= fitted and len(per_byte) >= 11
    values = {k: get_figure(system, k) / 2 for k in LOCAL_RATES}
    values |= {k: get_figure(system, k) * 2 for k in per_byte}
    return with_figures(system, values)


def test_halved_local_rates_leave_large_allreduce():
    # the check (Multi-GPU fidelity, item 3): the one-GPU fit's local-copy rates all
    # halved (as a refit of the committed H200 inputs with every copy twice as slow would
    # give them), dgx-h100's all-reduce at >= 64 MiB moves by less than 1 %: NCCL's ring and
    # NVLS (eager: NVLS copies through its buffers at NCCL's channel rate, D42; graph:
    # zero-copy), pk's in-network (NVLS) and direct two-shot. pk's ring: test_pk_ring_...
    slow = _halved_local(H100)
    assert slow.gpu.transfer.ldst_local_Bps_per_sm == H100.gpu.transfer.ldst_local_Bps_per_sm / 2
    for nbytes in (64 * MiB, GiB):
        cases = [sched("all-reduce", nbytes, algorithm="two-shot", mechanism=m, comm_sms=c)
                 for m, c in (("tma", 16), ("tma", 132), ("register", 132))]
        cases += [sched("all-reduce", nbytes, algorithm="in-network", mechanism="multimem",
                        comm_sms=c) for c in (32, 132)]
        for launch in ("eager", "graph"):
            base = nccl_schedule(H100, "all-reduce", nbytes, launch=launch)
            cases += [dataclasses.replace(base, algorithm=a) for a in ("ring", "nvls")]
        for s in cases:
            before, after = predict(H100, s).time_s, predict(slow, s).time_s
            assert after == pytest.approx(before, rel=0.01), (s.algorithm, s.mechanism, nbytes)
    for mech in ("tma", "register"):
        for far_s, far_d in ((1, 0), (0, 1), (7, 0)):
            args = (mech, far_s + 1, max(1, far_d), True, far_s, far_d)
            assert move_time_per_B(slow.gpu, *args) == move_time_per_B(H100.gpu, *args)


@pytest.mark.parametrize("mechanism, sms", [("register", 132), ("tma", 16), ("tma", 132)])
def test_pk_ring_moves_only_through_its_local_sum(mechanism, sms):
    # pk's ring all-reduce (kernels/collectives/all_reduce.cuh): 2w - 1 phases; every phase but
    # one moves over NVLink (a ring step's sum reads near sources and stores to the next
    # rank: its near loads ride under the far stores, D38, with no first-chunk fill at the
    # local rate); phase w - 1 sums the received chunk into the rank's own output inside the
    # GPU, a local move the one-GPU fit governs. With every local-copy rate halved, the
    # NVLink phases do not move (< 1e-9) and the whole kernel moves by exactly its local
    # phase's change: 2-19 % at 64 MiB - 1 GiB here, the local sum being 3-23 % of the time.
    # (Fusing that sum into the first all-gather store, as NCCL's recvReduceCopySend does,
    # would remove it; the kernel does not: docs/decisions/D38.md.)
    slow = _halved_local(H100)
    for nbytes in (64 * MiB, GiB):
        s = sched("all-reduce", nbytes, algorithm="ring", mechanism=mechanism, comm_sms=sms)
        phases = []
        for system in (H100, slow):
            m = build(system, s)
            phases.append({st.key: _run_step(cl, m.capacity, False, i, st.key)[0]
                           for i, (st, cl, _) in enumerate(m.step_classes())})
        local = [k for k in phases[0] if k[1] == "ring-last"]
        assert len(local) == 1 and len(phases[0]) == 4        # ring0, ring-sum, last, ag
        for key, before in phases[0].items():
            if key not in local:
                assert phases[1][key] == pytest.approx(before, rel=1e-9), key
        grew = phases[1][local[0]] - phases[0][local[0]]
        assert grew > 0
        before, after = predict(H100, s).time_s, predict(slow, s).time_s
        assert after - before == pytest.approx(grew, rel=1e-6)
