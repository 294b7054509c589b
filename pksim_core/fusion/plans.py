"""A fused candidate's plan and what it shares with other candidates: how finely each peer's
part is cut, whether the kernel store-adds from its epilogue or pulls its partial sums, the
clear of its outputs, and the family key of the candidates whose flows are the same (the SM
count, the overlap strategy and a chunk size past the TMA message cap change neither).
Topologies and plans are cached (``pksim_core.cache``).
"""
from __future__ import annotations

import math

from hwmodels.sm import GEMM_TILE
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core import cache
from pksim_core.cache import BoundedCache
from pksim_core.mechanisms.flow import message_bytes
from pksim_core.schedule import Schedule
from pksim_core.workloads import fused_ops as fused_workload
from pksim_core.workloads.fused_ops import ChunkPlan

MAX_CHUNKS_PER_PEER = 16
PLANS = BoundedCache(64)


def shape_of(schedule: Schedule) -> dict[str, int]:
    return {k: int(v) for k, v in schedule.shape}


def plan_key(schedule: Schedule, chunks_per_peer: int) -> tuple:
    """What ``fused_workload.plan`` depends on."""
    return (schedule.op, schedule.shape, schedule.world, schedule.domains, schedule.dtype,
            schedule.extra, schedule.algorithm, chunks_per_peer, store_add(schedule))


def store_add(schedule: Schedule) -> bool:
    """The intra-SM kernels of gemm-rs / gemm-ar store-add each tile from the epilogue's
    shared-memory staging buffer (kernels/fused/fused.cuh, store_add_owners / _all)."""
    return schedule.overlap == "intra-sm" and schedule.op in ("gemm-rs", "gemm-ar")


def output_clear_s(system: System, topo: Topology, schedule: Schedule) -> float:
    """What the store-add kernels pay before they start: their outputs must be zero, and
    the entry point clears them on the stream (kernels/fused/entry.cuh, zero_output), one
    memset per rank (``sync.stream_launch_us`` each) writing the rank's output (gemm-ar:
    m x n; gemm-rs: its m / world rows) at the HBM's rate; virtual ranks clear every
    rank's output on their one GPU. Other kernels: 0."""
    if not store_add(schedule):
        return 0.0
    shape = shape_of(schedule)
    per_gpu = topo.world if topo.virtual else 1
    rows = shape["m"] if schedule.op == "gemm-ar" else shape["m"] / topo.world
    nbytes = per_gpu * rows * shape["n"] * schedule.element_bytes
    gpu = system.gpu
    return per_gpu * gpu.sync.stream_launch_s + nbytes / gpu.hbm.effective_Bps


def pull_pieces(schedule: Schedule, topo: Topology) -> int:
    """The inter-SM kernels of gemm-rs (direct) and gemm-ar (two-shot), up to
    EXACT_SHIFTS_UP_TO ranks (past it the plan keeps the per-chunk push approximation):
    each owner's communication blocks pull and sum the world partials of its rows
    (kernels/fused/comm.cuh, pull_reduce; codegen.fused.KERNELS) as its tiles complete,
    i.e. during the last chunk: the number of pieces that chunk's reduction follows, one
    per wave of its tiles over the rank's SMs (at most MAX_CHUNKS_PER_PEER). 0: not a pull
    kernel (gemm-ar's one-shot and in-network forms push)."""
    if not (schedule.overlap == "inter-sm"
            and (schedule.op, schedule.algorithm) in (("gemm-rs", "direct"),
                                                      ("gemm-ar", "two-shot"))
            and schedule.world <= fused_workload.EXACT_SHIFTS_UP_TO):
        return 0
    shape = shape_of(schedule)
    tiles = math.ceil(shape["m"] / topo.world / GEMM_TILE[0]) * math.ceil(shape["n"] /
                                                                          GEMM_TILE[1])
    return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(tiles / topo.sms_per_rank())))


def count_chunks_per_peer(schedule: Schedule, topo: Topology) -> int:
    """How finely each peer's part is cut: ``chunk_bytes`` if the schedule sets it,
    else one chunk per peer (inter-SM) or one per wave of output tiles (intra-SM)."""
    if schedule.op not in ("gemm-rs", "gemm-ar", "ag-gemm"):
        return 1
    shape = shape_of(schedule)
    n = topo.world
    if schedule.chunk_bytes:
        cols = shape["k"] if schedule.op == "ag-gemm" else shape["n"]
        part = shape["m"] / n * cols * schedule.element_bytes
        return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(part / schedule.chunk_bytes)))
    if schedule.overlap != "intra-sm":
        return 1
    tiles = math.ceil(shape["m"] / n / GEMM_TILE[0]) * math.ceil(shape["n"] / GEMM_TILE[1])
    return max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(tiles / topo.sms_per_rank())))


def family(system: System, topo: Topology, comm: Schedule, chunks_per_peer: int,
            reduced: bool) -> tuple:
    """The key of everything the flows of ``comm`` depend on. Outside one GPU the SM
    count changes only capacities (``pksim_core.mechanisms.flow.transfer_issue_weight``); the overlap strategy
    changes only capacities and the plan's chunking (``chunks_per_peer``); a chunk size at or past
    the TMA message cap gives the same messages as none (``pksim_core.mechanisms.flow.message_bytes``)."""
    chunk = comm.chunk_bytes
    if chunk and message_bytes(topo, comm, math.inf) == \
            message_bytes(topo, comm.with_(chunk_bytes=0), math.inf):
        chunk = 0
    norm = comm.with_(overlap="inter-sm", chunk_bytes=chunk,
                      comm_sms=comm.comm_sms if topo.virtual else 1)
    return (id(system), norm.key(), chunks_per_peer, reduced, store_add(comm), pull_pieces(comm, topo))


def topology(system: System, schedule: Schedule) -> Topology:
    return cache.topology(system, schedule.world, schedule.domains)


def plan_for(system: System, schedule: Schedule, topo: Topology, chunks_per_peer: int) -> ChunkPlan:
    key = (id(system),) + plan_key(schedule, chunks_per_peer) + (pull_pieces(schedule, topo),)
    hit = PLANS.lookup(system, key)
    if hit is None:
        skew = float(dict(schedule.extra).get("skew", 0.0))
        hit = PLANS.store(system, key, fused_workload.plan(
            schedule.op, shape_of(schedule), topo.world, schedule.element_bytes,
            schedule.algorithm, chunks_per_peer, skew, store_add(schedule), pull_pieces(schedule, topo)))
    return hit
