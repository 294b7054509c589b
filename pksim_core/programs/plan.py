"""The two ways a program runs: as PyTorch + NCCL run it (the baseline), and the parts of
pksim's best (chosen in ``pksim_core.programs.best``).

Baseline: one task per op in program order on one stream: library kernels (a memory-bound op
as the ``kernels`` PyTorch launches for it), NCCL's own pick for every collective and
point-to-point batch, host reads where the program has them.

pksim's best (docs/design/programs.md, "Programs: pksim's best") runs every op alone as the baseline
does, but a memory-bound op as one kernel and each communication op at the faster of pk's best
schedule and NCCL's pick, on a compute and a communication lane (``pksim_core.programs.timeline``),
except where it makes one of these rewrites (``rewrites``):
1. a GEMM whose only reader is a reduce-scatter or all-reduce of its output, or whose A is
   read only from an all-gather's output, runs as pksim's fused op (gemm-rs, gemm-ar,
   ag-gemm: the fused search, pksim_core.search.fused_space);
2. the memory-bound ops that only feed a collective, or are the only reader of its output, run
   in the collective's kernel (a prologue or epilogue of pk's best schedule): one launch less
   each, and the bytes of the collective's own tensor not read or written again;
3. consecutive independent collectives of one kind, group, reduction and root run as one
   call carrying all their bytes.
A rewrite merges ops into one task (``Groups``); merges that close a dependency cycle are not
made. Why: docs/decisions/D46.md, D61.md.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from hwmodels.errors import ConfigError, InfeasibleError
from hwmodels.system import System
from pksim_core.programs.costs import (SCHEDULE_DTYPE, Call, best_call, calls, compute_s,
                                  kernel_call, memory_s, nccl_call, pk_call)
from pksim_core.programs.model import COLLECTIVE_KINDS, DTYPE_BYTES, GEMM_KINDS, Op, ProgramSpec
from pksim_core.programs.p2p import sendrecv_nccl
from pksim_core.programs.timeline import ProgramTask
from pksim_core.search import fused_space, search

COMPUTE_LABEL = {"gemm": "library GEMM", "grouped-gemm": "library grouped GEMM",
                 "conv": "library convolution", "attention": "library attention"}
FUSABLE_DTYPES = ("bf16", "fp16")
COALESCE = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce")


@dataclass(frozen=True)
class ProgramPlan:
    tasks: tuple[ProgramTask, ...]
    task_of: dict[str, int]          # op -> the (last) task that runs it
    notes: tuple[str, ...] = ()


# ---- one op -------------------------------------------------------------------------------------
def _compute_task(system: System, op: Op, kernels: int) -> ProgramTask:
    if op.param("kernels", 1) == 0:           # a rebinding: no kernel, only the order
        return ProgramTask(op.name, (op.name,), ("compute",), 0.0, "compute", "no kernel (rebinding)",
                    launches=0)
    launch = system.gpu.sync.stream_launch_s
    label = COMPUTE_LABEL.get(op.kind) or f"{op.kind} ({kernels} kernel{'s' * (kernels > 1)})"
    return ProgramTask(op.name, (op.name,), ("compute",), kernels * launch + compute_s(system, op),
                "compute", label, launches=kernels)


def _comm_tasks(system: System, program: ProgramSpec, op: Op, best: bool) -> list[ProgramTask]:
    kernel = kernel_call(program, op)     # the -v and send-recv kernels at their split sizes
    if op.kind == "sendrecv":
        c = sendrecv_nccl(system, program, op)
        pk = pk_call(system, kernel) if best and kernel is not None else None
        if pk is not None and pk.time_s < c.time_s:
            c = pk
        return [ProgramTask(op.name, (op.name,), ("comm",), c.time_s, "comm", c.label, sms=c.sms)]
    out = []
    for i, call in enumerate(calls(program, op)):
        c = best_call(system, call, kernel) if best else nccl_call(system, call)
        out.append(ProgramTask(op.name if len(out) == 0 else f"{op.name} ({i + 1})", (op.name,),
                        ("comm",), c.time_s, "comm", c.label, sms=c.sms))
        if op.kind == "all-gather-object":
            # torch reads the largest length (one read), then each rank's length and pickle
            # (two reads per rank) on the host
            reads = 1 if i == 0 else 2 * call.world
            out.append(ProgramTask(f"{op.name} (host reads {i + 1})", (op.name,), ("comm",), 0.0,
                            "host", "host reads", launches=0, host_reads=reads))
    return out


def _op_tasks(system: System, program: ProgramSpec, op: Op, best: bool) -> list[ProgramTask]:
    if op.kind == "host-sync":
        return [ProgramTask(op.name, (op.name,), ("compute",), 0.0, "host", "host read",
                     launches=0, host_reads=op.param("count", 1))]
    if op.is_comm:
        return _comm_tasks(system, program, op, best)
    return [_compute_task(system, op, 1 if best else op.param("kernels", 1))]


def _notes(program: ProgramSpec) -> tuple[str, ...]:
    kinds = {op.dtype for op in program.ops if op.kind in GEMM_KINDS}
    if "fp64" in kinds:
        return ("FP64 GEMMs taken at the FP32 rate: the system files have no FP64 figure",)
    return ()


def baseline_plan(system: System, program: ProgramSpec) -> ProgramPlan:
    groups = [[op.name] for op in program.ops]
    return plan_tasks(system, program, groups, {}, best=False, one_lane=True)


def alone_plan(system: System, program: ProgramSpec) -> ProgramPlan:
    """pksim's best without a rewrite: every op alone (a memory-bound op as one kernel, each
    communication op at the faster of pk's best schedule and NCCL's pick) on two lanes."""
    groups = [[op.name] for op in program.ops]
    return plan_tasks(system, program, groups, {}, best=True, one_lane=False)


# ---- pksim's best: which ops run together, and the rewrites that merge them ---------------------
class Groups:
    """Which ops run together, in which order, and the check that keeps the merged graph
    acyclic."""

    def __init__(self, program: ProgramSpec):
        self.program = program
        self.of = {op.name: i for i, op in enumerate(program.ops)}
        self.members: dict[int, list[str]] = {i: [op.name] for i, op in enumerate(program.ops)}
        self.fused: dict[int, ProgramTask] = {}
        self.issue = self.order()

    def ordered(self) -> list[list[str]]:
        """The groups' ops (each in program order), in issue order."""
        return [sorted(self.members[g], key=self.program.op_index.get) for g in self.issue]

    def copy(self) -> Groups:
        new = object.__new__(Groups)
        new.program, new.issue = self.program, self.issue
        new.of, new.fused = dict(self.of), dict(self.fused)
        new.members = dict(self.members)       # lists shared until a merge changes one
        return new

    def free(self, *names: str) -> bool:
        return all(len(self.members[self.of[n]]) == 1 for n in names)

    def merge(self, names: list[str], task: ProgramTask) -> None:
        """Run the free ops ``names`` as ``task`` (``acyclic`` then says if that may be)."""
        gid = self.of[names[0]]
        self.members[gid] = list(self.members[gid])
        for n in names[1:]:
            for m in self.members.pop(self.of[n]):
                self.of[m] = gid
                self.members[gid].append(m)
        self.fused[gid] = task

    def acyclic(self) -> bool:
        """Whether the merged graph has no dependency cycle through other ops; sets the
        issue order."""
        self.issue = self.order()
        return len(self.issue) == len(self.members)

    def edges(self, within: list[int] | None = None) -> dict[int, set[int]]:
        """Each group's dependencies (among ``within``, all groups if None)."""
        ids = list(self.members) if within is None else within
        out: dict[int, set[int]] = {g: set() for g in ids}
        for g in ids:
            for m in self.members[g]:
                out[g].update(self.of[d] for d in self.program.op(m).deps
                              if self.of[d] != g and self.of[d] in out)
        return out

    def order(self, within: list[int] | None = None) -> list[int]:
        """Groups (``within``, all if None) in issue order: dependencies first, then the
        earliest first op (Kahn's algorithm over the merged graph; a cycle leaves groups
        out)."""
        deps = self.edges(within)
        first = {g: min(self.program.op_index[m] for m in self.members[g]) for g in deps}
        waiting = {g: len(d) for g, d in deps.items()}
        users: dict[int, list[int]] = {g: [] for g in deps}
        for g, d in deps.items():
            for x in d:
                users[x].append(g)
        ready = [(first[g], g) for g, w in waiting.items() if w == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            _, g = heapq.heappop(ready)
            out.append(g)
            for u in users[g]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (first[u], u))
        return out


