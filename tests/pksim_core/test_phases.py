"""pksim_core.workloads.phases: the generated kernels' phases, checked against what the
kernels do (kernels/collectives/*.cuh) and against the least traffic a collective needs
(validation/runtime/reference.py). No simulation."""
from __future__ import annotations

import pytest

from pksim_core import algorithms
from pksim_core.workloads.phases import SM, _copy, bytes_moved, kernel_phases

MiB = 1 << 20


def phases(op, alg, mech, w, nbytes=64 * MiB):
    return kernel_phases(op, alg, mech, w, nbytes)


@pytest.mark.parametrize("w", [2, 3, 4, 8])
def test_one_phase_kernels_move_the_least_traffic(w):
    # nccl-tests sizes: S is the output per rank for all-gather, the input per rank for
    # reduce-scatter and all-to-all, the buffer for all-reduce and broadcast; n = S / w.
    s = 64 * MiB
    n = s / w
    # all-gather direct: each rank reads its shard once, writes it into w outputs
    assert bytes_moved(phases("all-gather", "direct", "tma", w)) == (w * n, w * w * n)
    # reduce-scatter direct: rank r reads shard r of every input, writes its output
    assert bytes_moved(phases("reduce-scatter", "direct", "tma", w)) == (w * w * n, w * n)
    # two-shot all-reduce in one phase: chunk r of every input read, the sum written w times
    assert bytes_moved(phases("all-reduce", "two-shot", "register", w)) == (w * s, w * s)
    # all-to-all: w blocks read and written per rank
    assert bytes_moved(phases("all-to-all", "direct", "register", w)) == (w * w * n, w * w * n)
    # broadcast: every rank pulls the root's buffer (reads meet in L2: readers = w)
    bc = phases("broadcast", "direct", "tma", w)
    assert bytes_moved(bc) == (w * s, w * s)
    assert all(m.readers == w and m.sources == (0,) for m in bc[0].moves())


@pytest.mark.parametrize("w", [2, 4, 8])
def test_phase_counts_follow_the_kernels(w):
    assert len(phases("all-gather", "ring", "tma", w)) == w - 1
    assert len(phases("reduce-scatter", "ring", "tma", w)) == w
    assert len(phases("all-reduce", "ring", "tma", w)) == 2 * w - 1
    assert len(phases("all-reduce", "two-shot", "tma", w)) == 1
    # copy engines: copies to the owner, then the owner's SM kernel writes every output
    ce = phases("all-reduce", "two-shot", "copy-engine", w)
    assert len(ce) == 2
    assert all(m.engine == "" and len(m.sources) == 1 for m in ce[0].moves())
    assert all(m.engine == SM and m.reduce and len(m.dests) == w for m in ce[1].moves())
    # the copy-engine ring stages each partial sum (SM kernel) before copying it on
    assert len(phases("reduce-scatter", "ring", "copy-engine", w)) == 1 + 2 * (w - 2) + 1


def test_ring_reduce_scatter_sums_into_the_next_rank():
    ring = phases("reduce-scatter", "ring", "register", 4)
    first, middle, last = ring[0].moves(), ring[1].moves(), ring[-1].moves()
    assert [(m.issuer, m.sources, m.dests, m.reduce) for m in first] == [
        (r, (r,), ((r + 1) % 4,), False) for r in range(4)]
    assert all(m.sources == (m.issuer, m.issuer) and m.dests == ((m.issuer + 1) % 4,)
               and m.reduce for m in middle)
    assert all(m.dests == (m.issuer,) and m.reduce for m in last)


def test_all_to_all_copies_run_one_after_another_on_sms_only():
    assert {m.serial for m in phases("all-to-all", "direct", "tma", 8)[0].moves()} == {8}
    assert {m.serial for m in phases("all-to-all", "direct", "copy-engine", 8)[0].moves()} == {1}


def test_no_phases_where_codegen_has_no_kernel():
    assert kernel_phases("all-reduce", "in-network", "multimem", 8, MiB) is None
    assert kernel_phases("all-reduce", "ring", "multimem", 8, MiB) is None
    assert kernel_phases("all-reduce", "rhd", "copy-engine", 8, MiB) is None
    # every kernel codegen runs has its phases (pksim_core.algorithms names them); the in-network
    # kernels' are the streamed model's (pksim_core.collective_model)
    phased = {r.key for r in algorithms.ROWS if r.phases}
    assert phased == {r.key for r in algorithms.kernels() if r.algorithm != "in-network"}


