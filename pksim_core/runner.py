"""Running studies and sweeps: one function for the best prediction of a workload,
tasks, and the executor that runs them (inline, a process pool, or a Dask cluster).

``best_prediction(system, case, impl)`` is the only place that knows which ops the
simulator models: collectives (the searched best for ``pk``, NCCL's own choice for
``nccl``) and fused compute + communication ops (the best overlap strategy for ``pk``;
cuBLAS + NCCL one after the other for ``nccl``). Any other op raises
``NotSupportedYet``, which becomes a row saying so. A program (``Case.is_program``) is not
an op: ``program_fill`` gives its ``nccl`` row (the baseline as PyTorch + NCCL run it) and its
``pk`` row (pksim's best), each with the program's roofline, as ``pksim predict --program``.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import gc
import json
import math
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, InfeasibleError, PksimError
from hwmodels.system import System
from pksim_core.inputs import (check_bytes, check_comm_sms, check_dtype, check_operands, check_root,
                          check_world, even_bytes)
from pksim_core.programs.model import ROOTED
from pksim_core.kernel_contract import emittable_fields
from pksim_core.prediction import Prediction
from pksim_core.programs.costs import TENSOR_RATE
from pksim_core.programs.load import load_program
from pksim_core.programs.model import ProgramSpec
from pksim_core.programs.predict import Run, predict_baseline, predict_program
from pksim_core.programs.roofline import roofline
from pksim_core.provenance import binding_figure, provenance_of
from pksim_core.safe_files import check_identity, journal_path, read_journal
from pksim_core.schedule import Schedule
from pksim_core.nccl import nccl_schedule
from pksim_core.search import fused_space, lower_bound, search, space
from pksim_core.simulate import predict
from pksim_core.study import PLANNED_OPS, Case, SystemVariant
from pksim_core.study_programs import ProgramEntry, check_fits
from pksim_core.vocabulary import read, renamed
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.workloads.fused_ops import FUSED_OPS, check_shape


class NotSupportedYet(PksimError):
    """The op is part of the study format but not of the simulator yet."""


# ---- the one function ------------------------------------------------------------------
def best_prediction(system: System, case: Case, impl: str = "pk",
                    record: bool = False, nvls: bool = True) -> Prediction:
    """The best prediction for ``case`` on ``system``: for ``pk`` the fastest schedule
    of the searched space (narrowed by ``case.search``), for ``nccl`` the baseline
    (NCCL's own choice; for fused ops the library kernel, then NCCL); ``nvls``: False is
    NCCL as NCCL_NVLS_ENABLE=0 leaves it (its collectives' pick without NVLS and NVLSTree)."""
    narrow = dict(case.search)
    if case.op in COLLECTIVES:
        if impl == "nccl":
            schedule = nccl_schedule(system, case.op, case.nbytes, case.world, case.domains,
                                     nvls=nvls)
            return predict(system, schedule.with_(root=case.root), record=record)
        narrow.pop("overlaps", None)
        candidates = [c.with_(root=case.root) for c in
                      space(system, case.op, case.nbytes, case.world, case.domains, **narrow)]
        best = best_of(system, candidates)
        return predict(system, best.schedule, record=True) if record else best
    if case.op in FUSED_OPS:
        if impl == "nccl":
            narrow = {"overlaps": ("none",)}
        candidates = fused_space(system, case.op, dict(case.shape), case.world, case.domains,
                                 case.dtype, skew=case.skew, **narrow)
        return best_of(system, candidates)
    what = PLANNED_OPS.get(case.op, case.op)
    raise NotSupportedYet(f"{case.op} ({what}) is not supported yet: the simulator models "
                          f"{', '.join(COLLECTIVES + FUSED_OPS)}")


def best_of(system: System, candidates: list[Schedule], cold: bool = False) -> Prediction:
    """The fastest candidate: ``pksim_core.search.search(..., top=1).ranked[0]``, a branch
    and bound that simulates only candidates whose lower bound could still win (the
    answer is the full search's, with its tie-break: time, comm SMs, label); ``cold``:
    the collectives' inputs from HBM (``pksim_core.collective_model.build``)."""
    return search(system, candidates, top=1, cold=cold).ranked[0]


# ---- tasks and rows ----------------------------------------------------------------------
@dataclass(frozen=True)
class RunTask:
    variant: SystemVariant
    case: Case
    impl: str
    nvls: str = "on"                 # NCCL_NVLS_ENABLE for an nccl collective: on | off


@dataclass
class TaskOutcome:
    """One task's outcome: a prediction, or the reason there is none."""
    system: str
    variant: str
    case: Case
    impl: str
    status: str                      # ok | not supported yet | infeasible | error
    message: str = ""
    time_s: float = math.nan
    schedule: str = ""
    schedule_dict: dict | None = None
    bound_s: float = math.nan
    bound_resource: str = ""
    alpha_beta_s: float = math.nan
    nbytes: int = 0
    algbw_GBps: float = math.nan
    busbw_GBps: float = math.nan
    link_util: float = math.nan
    breakdown: dict[str, float] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()
    baseline_s: float = math.nan
    baseline_schedule: str = ""
    speedup: float = math.nan        # baseline time / this time
    gain: float = math.nan           # unchanged system's time / this time (what-if)
    system_ref: str = ""
    overrides: tuple[str, ...] = ()
    seconds: float = 0.0             # wall time of the task
    binding_figure: str = ""         # the system figure behind bound_resource
    binding_provenance: str = ""     # its provenance tag (datasheet, estimate, ...)
    emittable: bool | None = None    # whether pksim codegen can emit the schedule
    not_emittable: str = ""          # why not (pksim_core.kernel_contract.emit_reason)
    roofline_s: float = math.nan     # a program's roofline (also its bound_s)
    roofline_terms: dict[str, float] = field(default_factory=dict)
    nccl_nvls: str = "on"            # NCCL_NVLS_ENABLE the run asked of NCCL's collectives

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def key(self) -> tuple:
        return (self.system_ref, self.variant, self.case)

    def to_dict(self) -> dict[str, Any]:
        c = self.case
        out = {"system": self.system, "variant": self.variant, "workload": c.workload,
               "op": c.op, "shape": dict(c.shape), "dtype": c.dtype, "world": c.world,
               "domains": c.domains, "impl": self.impl, "status": self.status,
               "message": self.message}
        for name in ("time_s", "schedule", "bound_s", "bound_resource", "alpha_beta_s",
                     "nbytes", "algbw_GBps", "busbw_GBps", "link_util", "breakdown",
                     "baseline_s", "baseline_schedule", "speedup", "gain", "seconds",
                     "binding_figure", "binding_provenance", "emittable"):
            value = getattr(self, name)
            out[name] = None if isinstance(value, float) and math.isnan(value) else value
        out["assumed"] = list(self.assumed)
        out["schedule_json"] = self.schedule_dict
        out["not_emittable"] = self.not_emittable or None
        out["nccl_nvls"] = self.nccl_nvls
        if c.is_program:          # op rows keep their keys: studies without programs unchanged
            out.update(program_fields(self))
        return renamed(out, ROW_RENAMED)


# A row's keys renamed in this release (the old names stay as aliases: docs/outputs.md);
# ``schedule_json`` (the schedule itself) becomes ``schedule`` when the alias goes.
ROW_RENAMED = ("schedule", "nbytes", "breakdown", "baseline_schedule", "seconds")


@functools.lru_cache(maxsize=64)
def _system(ref: str, overrides: tuple[str, ...]) -> System:
    return load_system(ref, overrides)


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for one task. A search allocates millions of
    short-lived objects beside a large live heap (the flow caches), so the collector's
    passes cost up to half the time while finding almost no cycles (about a hundred
    objects per task, measured); it runs again between tasks."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_task(task: RunTask) -> TaskOutcome:
    """Run one task; tool errors become a row (status and message), never an exception."""
    start = time.perf_counter()
    system = _system(task.variant.ref, task.variant.overrides)
    row = TaskOutcome(system.name, task.variant.label, task.case, task.impl, "ok",
              system_ref=task.variant.ref, overrides=task.variant.overrides,
              nccl_nvls=task.nvls)
    try:
        with _no_gc():
            if task.case.is_program:
                program_fill(row, system, task.case, task.impl)
            else:
                _op_fill(row, system, best_prediction(system, task.case, task.impl,
                                                      nvls=task.nvls != "off"))
    except NotSupportedYet as exc:
        row.status, row.message = "not supported yet", str(exc)
    except InfeasibleError as exc:
        row.status, row.message = "infeasible", str(exc)
    except PksimError as exc:
        row.status, row.message = "error", str(exc)
    row.seconds = time.perf_counter() - start
    return row


def _op_fill(row: TaskOutcome, system: System, p: Prediction) -> None:
    """An op's row from its best prediction, with what it rests on and whether codegen can
    emit its schedule."""
    fill(row, p)
    row.binding_figure = binding_figure(system, p.bound_resource, p.schedule.mechanism,
                                        p.schedule.dtype)
    row.binding_provenance = provenance_of(system, row.binding_figure)
    emit = emittable_fields(system, p.schedule)
    row.emittable, row.not_emittable = emit["emittable"], emit["not_emittable"] or ""


# ---- programs ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _program(ref: str) -> ProgramSpec:
    return load_program(ref)


def _describe(who: str, run: Run) -> str:
    """A program run in a few words: 'pksim (31 launches, 3 fused)'."""
    launches = sum(t["launches"] for t in run.tasks)
    fused = sum(len(t["ops"]) > 1 for t in run.tasks)
    plural = "" if launches == 1 else "es"
    return f"{who} ({launches} launch{plural}" + (f", {fused} fused)" if fused else ")")


def program_fill(row: TaskOutcome, system: System, case: Case, impl: str) -> TaskOutcome:
    """A program's row: ``nccl`` the baseline as PyTorch + NCCL run it, ``pk`` pksim's best
    (with the baseline beside it, so a study of ``impls = ["pk"]`` has its speed-up too);
    both with the roofline as their bound. The same functions as ``pksim predict --program``
    (pksim_core.programs.predict), so the times are that command's exactly."""
    program = _program(case.program)
    if impl == "nccl":
        _, run = predict_baseline(system, program)
        roof = roofline(system, program)
        row.time_s, row.schedule = run.time_s, _describe("PyTorch + NCCL", run)
        row.roofline_s, row.bound_resource, terms = roof.time_s, roof.resource, roof.terms
    else:
        p = predict_program(system, program)
        row.time_s, row.schedule = p.best_s, _describe("pksim", p.best)
        row.baseline_s, row.baseline_schedule = p.baseline_s, _describe("PyTorch + NCCL",
                                                                        p.baseline)
        row.speedup = p.speedup
        row.roofline_s, row.bound_resource, terms = (p.roofline_s, p.roofline_resource,
                                                     p.roofline_terms)
    row.bound_s, row.roofline_terms = row.roofline_s, dict(terms)
    row.nbytes = program.summary()["comm_bytes"]
    row.binding_figure = binding_figure(system, row.bound_resource,
                                        dtype=TENSOR_RATE.get(program.dtype, "fp32"))
    row.binding_provenance = provenance_of(system, row.binding_figure)
    return row


def roofline_pct(roof: float, time_s: float) -> float | None:
    """The share of the roofline a time reaches, in percent (None where either is missing)."""
    return 100.0 * roof / time_s if time_s > 0 and not math.isnan(roof + time_s) else None


def program_fields(row: TaskOutcome) -> dict[str, Any]:
    """What a program row adds to results.json / .csv: the program, its roofline and the
    share of it the row's time (and, on a ``pk`` row, the baseline's) reaches, in percent."""
    return {"program": row.case.program,
            "roofline_s": None if math.isnan(row.roofline_s) else row.roofline_s,
            "roofline_terms_s": dict(row.roofline_terms),
            "pct_of_roofline": roofline_pct(row.roofline_s, row.time_s),
            "baseline_pct_of_roofline": roofline_pct(row.roofline_s, row.baseline_s)}


def fill(row: TaskOutcome, p: Prediction) -> TaskOutcome:
    row.time_s, row.schedule, row.schedule_dict = p.time_s, p.schedule.label(), p.schedule.to_dict()
    row.bound_s, row.bound_resource, row.alpha_beta_s = p.bound_s, p.bound_resource, p.alpha_beta_s
    row.nbytes, row.algbw_GBps, row.busbw_GBps = p.nbytes, p.algbw_GBps, p.busbw_GBps
    row.link_util, row.breakdown, row.assumed = p.link_util, dict(p.breakdown), p.depends_on_assumed
    return row


def attach_baselines(rows: list[TaskOutcome], baseline: str = "nccl") -> list[TaskOutcome]:
    """Speed-up over the baseline impl, and gain over the unchanged system (what-if)."""
    index = {(r.key(), r.impl): r for r in rows}
    for r in rows:
        if not r.ok:
            continue
        base = index.get((r.key(), baseline))
        if base is not None and base.ok and r.impl != baseline:
            r.baseline_s, r.baseline_schedule = base.time_s, base.schedule
            r.speedup = base.time_s / r.time_s if r.time_s > 0 else math.nan
        plain = index.get(((r.system_ref, "base", r.case), r.impl))
        if plain is not None and plain.ok and r.time_s > 0:
            r.gain = plain.time_s / r.time_s
    return rows


# ---- execution -----------------------------------------------------------------------------
def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def executor(workers: int = 1, scheduler: str | None = None) -> Iterator[cf.Executor | None]:
    """None (run inline), a process pool of ``workers``, or a Dask cluster's executor."""
    if scheduler:
        try:
            from dask.distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs dask.distributed (pip install 'pksim[dask]')"
                              ) from None
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
        try:
            yield client.get_executor(pure=False)
        finally:
            client.close()
        return
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if workers == 1:
        yield None
        return
    pool = cf.ProcessPoolExecutor(workers, initializer=_ignore_sigint)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop(pool: cf.Executor) -> None:
    """After an interrupt: drop queued tasks and end the pool's own worker processes."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.terminate()


@dataclass
class RunResult:
    rows: list[TaskOutcome]
    total: int
    interrupted: bool
    wall_s: float


def run_tasks(tasks: list[RunTask], workers: int = 1, scheduler: str | None = None,
              on_done: Callable[[TaskOutcome], None] | None = None) -> RunResult:
    """Run every task, largest first; Ctrl-C keeps the rows that finished."""
    start = time.perf_counter()
    order = sorted(tasks, key=lambda t: (-t.case.world, t.impl != "pk"))
    rows: list[TaskOutcome] = []
    interrupted = False

    def done(row: TaskOutcome) -> None:
        rows.append(row)
        if on_done:
            on_done(row)

    workers = min(workers, max(1, len(order)))
    with executor(workers, scheduler) as pool:
        try:
            if pool is None:
                for task in order:
                    done(run_task(task))
            else:
                futures = [pool.submit(run_task, t) for t in order]
                for fut in cf.as_completed(futures):
                    done(fut.result())
        except KeyboardInterrupt:
            interrupted = True
            if pool is not None:
                _stop(pool)
    return RunResult(rows, len(tasks), interrupted, time.perf_counter() - start)


def check_case(system: System, case: Case, where: str = "",
               option: Callable[[str], str] = lambda key: key) -> None:
    """A case no run can have is a ConfigError before any work (``where``: e.g. the study
    file and workload; ``option(key)`` names a shape key): a collective's size in whole
    elements and within the GPU's memory, a fused op's shape (one the world cannot split
    stays a row that says so)."""
    try:
        check_world(system, case.world, case.domains, "world")
        check_dtype(system, case.dtype, "dtype")
        if case.root and case.op not in ROOTED:
            raise ConfigError(f"root {case.root}: {case.op} has no root (rooted ops: "
                              f"{', '.join(ROOTED)})")
        if case.op in ROOTED:
            check_root(case.root, case.world, "root")
        for sms in dict(case.search).get("comm_sms", ()):
            check_comm_sms(system, sms, case.world, case.domains, "search.comm_sms")
        if case.op in COLLECTIVES:
            check_bytes(system, case.op, case.given_bytes, case.dtype, case.world,
                        option("bytes"))
            even_bytes(case.op, case.given_bytes, case.dtype, case.world, option("bytes"))
            _check_search_leaves_some(system, case)
        elif case.op in FUSED_OPS:
            try:
                check_shape(case.op, dict(case.shape), case.world, option)
            except InfeasibleError:
                pass
            check_operands(system, case.op, dict(case.shape), case.dtype, case.world)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None


def _check_search_leaves_some(system: System, case: Case) -> None:
    """A collective's ``search`` table that leaves no candidate (``algorithms = ["ring"]``
    with ``mechanisms = ["multimem"]``) is an error saying why, not a row of every system."""
    narrow = {k: v for k, v in case.search if k != "overlaps"}
    if not narrow:
        return
    try:
        space(system, case.op, case.nbytes, case.world, case.domains, **narrow)
    except InfeasibleError as exc:
        raise ConfigError(f"search {narrow}: {exc}") from None


def tasks_for(variants: list[tuple[SystemVariant, System]], workloads, impls,
              where: str = "study", programs: tuple[ProgramEntry, ...] = (), nvls: str = "on"
              ) -> tuple[list[RunTask], list[str]]:
    """Expand each workload on each system variant: the tasks, and what was skipped. A
    case the unchanged system cannot run at all is an error naming ``where``, the
    workload and the system (checked before any work); so is a program whose world a
    system variant cannot hold."""
    tasks, skipped = [], []
    for variant, system in variants:
        for entry in programs:
            check_fits(entry, system, where, variant.label)
        for workload in workloads:
            cases, notes = workload.expand(system, f"{where}: ")
            if variant.label == "base":
                skipped.extend(notes)
                for case in cases:
                    check_case(system, case, f"{where}: workload {workload.name!r} "
                                             f"({case.shape_text()} x{case.world}) on "
                                             f"{system.name}: ")
            tasks.extend(RunTask(variant, case, impl, nvls) for case in cases for impl in impls)
        tasks.extend(RunTask(variant, Case.of_program(entry), impl, nvls) for entry in programs
                     for impl in impls)
    return tasks, skipped


def _task_key(system_name: str, variant: str, workload: str, shape: dict, world: int,
              impl: str) -> tuple:
    return (system_name, variant, workload, tuple(sorted(shape.items())), world, impl)


def resume_from(path: Path, identity: dict[str, Any], records_key: str, tasks: list[RunTask],
                names: dict[RunTask, str]) -> tuple[list[TaskOutcome], list[RunTask]]:
    """``--resume`` of whatif and sweep: the rows an earlier run of the same command left
    in ``path`` (its results.json or sweep.json, ``records_key``: the list of its per-task
    records) and in its journal beside it (pksim_core.safe_files: the rows as they finished,
    which an interrupt before the results file was written leaves), and the tasks still to
    run. ``identity`` (command, study or op, systems, --set, ...) must equal the file's
    ``resume`` entry; a file written before files had one is matched on its study (or op)
    name alone. ``names``: each task's system name."""
    journal = read_journal(journal_path(path), identity)
    records = _results_records(path, identity, records_key, journal is not None)
    if records is None and journal is None:
        raise ConfigError(f"--resume: {path} does not exist (nothing to resume)")
    return resume_rows(tasks, names, (records or []) + (journal or []))