Merge = tuple[list[str], ProgramTask]              # ops that run together, as one task
Rewrite = Callable[[Groups], list[Merge]]   # its merges, of the ops still free in the groups


def rewrites(system: System, program: ProgramSpec) -> list[Rewrite]:
    """Every rewrite that applies to the program as written, in a fixed order: GEMM +
    collective fusions, folds, runs of collectives (pksim_core.programs.best chooses among them)."""
    readers = _readers(program)
    return (_gemm_fusions(system, program, readers) + _folds(system, program, readers)
            + _coalesced(system, program))


def _readers(program: ProgramSpec) -> dict[tuple[str, str], list[str]]:
    """(writer op, tensor) -> the ops that read what it wrote, in order (a view's readers
    and writers are its base tensor's)."""
    out: dict[tuple[str, str], list[str]] = {}
    last: dict[str, str] = {}
    for op in program.ops:
        for t in dict.fromkeys(program.base(x) for x in op.reads):
            if t in last:
                out.setdefault((last[t], t), []).append(op.name)
        for t in op.writes:
            last[program.base(t)] = op.name
    return out


def _writer(program: ProgramSpec, op: Op, tensor: str) -> Op | None:
    base = program.base(tensor)
    for name in reversed(op.deps):           # the last writer before ``op``
        dep = program.op(name)
        if base in {program.base(t) for t in dep.writes}:
            return dep
    return None


