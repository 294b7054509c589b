"""One cost path per mechanism (issue #43): the per-mechanism transfer figures (gpu.transfer,
gpu.transfer_remote, the copy engines' costs, the kernel profile) and a path's latencies are
read only by the mechanisms' components (pksim_core.mechanisms), the hardware's own schema and
formulas, and the topology; the DES and the microbenchmarks' model cost a move the same way."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from hwmodels import profile, system
from hwmodels.catalog import load_system
from pksim_core.mechanisms import MECHANISMS, of
from pksim_core.mechanisms.flow import move_flow
from pksim_core.microbench_model import _block_move_body
from pksim_core.program import Move
from tests.pksim_core.cases import sched

ROOT = Path(__file__).resolve().parents[2]
# Launch costs of a kernel (hwmodels.sm.grid_start_s) and the TMA capability flag: hardware
# figures that no mechanism owns.
NOT_PER_MECHANISM = {"tma", "move_start_s", "thread_start_s"}
PATH_LATENCIES = {"one_way_s", "round_trip_s", "drain_s"}
# module -> the restricted attributes it may read (None: all of them)
ALLOWED = {
    "hwmodels/system.py": None, "hwmodels/profile.py": None, "hwmodels/catalog.py": None,
    "hwmodels/checks.py": None, "hwmodels/topology.py": None,
    "hwmodels/sm.py": {"issue_knee"},                # the tensor cores' roofline bend
}


def _restricted() -> set[str]:
    names = set()
    for cls in (system.TransferSpec, system.RemoteTransferSpec, profile.KernelSpec):
        names |= {f.name for f in dataclasses.fields(cls)}
    names |= {"setup_s", "command_s", "stream_start_s", "copy_engine_setup_s"}  # copy engines
    return (names - NOT_PER_MECHANISM) | PATH_LATENCIES | {"gpu_path", "reduction_path"}


def test_nothing_else_reads_the_mechanisms_figures_or_a_paths_latency():
    restricted = _restricted()
    offenders = []
    for path in sorted(p for pkg in ("hwmodels", "pksim", "codegen", "validation")
                       for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("pksim_core/mechanisms/"):
            continue
        allowed = ALLOWED.get(rel, set())
        if allowed is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in restricted - allowed:
                offenders.append(f"{rel}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_the_check_would_catch_a_reader():
    # the same scan on a line that reads a profile figure and a path's latency
    tree = ast.parse("x = gpu.kernel.tma_move_base_s_per_B + topo.gpu_path(0, 1).one_way_s")
    found = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & _restricted()
    assert found == {"tma_move_base_s_per_B", "gpu_path", "one_way_s"}


def test_one_component_per_mechanism():
    assert set(MECHANISMS) == {"tma", "register", "copy-engine", "multimem"}
    gpu = load_system("dgx-h100").gpu
    # each gives its own NVLink per-SM rate (the mechanism study's figures) and issue capacity
    r = gpu.transfer_remote
    assert of("tma").per_sm_Bps(gpu, True) == r.tma_write_Bps_per_sm
    assert of("register").per_sm_Bps(gpu, True, "read") == r.ldst_read_Bps_per_sm
    assert of("multimem").per_sm_Bps(gpu, True) == r.multimem_Bps_per_sm
    assert of("copy-engine").issue_capacity(gpu, 16, True) == \
        gpu.copy_engine.count * gpu.copy_engine.bandwidth_Bps
    # a TMA message's round trip: half-rate message size / per-SM rate; none for registers
    assert of("tma").message_s(gpu, remote=True) == pytest.approx(
        r.tma_message_half_B / r.tma_write_Bps_per_sm)
    assert of("register").message_s(gpu, remote=True) == 0.0


def test_a_path_owns_its_latencies():
    from hwmodels.topology import Topology
    topo = Topology.build(load_system("dgx-h100"), 8)
    path = topo.gpu_path(0, 3)
    assert path.one_way_s == pytest.approx(310e-9)            # gpu.nvlink.latency_ns
    assert path.round_trip_s == 2 * path.one_way_s and path.drain_s == path.one_way_s


@pytest.mark.parametrize("mech, reduce, s, d, crossed", [
    ("tma", False, 1, 1, False), ("tma", True, 4, 1, False), ("register", True, 8, 8, False),
    ("register", False, 1, 4, False), ("tma", True, 4, 1, True), ("register", True, 8, 1, True)])
def test_the_des_and_the_microbenchmark_model_cost_a_move_alike(mech, reduce, s, d, crossed):
    # one rank of h200-virtual-calibrated, alone (world 1), moving 64 MiB on 16 blocks from
    # HBM: the DES's move (pksim_core.mechanisms.flow.move_flow) and block_moves' model
    # (pksim_core.microbench_model._block_move_body) ask the same component for the rate and
    # the latency: the flow's time on an idle GPU equals the microbenchmark's body
    from hwmodels.fluid import single_flow_time_s
    from hwmodels.topology import Topology
    system_ = load_system("h200-virtual-calibrated")
    topo = Topology.build(system_, 1)
    nbytes = 64 * 2**20
    move = Move(issuer=0, payload=nbytes, sources=(0,) * s, dests=(0,) * d, reduce=reduce,
                dealt=mech == "tma" and not reduce, crossed=crossed)
    schedule = sched("all-gather", world=1, mechanism=mech, comm_sms=16)
    spec = move_flow(topo, schedule, move, nbytes, False, 1.0)
    caps = {name: r.capacity_Bps for name, r in topo.resources.items()}
    caps["issue[0]"] = 16 * of(mech).per_sm_Bps(system_.gpu, remote=False)
    des = single_flow_time_s(caps, dict(spec.usage), nbytes, spec.latency_s)
    model = _block_move_body(system_.gpu, nbytes, mech, "reduce" if reduce else "copy", s, d,
                             16, hot=False, crossed=crossed)
    assert des == pytest.approx(model, rel=1e-9)


def test_a_crossed_tma_sum_pays_the_profiles_term_per_source_and_a_register_one_none():
    # D83: a sum into one destination from its part of every source, inside one GPU
    gpu = load_system("h100-calibrated").gpu
    term = gpu.kernel.tma_move_cross_s_per_B
    assert term * 1e9 * 1024 == pytest.approx(5.541, rel=1e-3)      # pk-hopper-h100's fit
    for sources in (2, 4, 8):
        plain = of("tma").time_per_B(gpu, sources, 1, True)
        assert of("tma").time_per_B(gpu, sources, 1, True, crossed=True) == \
            pytest.approx(plain + sources * term, rel=1e-12)
        assert of("register").time_per_B(gpu, sources, 1, True, crossed=True) == \
            of("register").time_per_B(gpu, sources, 1, True)
    assert of("tma").time_per_B(gpu, 1, 4, False, crossed=True) == \
        of("tma").time_per_B(gpu, 1, 4, False)                       # a copy sums nothing


def test_the_moves_read_crossed_are_the_direct_reduce_scatter_and_the_two_shot_reduce():
    from pksim_core.workloads import phases

    def moves(build, ce=False):
        return [m for step in build(4, 4 * 2**20, 0, ce, "bf16") for m in step.build_moves()]
    assert all(m.crossed for m in moves(phases._rs_direct) + moves(phases._reduce_two_shot))
    # the two-shot all-reduce's sums write every destination (no term, D83); the copy-engine
    # form copies, then sums its own scratch
    assert not any(m.crossed for m in moves(phases._ar_two_shot) + moves(phases._rs_direct, True)
                   + moves(phases._ar_one_shot))