def _results_records(path: Path, identity: dict[str, Any], records_key: str,
                     journal: bool) -> list[dict] | None:
    """The per-task records of a results file (None if there is none; [] if it cannot be
    read but a ``journal`` holds the rows: an interrupt cut it, written by an older pksim)."""
    try:
        previous = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        if journal:
            return []
        raise ConfigError(f"--resume: cannot read {path} ({exc})") from None
    if not isinstance(previous, dict):
        raise ConfigError(f"--resume: {path} is not a file pksim wrote")
    recorded = previous.get("resume")
    if isinstance(recorded, dict):
        check_identity(path, recorded, identity)
    else:
        key = "study" if "study" in identity else "op"
        if previous.get(key) != identity.get(key):
            raise ConfigError(f"--resume: {path} is not a result of {key} "
                              f"{identity.get(key)!r}")
    records = previous.get(records_key)
    if not isinstance(records, list):
        raise ConfigError(f"--resume: {path} has no per-task results (written by an older "
                          f"pksim?): run it again without --resume")
    return records


def resume_rows(tasks: list[RunTask], names: dict[RunTask, str], records: list[dict]
                ) -> tuple[list[TaskOutcome], list[RunTask]]:
    """Split ``tasks`` into the rows an interrupted run already wrote (``records``, its
    results.json rows) and the tasks still to run. ``names``: each task's system name."""
    done = {_task_key(r["system"], r["variant"], r["workload"], r["shape"], r["world"],
                      r["impl"]): r for r in records}
    rows, todo = [], []
    for task in tasks:
        c = task.case
        record = done.get(_task_key(names[task], task.variant.label, c.workload,
                                    dict(c.shape), c.world, task.impl))
        if record is None:
            todo.append(task)
        else:
            rows.append(_row_from_record(task, names[task], record))
    return rows, todo