def _gemm_fusions(system: System, program: ProgramSpec, readers) -> list[Rewrite]:
    """GEMM + collective as pksim's fused op. A convolution of one group runs as its implicit
    GEMM (rows: output positions, columns: output channels, K: input channels x kernel), so
    its output feeds a collective as that GEMM's would."""
    made: list[Rewrite] = []
    for op in program.ops:
        if op.kind not in ("gemm", "conv") or len(op.gemm_shapes) != 1 \
                or op.dtype not in FUSABLE_DTYPES:
            continue
        m, n, k = op.gemm_shapes[0]
        out = op.writes[0]
        after = [program.op(r) for r in readers.get((op.name, program.base(out)), [])]
        pairs = []
        if len(after) == 1 and after[0].reads[0] == out and after[0].param("reduce") == "sum" \
                and not program.tensors[out].view_of:
            fused = {"reduce-scatter": "gemm-rs", "all-reduce": "gemm-ar"}.get(after[0].kind)
            if fused:
                pairs.append((fused, op, after[0], m))
        ag = _writer(program, op, op.param("a")) if op.kind == "gemm" else None
        if ag is not None and ag.kind == "all-gather" and not op.param("transpose_a") \
                and ag.writes[0] == op.param("a") and not program.tensors[op.param("a")].view_of \
                and readers.get((ag.name, op.param("a"))) == [op.name]:
            pairs.append(("ag-gemm", ag, op, m))
        for fused_op, first, second, rows in pairs:
            coll = first if first.is_comm else second
            world = program.groups[coll.group].size
            if world < 2 or rows < world:
                continue
            try:
                # overlapped schedules only: "none" (the library GEMM, then NCCL) is two
                # kernels, the two ops alone, which the plan without this rewrite runs
                cands = fused_space(system, fused_op, {"m": rows, "n": n, "k": k}, world=world,
                                    dtype=op.dtype, overlaps=("inter-sm", "intra-sm"))
                best = search(system, cands, top=1).ranked[0]
            except (InfeasibleError, ConfigError):
                continue
            names = [first.name, second.name]
            task = ProgramTask("+".join(names), tuple(names), ("compute", "comm"), best.time_s,
                        "fused", f"{fused_op} {best.schedule.label()}")
            made.append(_while_free((names, task)))
    return made


def _while_free(merge: Merge) -> Rewrite:
    """A rewrite of one merge, made while its ops are all free."""
    return lambda groups: [merge] if groups.free(*merge[0]) else []


def _folds(system: System, program: ProgramSpec, readers) -> list[Rewrite]:
    """The memory-bound ops a collective alone reads from (a prologue) or that alone read its
    output (an epilogue), run in pk's best kernel for the collective: those still free."""
    def make(groups: Groups, c: Op, pk) -> list[Merge]:
        if not groups.free(c.name):
            return []
        parts = []
        pro = _writer(program, c, c.reads[0])
        if pro is not None and pro.is_memory and pro.writes == c.reads[:1] and \
                readers.get((pro.name, program.base(c.reads[0]))) == [c.name] and \
                groups.free(pro.name):
            parts.append((pro, program.tensors[c.reads[0]].nbytes))
        after = readers.get((c.name, program.base(c.writes[0])), [])
        if len(after) == 1 and program.op(after[0]).is_memory and groups.free(after[0]):
            parts.append((program.op(after[0]), program.tensors[c.writes[0]].nbytes))
        if not parts:
            return []
        fused_s = pk.time_s + sum(memory_s(system, max(0.0, e.nbytes - shared), e.vector_flops)
                                  for e, shared in parts)
        names = sorted([c.name] + [e.name for e, _ in parts], key=program.op_index.get)
        label = pk.label + "".join(
            f" + {'prologue' if e.name in c.deps else 'epilogue'} {e.kind}" for e, _ in parts)
        return [(names, ProgramTask("+".join(names), tuple(names), ("compute", "comm"), fused_s,
                             "fused", label, sms=pk.sms))]

    out: list[Rewrite] = []
    for c in program.ops:
        if c.kind not in COLLECTIVE_KINDS or c.kind == "all-gather-object":
            continue
        pk = pk_call(system, kernel_call(program, c) or calls(program, c)[0])
        if pk is not None:
            out.append(lambda groups, c=c, pk=pk: make(groups, c, pk))
    return out


