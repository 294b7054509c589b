"""What a solution of ``pksim pkb solve`` is predicted to take by PKB's metric (one call's share
of calls run back to back, ``programs.predict.steady_time``), beside the reference's.

The solution runs the reference's compute as written, in order, on one stream, and each of its
collectives as the generated kernel pksim.torch picks: so its plan is the program's baseline
plan (the same compute tasks and order) with every collective priced as that kernel (the
model's fastest schedule among those that run, no NVLink multicast: ``choice.choose``), plus
the copies around it: the input into the symmetric buffer, the result out of it into a new
tensor (pksim.torch), and that tensor into the caller's (the shim keeps torch.distributed's
in-place calls): three more launches and their bytes through HBM. A collective no generated kernel serves keeps
NCCL's price and is named (``unserved``); object collectives (host metadata on gloo) keep
theirs. A problem whose solution is one fused kernel is priced as the program's best plan when
that plan is the fused task alone. Of the best plan's folds only those the solution generates
count (``pksim.pkb.folds``: an all-reduce with the division after it); no other fold, coalescing
or overlap of the best plan does: only what the solution runs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from pksim_core.programs.costs import Call, calls, kernel_call, memory_s
from pksim_core.programs.model import ProgramSpec
from pksim_core.programs.plan import baseline_plan
from pksim_core.programs.predict import steady_time
from pksim_core.programs.timeline import ProgramTask, run_tasks
from pksim_core.search import search
from pksim.torch.choice import choose
from pksim.torch.errors import CommError

# a call's input and output bytes as shares of its size (nccl-tests' count) at world n
_COPIES = {
    "all-gather": (lambda n: 1 / n, lambda n: 1.0), "gather": (lambda n: 1 / n, lambda n: 1.0),
    "reduce-scatter": (lambda n: 1.0, lambda n: 1 / n), "scatter": (lambda n: 1.0, lambda n: 1 / n),
}
_WHOLE = (lambda n: 1.0, lambda n: 1.0)
COPIES_OUT = 2             # out of the symmetric buffer, then into the caller's tensor


@dataclass(frozen=True)
class SolutionPrediction:
    steady_s: float
    one_s: float
    unserved: tuple[str, ...]           # collectives priced as NCCL (no generated kernel runs them)
    calls: int = 0                      # the collective calls priced as generated kernels
    kernel_faster: int = 0              # of them, those whose kernel alone beats NCCL's call


def generated_s(system: System, call: Call, reduce_op: str = "sum") -> tuple[float, str, float] | None:
    """(time, label, the kernel's time alone) of the kernel pksim.torch runs for ``call``
    (``choice.choose``: the model's fastest runnable schedule of its size bucket), priced at the
    call's own size and splits, copies included; None when no generated kernel serves it."""
    try:
        chosen = choose(system.name, call.op, call.nbytes, call.world, call.dtype, reduce_op).schedule
    except CommError:
        return None
    sched = chosen.with_(shape=(("bytes", call.nbytes),), root=call.root,
                         extra=tuple(call.extra) + tuple(
                             e for e in chosen.extra if e[0] not in dict(call.extra)) or chosen.extra)
    try:
        time_s = search(system, [sched], top=1).ranked[0].time_s
    except InfeasibleError:
        return None
    fin, fout = _COPIES.get(call.op, _WHOLE)
    # read and written once each: the input copied in, the output out twice (see the module)
    moved = 2 * call.nbytes * (fin(call.world) + COPIES_OUT * fout(call.world))
    return time_s + memory_s(system, moved), sched.label(), time_s


def predict_solution(system: System, program: Program, folded: frozenset[str] = frozenset()
                     ) -> SolutionPrediction:
    """The solution's plan (see the module), run once and back to back. ``folded``: the
    elementwise ops the solution runs inside the all-reduce before them (pksim.pkb.folds:
    the average's epilogue of the generated kernel): their tasks go, and that all-reduce is
    priced as the kernel with the ``avg`` reduce op."""
    plan = baseline_plan(system, program)
    launch = system.gpu.sync.stream_launch_s
    priced: dict[str, list[tuple[float, str, float] | None]] = {}
    faster = 0
    tasks: list[ProgramTask] = []
    unserved = []
    seen: dict[str, int] = {}
    names = [o.name for o in program.ops]
    epilogue = {names[names.index(n) - 1] for n in folded}    # the all-reduces that fold them
    for t in plan.tasks:
        op = program.op(t.ops[0])
        if t.kind != "comm" and set(t.ops) <= folded:       # run inside the kernel: no time,
            tasks.append(replace(t, duration_s=0.0, launches=0, label="folded"))   # no launch
            continue
        if t.kind != "comm" or op.kind == "all-gather-object":
            tasks.append(t)
            continue
        if op.name not in priced:
            kernel = kernel_call(program, op)
            todo = [kernel] if kernel is not None else [] if op.kind == "sendrecv" \
                else calls(program, op)
            rop = "avg" if op.name in epilogue else "sum"
            priced[op.name] = [generated_s(system, c, rop) if c.world > 1 else None for c in todo]
        i = seen.get(op.name, 0)
        seen[op.name] = i + 1
        got = priced[op.name][min(i, len(priced[op.name]) - 1)] if priced[op.name] else None
        if got is None:
            if program.groups[op.group].size > 1:
                unserved.append(f"{op.name} ({op.kind})")
            tasks.append(t)
            continue
        time_s, label, alone_s = got
        faster += alone_s < t.duration_s
        extra = 1 + COPIES_OUT
        tasks.append(replace(t, duration_s=time_s + extra * launch, label=f"pksim.torch {label}",
                             launches=t.launches + extra))
    one = max((s.end_s for s in run_tasks(system, tasks)), default=0.0)
    n = sum(1 for t in tasks if t.label.startswith("pksim.torch "))
    return SolutionPrediction(steady_time(system, tasks, one), one, tuple(unserved), n, faster)