def _row_from_record(task: RunTask, system_name: str, record: dict) -> TaskOutcome:
    row = TaskOutcome(system_name, task.variant.label, task.case, task.impl, record["status"],
              record.get("message", ""), system_ref=task.variant.ref,
              overrides=task.variant.overrides, nccl_nvls=task.nvls)
    for name in ("time_s", "bound_s", "alpha_beta_s", "algbw_GBps", "busbw_GBps", "link_util"):
        value = record.get(name)
        setattr(row, name, math.nan if value is None else float(value))
    for name in ("bound_resource", "binding_figure", "binding_provenance", "not_emittable"):
        setattr(row, name, record.get(name) or "")
    # the keys' names as this release writes them, or as earlier ones did (pksim_core.vocabulary)
    row.schedule = read(record, "label") or ""
    row.emittable = record.get("emittable")
    row.nbytes = int(read(record, "size_bytes") or 0)
    row.seconds = float(read(record, "wall_s") or 0.0)
    row.breakdown = dict(read(record, "busy_s") or {})
    row.assumed = tuple(record.get("assumed") or ())
    row.schedule_dict = record.get("schedule_json")
    if task.case.is_program:       # what program_fill gave and attach_baselines does not
        for name in ("roofline_s", "baseline_s", "speedup"):
            value = record.get(name)
            setattr(row, name, math.nan if value is None else float(value))
        row.baseline_schedule = read(record, "baseline_label") or ""
        row.roofline_terms = dict(record.get("roofline_terms_s") or {})
    return row


def recorded(row: TaskOutcome) -> Prediction:
    """Re-run a finished row's schedule with the timeline recorded."""
    if not row.ok or row.schedule_dict is None:
        raise InfeasibleError(f"no prediction to record for {row.case.label()} on {row.system}")
    system = _system(row.system_ref, row.overrides)
    return predict(system, Schedule.from_dict(row.schedule_dict), record=True)


__all__ = ["best_prediction", "best_of", "lower_bound", "NotSupportedYet", "Task", "Row", "run_task",
           "check_case", "program_fill", "program_fields", "roofline_pct",
           "run_tasks", "tasks_for", "attach_baselines", "executor", "default_workers",
           "RunResult", "recorded", "resume_rows", "resume_from"]
