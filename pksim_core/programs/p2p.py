"""A send/recv batch (``torch.distributed.batch_isend_irecv``) as its exact transfers: every
rank of every group of the partition sends each of its ``send`` entries to the member that many
places along (dropped past an end of the group without ``wrap``), all at once, as one step on
the fluid model (``pksim_core.collective_model.assemble``).

NCCL runs the batch as point-to-point sends on its p2p channels with the Simple protocol
(``pksim_core.nccl.nccl_schedule``'s point-to-point schedule), costed here. pk runs it as the
send-recv kernel codegen emits (varsize.cuh), costed by its phases like every generated collective
(``pksim_core.programs.costs.kernel_call``).
"""
from __future__ import annotations

import hashlib

from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core.cache import BoundedCache
from pksim_core.collective_model import assemble, simulate
from pksim_core.nccl import nccl_schedule
from pksim_core.program import StepProgram as Steps, Step, Transfer
from pksim_core.programs.check import peer_position
from pksim_core.programs.costs import CallChoice
from pksim_core.programs.model import Op, ProgramSpec
from pksim_core.schedule import Schedule

_RUNS = BoundedCache(1024)


def transfers(program: ProgramSpec, op: Op) -> tuple[tuple[int, int, int], ...]:
    """(source rank, destination rank, bytes) of every send of the batch, over all ranks."""
    t = program.tensors
    wrap = op.param("wrap", True)
    out = []
    for part in program.groups[op.group].parts:
        n = len(part)
        for p, rank in enumerate(part):
            for e in op.p2p:
                q = peer_position(p, e.offset, n, wrap) if e.send else None
                if q is not None:
                    out.append((rank, part[q], t[e.tensor].nbytes))
    return tuple(out)


def per_rank(program: ProgramSpec, op: Op) -> list[tuple[float, float]]:
    """(bytes sent, bytes received) per rank."""
    load = [[0.0, 0.0] for _ in range(program.world)]
    for src, dst, nbytes in transfers(program, op):
        load[src][0] += nbytes
        load[dst][1] += nbytes
    return [(s, r) for s, r in load]


def _steps(moves: tuple[tuple[int, int, int], ...], world: int, key: str) -> Steps:
    step = Step(("p2p", key), lambda: [Transfer(s, d, float(b), "copy", ((s, d, i),))
                                       for i, (s, d, b) in enumerate(moves)])
    return Steps([step], world)


def sendrecv_nccl(system: System, program: ProgramSpec, op: Op) -> CallChoice:
    """NCCL's point-to-point sends for a send/recv batch."""
    moves = transfers(program, op)
    key = hashlib.sha256(repr((program.world, moves)).encode()).hexdigest()[:16]
    hit = _RUNS.lookup(system, (id(system), key))
    if hit is not None:
        return hit
    busiest = max(max(s, r) for s, r in per_rank(program, op)) or 1
    nccl = nccl_schedule(system, "all-to-all", int(busiest), program.world)
    nccl = nccl.with_(extra=tuple(sorted(nccl.extra + (("p2p", key),))))
    choice = CallChoice(_run(system, nccl, moves, key), "nccl/p2p/Simple", nccl.comm_sms, nccl)
    return _RUNS.store(system, (id(system), key), choice)


def _run(system: System, schedule: Schedule, moves, key: str) -> float:
    """The batch's time alone, without NCCL's host floor of back-to-back calls (the program's
    scheduler issues the launches itself)."""
    topo = Topology.build(system, schedule.world)
    model = assemble(system, schedule, topo, _steps(moves, topo.world, key))
    model.host_floor_s = 0.0
    return simulate(model).time_s