def _coalesced(system: System, program: ProgramSpec) -> list[Rewrite]:
    """Runs of consecutive independent collectives of one signature, each run as one call;
    only whole, while none of its calls is taken by another rewrite (a part of a run would
    need its own search of pk's schedules at its summed size, for each part: D61)."""
    def signature(op: Op | None):
        if op is None or op.kind not in COALESCE:
            return None
        return (op.kind, op.group, op.param("reduce"), op.param("root", 0),
                SCHEDULE_DTYPE[DTYPE_BYTES[op.dtype]], calls(program, op)[0].in_switch)

    out: list[Rewrite] = []
    bucket: list[Op] = []
    for op in [o for o in program.ops if o.is_comm] + [None]:
        sig = signature(op)
        if bucket and sig == signature(bucket[0]) and all(
                not _depends(program, op, m) for m in bucket):
            bucket.append(op)
            continue
        if len(bucket) > 1:
            out.append(_while_free(_coalesce(system, program, bucket)))
        bucket = [op] if sig is not None else []
    return out


def _coalesce(system: System, program: ProgramSpec, run: list[Op]) -> Merge:
    first = calls(program, run[0])[0]
    call = Call(first.op, sum(c.nbytes for op in run for c in calls(program, op)), first.world,
                first.dtype, first.root, first.in_switch)
    choice = best_call(system, call)
    names = [op.name for op in run]
    return names, ProgramTask("+".join(names), tuple(names), ("comm",), choice.time_s, "comm",
                       f"{choice.label} ({len(names)} calls in one)", sms=choice.sms)


def _depends(program: ProgramSpec, later: Op, earlier: Op) -> bool:
    """Whether ``later`` depends on ``earlier``, directly or through other ops (a walk back
    over the dependencies that stops at ops issued before ``earlier``)."""
    stop = program.op_index[earlier.name]
    seen: set[str] = set()
    todo = list(later.deps)
    while todo:
        name = todo.pop()
        if name == earlier.name:
            return True
        if name in seen or program.op_index[name] < stop:
            continue
        seen.add(name)
        todo.extend(program.op(name).deps)
    return False


# ---- tasks -------------------------------------------------------------------------------------
def plan_tasks(system: System, program: ProgramSpec, groups: list[list[str]],
               fused: dict[tuple[str, ...], ProgramTask], best: bool, one_lane: bool,
               alone: dict[str, list[ProgramTask]] | None = None, part: bool = False) -> ProgramPlan:
    """The tasks of ``groups`` in issue order; ``fused``: the task of each merged group (its
    ops in program order); ``alone``: each op's tasks alone, filled as made (pksim's best
    makes its plan many times); ``part``: the groups are a part of the program, and the ops
    they depend on outside it ran before it."""
    tasks: list[ProgramTask] = []
    task_of: dict[str, int] = {}
    for members in groups:
        key = tuple(members)
        if key in fused:
            made = [fused[key]]
        elif alone is not None and key[0] in alone:
            made = alone[key[0]]
        else:
            made = _op_tasks(system, program, program.op(key[0]), best)
            if alone is not None:
                alone[key[0]] = made
        deps = sorted({task_of[d] for m in members for d in program.op(m).deps
                       if d not in members and (not part or d in task_of)})
        for i, task in enumerate(made):
            lanes = task.lanes if not one_lane else (
                # the baseline's asynchronous calls (and the host reads of the objects they
                # gather) run on NCCL's own stream
                ("nccl",) if program.op(members[0]).param("async") and task.kind in ("comm",
                                                                                    "host")
                else ("stream",))
            mine = tuple(deps) if i == 0 else (len(tasks) - 1,)
            tasks.append(ProgramTask(task.name, task.ops, lanes, task.duration_s, task.kind, task.label,
                              task.launches, task.host_reads, task.sms, mine))
        for m in members:
            task_of[m] = len(tasks) - 1
    return ProgramPlan(tuple(tasks), task_of, _notes(program))