@pytest.mark.parametrize("w", [2, 4, 8])
def test_rhd_phases_move_what_the_kernels_move(w):
    """rhd.cuh, per rank, n = a shard, c = a chunk (buffer / w): the doubling all-gather
    copies its own and the partner's shard (phase 0, one after the other), then 2^j shards:
    w n read and written; the halving reduce-scatter sums 2 x (w >> (k + 1)) shards into half
    as many: 2 (w - 1) n read, (w - 1) n written; the all-reduce halves over chunks, then
    doubles: 3 (w - 1) c read, 2 (w - 1) c written."""
    s = 64 * MiB
    n = s / w
    L = w.bit_length() - 1
    ag = phases("all-gather", "rhd", "tma", w)
    assert len(ag) == L and bytes_moved(ag) == (w * w * n, w * w * n)
    assert all(m.serial == 2 for m in ag[0].moves())
    assert {m.sources for m in ag[0].moves() if m.issuer == 1} == {(1,), (0,)}
    rs = phases("reduce-scatter", "rhd", "register", w)
    assert len(rs) == L and bytes_moved(rs) == (w * 2 * (w - 1) * n, w * (w - 1) * n)
    assert [m.sources for m in rs[0].moves()][:2] == [(0, w // 2), (1, 1 ^ (w // 2))]
    assert all(m.reduce and m.warm == (2 if k else 0) for k, st in enumerate(rs) for m in st.moves())
    ar = phases("all-reduce", "rhd", "tma", w)
    assert len(ar) == 2 * L
    assert bytes_moved(ar) == (w * 3 * (w - 1) * n, w * 2 * (w - 1) * n)


def test_copy_engine_broadcast_reads_the_root_once_per_copy():
    """Virtual ranks: SM broadcasts read the root's buffer from memory once for all ranks
    (the others hit L2), copy engines copy one after another and each reads it again. At
    8 ranks x 1 GiB: copy engines move 8 GiB in and 8 GiB out of HBM (16 GiB); the register
    kernel 1 GiB in and 8 GiB out (9 GiB). HBM busy time = traffic / HBM capacity."""
    from hwmodels.catalog import load_system
    from pksim_core.schedule import Schedule
    from pksim_core.simulate import predict
    system = load_system("h200-virtual")
    cap = system.gpu.hbm.effective_Bps
    gib = 1 << 30

    def hbm_busy(mech):
        s = Schedule(op="broadcast", shape=(("bytes", gib),), world=8, algorithm="direct",
                     mechanism=mech, comm_sms=16)
        return predict(system, s).breakdown["hbm"]

    assert hbm_busy("copy-engine") == pytest.approx(16 * gib / cap, rel=1e-6)
    assert hbm_busy("register") == pytest.approx(9 * gib / cap, rel=1e-6)


def test_split_matrix_displacements_are_the_sums_before_each_block():
    # all-to-all-v's moves copy block r -> p from its send displacement (what r sends to
    # ranks before p) into its receive displacement (what ranks before r send to p): the
    # offsets decide each move's shift off the 16-byte grid (pksim_core.shifts)
    w, e = 5, 2
    rows = [[3, 0, 8, 1, 5], [2, 7, 0, 0, 4], [9, 1, 1, 6, 0], [0, 0, 2, 3, 3], [1, 4, 5, 0, 2]]
    splits = ";".join(",".join(map(str, row)) for row in rows)
    (step,) = kernel_phases("all-to-all-v", "direct", "register", w, 0, dtype="bf16",
                            extra=(("splits", splits),))
    want = [_copy(r, rows[r][p] * e, (r,), (p,), sum(rows[r][:p]) * e,
                  sum(rows[q][p] for q in range(r)) * e, False,
                  serial=sum(1 for v in rows[r] if v))
            for r in range(w) for p in range(w) if rows[r][p]]
    assert step.moves() == want
    assert any(m.shifts for m in want)      # some blocks sit off the grid: offsets matter

