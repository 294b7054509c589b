"""``pksim codegen --program NAME``: the generated kernels of a program's communication.

Every communication op of a program (pksim_core.programs) becomes one generated collective, in its
group's size (a sub-group's collective is the same kernel at that world):

=====================  ======================================================================
program op             kernel
=====================  ======================================================================
all-reduce, reduce-    the collective itself; a reduce op other than sum (avg, min, max) in its
scatter, reduce        config (collectives/epilogue.cuh, rooted.cuh)
all-gather, all-to-    the collective itself (copies move any element type as 2- or 4-byte
all, broadcast,        elements: the library is the same)
gather, scatter
all-gather-v,          the -v kernel (collectives/varsize.cuh); its split sizes are run-time
all-to-all-v           arguments, so the library serves every rank's splits
all-gather-object      the all-gather (its two calls: the lengths, then the padded objects)
sendrecv               send-recv (collectives/varsize.cuh), its sizes a run-time matrix too
=====================  ======================================================================

The schedule of each is the fastest the model predicts among those codegen emits
(pksim_core.kernel_contract.emit_reason), at the op's size; the -v and send-recv kernels at the
program's split sizes (pksim_core.programs.costs.kernel_call), the schedule pksim's best costs them
with, so that ``predict --program`` and the emitted kernels' predictions agree.
Reductions of types other than bf16 and fp32 and groups of one rank are not emitted; the index
says why. Distinct schedules are emitted once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codegen.manifest import Emitted
from codegen.plan import algorithms as codegen_algorithms
from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from pksim_core.kernel_contract import emit_reason
from pksim_core.prediction import Prediction
from pksim_core.programs.costs import kernel_call
from pksim_core.programs.model import DTYPE_BYTES, Op, ProgramSpec
from pksim_core.schedule import Schedule
from pksim_core.search import search, space

KERNEL_OP = {"all-reduce": "all-reduce", "reduce-scatter": "reduce-scatter", "reduce": "reduce",
             "all-gather": "all-gather", "all-to-all": "all-to-all", "broadcast": "broadcast",
             "gather": "gather", "scatter": "scatter", "all-gather-v": "all-gather-v",
             "all-to-all-v": "all-to-all-v", "all-gather-object": "all-gather",
             "sendrecv": "send-recv"}
REDUCING = ("all-reduce", "reduce-scatter", "reduce")


@dataclass(frozen=True)
class CommKernel:
    """One communication op of a program and the kernel emitted for it (or why none is)."""
    op: str                       # the program's op name
    kind: str
    schedule: Schedule | None
    prediction: Prediction | None
    reason: str = ""              # why nothing is emitted (schedule None)


def kernel_for(system: System, program: ProgramSpec, op: Op) -> CommKernel:
    """The schedule codegen emits for a communication op (the model's fastest that it can)."""
    kind = op.kind
    n = program.groups[op.group].size
    if n < 2:
        return CommKernel(op.name, kind, None, None, "a group of one rank: a local copy, no kernel")
    elem = DTYPE_BYTES[op.dtype]
    reducing = kind in REDUCING
    if reducing and op.dtype not in ("bf16", "fp32"):
        return CommKernel(op.name, kind, None, None,
                          f"generated reductions sum bf16 and fp32, not {op.dtype}")
    dtype = op.dtype if reducing else ("fp32" if elem % 4 == 0 else "bf16")
    extra: dict[str, str] = {}
    reduce_op = op.param("reduce", "sum")
    if reducing and reduce_op != "sum":
        extra["reduce_op"] = reduce_op
    kop = KERNEL_OP[kind]
    nbytes = op.comm_bytes
    if kind in ("all-gather-v", "all-to-all-v", "sendrecv"):
        call = kernel_call(program, op)
        if call is None:
            return CommKernel(op.name, kind, None, None, "no send stays inside the group"
                              if kind == "sendrecv" else "every split is empty")
        nbytes, dtype = call.nbytes, call.dtype
        extra.update(call.extra)
    else:
        if kind == "all-gather-object":
            nbytes = n * op.param("object_bytes")
        nbytes = max(16, -(-nbytes // 16) * 16)
    cands = space(system, kop, nbytes, n, 1, algorithms=codegen_algorithms(kop), chunks=(0,),
                  extra=tuple(sorted(extra.items())))
    cands = [c.with_(dtype=dtype, root=min(op.param("root", 0), n - 1)) for c in cands]
    cands = [c for c in dict.fromkeys(cands) if emit_reason(system, c) is None]
    if not cands:
        return CommKernel(op.name, kind, None, None, f"codegen emits no {kop} schedule here")
    try:
        best = search(system, cands, top=1).ranked[0]
    except InfeasibleError as exc:
        return CommKernel(op.name, kind, cands[0], None, f"not predicted: {exc}")
    return CommKernel(op.name, kind, best.schedule, best)


def program_kernels(system: System, program: ProgramSpec) -> list[CommKernel]:
    return [kernel_for(system, program, op) for op in program.comm_ops]


def emit_program(system: System, program: ProgramSpec, out_dir: str | Path, emit, command: str = ""
                 ) -> tuple[list[Emitted], Path]:
    """Emit every distinct kernel of the program's communication into ``out_dir`` (``emit``:
    codegen.emit) and an index, ``program-<name>.json``: per op its kernel's file, schedule
    and prediction, or why it has none. Returns the emitted units and the index's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    units: dict[str, Emitted] = {}
    rows = []
    for k in program_kernels(system, program):
        row = {"op": k.op, "kind": k.kind}
        if k.schedule is not None:
            key = k.schedule.key()
            if key not in units:
                units[key] = emit(system, k.schedule, k.prediction, out, command=command)
            row.update(source=units[key].source.name, schedule=k.schedule.to_dict(),
                       label=k.schedule.label(), world=k.schedule.world,
                       predicted_s=k.prediction.time_s if k.prediction else None)
            if k.reason:
                row["note"] = k.reason
        else:
            row["not_emitted"] = k.reason
        rows.append(row)
    index = out / f"program-{program.name}.json"
    index.write_text(json.dumps({"program": program.name, "system": system.name,
                                 "kernels": rows}, indent=1) + "\n")
    return list(units.values()), index
