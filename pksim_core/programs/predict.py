"""``predict_program``: a program on a system, three ways: the baseline as PyTorch + NCCL run it,
pksim's best, and the communication-aware roofline; with the share of the roofline each
reaches, the speed-up, a per-op breakdown and both timelines.

Two times for each run: one call from an idle host and GPU (``time_s``), and ParallelKernelBench's
metric, one iteration of many run back to back (``steady_s``): the host issues the next call
while the GPU still runs this one, unless a host read makes it wait. It is the timeline of two
calls in a row, the second's tasks issued after the first's on the same lanes, less that of
one. Programs model one rank (the one a program names), so the slowest rank is that rank."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from hwmodels.catalog import load_system
from hwmodels.system import System
from pksim_core.programs.model import ProgramSpec
from pksim_core.programs.best import best_plan
from pksim_core.programs.plan import ProgramPlan, baseline_plan
from pksim_core.programs.roofline import Roofline, roofline
from pksim_core.programs.timeline import Span, ProgramTask, run_tasks


@dataclass(frozen=True)
class OpRow:
    """One op of the program: what it is, and where each run put it."""
    name: str
    kind: str
    group_size: int | None
    comm_bytes: int | None
    flops: float | None
    baseline_label: str
    baseline_start_s: float
    baseline_end_s: float
    best_task: str
    best_label: str
    best_start_s: float
    best_end_s: float
    roofline_s: float
    roofline_resource: str


@dataclass(frozen=True)
class Run:
    """One way of running the program: its time and each task's span."""
    time_s: float
    tasks: tuple[dict[str, Any], ...]      # name, ops, kind, label, lanes, issued/start/end
    steady_s: float = 0.0                  # one of many back-to-back calls (see the module)


@dataclass(frozen=True)
class ProgramPrediction:
    program: str
    system: str
    world: int
    covers: tuple[int, ...]
    baseline: Run
    best: Run
    roofline_s: float
    roofline_resource: str
    roofline_terms: dict[str, float]
    ops: tuple[OpRow, ...]
    notes: tuple[str, ...] = ()

    @property
    def baseline_s(self) -> float:
        return self.baseline.time_s

    @property
    def best_s(self) -> float:
        return self.best.time_s

    @property
    def baseline_pct(self) -> float:
        return 100.0 * self.roofline_s / self.baseline_s if self.baseline_s else 0.0

    @property
    def best_pct(self) -> float:
        return 100.0 * self.roofline_s / self.best_s if self.best_s else 0.0

    @property
    def speedup(self) -> float:
        return self.baseline_s / self.best_s if self.best_s else 0.0

    @property
    def steady_speedup(self) -> float:
        """The speed-up by ParallelKernelBench's metric (back-to-back calls)."""
        return self.baseline.steady_s / self.best.steady_s if self.best.steady_s else 0.0

    def summary(self) -> dict[str, Any]:
        """The row of a report table (seconds, percent)."""
        return {"program": self.program, "system": self.system, "covers": list(self.covers),
                "baseline_s": self.baseline_s, "best_s": self.best_s,
                "roofline_s": self.roofline_s, "roofline_resource": self.roofline_resource,
                "baseline_pct_of_roofline": self.baseline_pct,
                "best_pct_of_roofline": self.best_pct, "speedup": self.speedup}

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        out = self.summary()
        out.update(baseline_steady_s=self.baseline.steady_s, best_steady_s=self.best.steady_s,
                   steady_speedup=self.steady_speedup)
        out.update(world=self.world, roofline_terms_s=dict(self.roofline_terms),
                   ops=[asdict(row) for row in self.ops], notes=list(self.notes))
        if timeline:
            out["baseline_tasks"] = list(self.baseline.tasks)
            out["best_tasks"] = list(self.best.tasks)
        return out


def steady_time(system: System, tasks: list[ProgramTask], one_s: float) -> float:
    """One call's share of calls run back to back: two calls' timeline less one's
    (``one_s``), the second call's tasks issued after the first's, on the same lanes."""
    n = len(tasks)
    twice = list(tasks) + [replace(t, deps=tuple(d + n for d in t.deps)) for t in tasks]
    return max((s.end_s for s in run_tasks(system, twice)), default=0.0) - one_s


def _run(plan: ProgramPlan, spans: list[Span], system: System | None = None) -> Run:
    rows = []
    for span in spans:
        task = plan.tasks[span.task]
        rows.append({"name": task.name, "ops": list(task.ops), "kind": task.kind,
                     "label": task.label, "lanes": list(task.lanes), "launches": task.launches,
                     "host_reads": task.host_reads, "issued_s": span.issued_s,
                     "start_s": span.start_s, "end_s": span.end_s})
    one = max((s.end_s for s in spans), default=0.0)
    steady = steady_time(system, list(plan.tasks), one) if system is not None else 0.0
    return Run(one, tuple(rows), steady)


def predict_baseline(system: System, program: ProgramSpec) -> tuple[ProgramPlan, Run]:
    """The baseline alone (its plan and run), as ``predict_program`` makes it: a what-if
    study's ``nccl`` row of a program (pksim_core.runner)."""
    plan = baseline_plan(system, program)
    return plan, _run(plan, run_tasks(system, list(plan.tasks)), system)


def predict_program(system: System | str, program: ProgramSpec) -> ProgramPrediction:
    if isinstance(system, str):
        system = load_system(system)
    base_plan, base_run = predict_baseline(system, program)
    best, spans = best_plan(system, program)
    best_run = _run(best, spans, system)
    if best_run.time_s > base_run.time_s:
        # pksim's best is the fastest plan it considers, the baseline's among them (D61)
        best, best_run = base_plan, base_run
    roof = roofline(system, program)
    rows = _rows(program, base_plan, base_run, best, best_run, roof)
    return ProgramPrediction(program.name, system.name, program.world, program.covers,
                             base_run, best_run, roof.time_s, roof.resource, roof.terms, rows,
                             best.notes + program.notes)


def _rows(program: ProgramSpec, base_plan: ProgramPlan, base: Run, best_plan_: ProgramPlan, best: Run,
          roof: Roofline) -> tuple[OpRow, ...]:
    base_span = {t["name"]: t for t in base.tasks}
    best_span = {t["name"]: t for t in best.tasks}
    first_base: dict[str, dict] = {}
    first_best: dict[str, dict] = {}
    for run, first in ((base, first_base), (best, first_best)):
        for t in run.tasks:
            for name in t["ops"]:
                first.setdefault(name, t)
    rows = []
    for op in program.ops:
        b = base_plan.tasks[base_plan.task_of[op.name]]
        p = best_plan_.tasks[best_plan_.task_of[op.name]]
        rows.append(OpRow(
            name=op.name, kind=op.kind,
            group_size=program.groups[op.group].size if op.is_comm else None,
            comm_bytes=op.comm_bytes if op.is_comm else None, flops=op.flops or None,
            baseline_label=b.label, baseline_start_s=first_base[op.name]["start_s"],
            baseline_end_s=base_span[b.name]["end_s"], best_task=p.name, best_label=p.label,
            best_start_s=first_best[op.name]["start_s"],
            best_end_s=best_span[p.name]["end_s"], roofline_s=roof.per_op[op.name][0],
            roofline_resource=roof.per_op[op.name][1]))
    return tuple(rows)
