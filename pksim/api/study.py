"""``pksim.sweep`` and ``pksim.whatif``: a size (or shape) sweep and a study, the functions that
``pksim sweep`` and ``pksim whatif`` call. Each runs its tasks (inline, on ``workers``
processes or on a Dask cluster at ``scheduler``), and, given ``output``, writes the command's
files there (CSV, JSON, plots); the result's ``to_dict()`` is the command's ``--json``."""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from hwmodels.errors import ConfigError, PksimNote
from hwmodels.units import parse_bytes_range
from pksim_core import report
from pksim.api.options import check_kind, check_kinds, overrides_of
from pksim.api.predict import load_system
from pksim.api.rows import json_entry
from pksim_core.inputs import check_dtype, check_root, check_unique_systems, check_world
from pksim_core.plots import OutputDir
from pksim_core.safe_files import Journal, journal_path
from pksim_core.runner import (NotSupportedYet, TaskOutcome, RunResult, RunTask, attach_baselines, check_case,
                          default_workers, recorded, resume_from, run_tasks, tasks_for)
from pksim_core.schedule import IMPLS
from pksim_core.study import (Case, Study, SystemVariant, check_nvls, default_study, find_study,
                         load_variants, split_note)
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.workloads.fused_ops import SHAPE_KEYS


def _check_run_kinds(where: str, values: dict[str, Any]) -> None:
    """sweep's and whatif's keywords of a known kind (pksim.api.options.check_kind)."""
    kinds = {"system": "texts", "systems": "texts", "shape": "texts", "impl": "texts",
             "vary": "texts", "force": "flag", "resume": "flag", "plots": "flag",
             "workers": "whole", "scheduler": "text"}
    check_kinds(where, {k: v for k, v in values.items() if k not in kinds})
    for key, kind in kinds.items():
        if key in values:
            check_kind(where, key, values[key], kind, key in ("workers", "scheduler"))


def _names(values: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"``, ``["a", "b,c"]`` -> the names, in order."""
    values = (values,) if isinstance(values, str) else tuple(values)
    return tuple(v.strip() for text in values for v in text.split(",") if v.strip())


def _run(tasks: list[RunTask], workers: int | None, scheduler: str | None,
         on_start: Callable[[int], None] | None, on_done: Callable[[TaskOutcome], None] | None,
         journal: Journal | None = None) -> RunResult:
    """Run the tasks, each row into ``journal`` (if any) the moment it is done."""
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if on_start is not None:
        on_start(len(tasks))

    def done(row: TaskOutcome) -> None:
        if journal is not None:
            journal.add(row.to_dict())
        if on_done is not None:
            on_done(row)
    return run_tasks(tasks, workers or default_workers(), scheduler, done)


def _journal(out: OutputDir | None, name: str, identity: dict, kept: list[TaskOutcome],
             again: bool) -> Journal | None:
    """The journal of this run's rows beside ``out``'s results file ``name`` (None: no
    files); one an interrupted run left is completed by --resume or started again with
    --force, never overwritten otherwise (docs/decisions/D69.md)."""
    if out is None:
        return None
    path = journal_path(out.path / name)
    if path.exists() and not again:
        raise ConfigError(f"{path}: the rows of an interrupted run: --resume completes it, "
                          f"--force starts again")
    return Journal(path, identity, [r.to_dict() for r in kept])


def _check_timeline(study: Study, pairs, replaced: bool, plots: bool) -> None:
    """A study's ``plots.timeline`` names one of the systems it runs: an error naming the
    file where it does not; a note where ``--systems`` replaced them."""
    if not (plots and study.timeline and "timeline" in study.plots):
        return
    want = study.timeline[0]
    if any(want in (variant.ref, loaded.name) for variant, loaded in pairs):
        return
    names = ", ".join(dict.fromkeys(loaded.name for _, loaded in pairs))
    if replaced:
        _note(f"plots.timeline names {want!r}, not run here ({names}): no timeline plot")
        return
    raise ConfigError(f"{study.path or study.name}: plots.timeline: system {want!r} is not "
                      f"one of the study's systems ({names})")


def _note(text: str) -> None:
    """Something the results rest on that the user did not say (hwmodels.errors.PksimNote)."""
    if text:
        warnings.warn(text, PksimNote, stacklevel=3)


def _output(output: str | Path | None, force: bool, names: list[str]) -> OutputDir | None:
    """The folder the files go to, checked before any work; None: write no files."""
    if output is None:
        return None
    if not str(output).strip():
        raise ConfigError(f"-o {str(output)!r}: give the output folder (or leave -o out)")
    out = OutputDir(output, force)
    out.check(names)
    return out


def _resumed(resume: bool, out: OutputDir | None, name: str, identity: dict, records: str,
             tasks: list[RunTask], variants) -> tuple[list[TaskOutcome], list[RunTask]]:
    """``--resume``: the rows the interrupted run left in ``out``'s ``name`` and the tasks
    still to run (pksim_core.runner.resume_from); without it, no rows and every task."""
    if not resume:
        return [], tasks
    if out is None:
        raise ConfigError("--resume needs the output folder of the run to complete")
    name_of = {variant: loaded.name for variant, loaded in variants}
    return resume_from(out.path / name, identity, records, tasks,
                       {t: name_of[t.variant] for t in tasks})


# ---- sweep ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepResult:
    """A sweep's rows (``rows``: every task's ``pksim_core.runner.TaskOutcome``; ``entries``: the
    nccl-tests table, one dict per size and system, pk and nccl side by side) and the files
    written. ``interrupted``: Ctrl-C stopped it (``rows`` holds what finished)."""
    op: str
    impls: tuple[str, ...]
    systems: tuple[str, ...]
    rows: tuple[TaskOutcome, ...]
    entries: tuple[dict, ...]
    files: tuple[Path, ...] = ()
    interrupted: bool = False
    total: int = 0
    kept: int = 0
    wall_s: float = 0.0
    output: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """``pksim sweep --json``."""
        return {"op": self.op, "rows": [json_entry(e, ("size_B",)) for e in self.entries],
                "files": [str(p) for p in self.files]}


def sweep(system: str | Sequence[str], op: str, bytes: str | int | None = None,
          shape: str | Sequence[str] = (), dtype: str = "bf16", world: int | None = None,
          domains: int = 1, root: int = 0, impl: str | Sequence[str] = "pk,nccl",
          set: str | Sequence[str] | dict = (), output: str | Path | None = None,
          force: bool = False, resume: bool = False, workers: int | None = None,
          scheduler: str | None = None, plots: bool = True,
          on_start: Callable[[int], None] | None = None,
          on_done: Callable[[TaskOutcome], None] | None = None, nvls: str = "on") -> SweepResult:
    """pk and NCCL side by side over sizes (``bytes="1KiB:1GiB"``, a list, or an int) or a
    shape (``shape="m=1024:16384"``), on one or several systems. ``workers``: processes
    (None: every core); ``scheduler``: a Dask scheduler's address; ``output``: the folder
    for sweep.csv/json and the plots (None: no files); ``on_start``: called with the number
    of tasks before they run, ``on_done`` with each finished row; ``nvls``: "off" runs the
    nccl rows as NCCL_NVLS_ENABLE=0 does."""
    _check_run_kinds("sweep", {"system": system, "op": op, "bytes": bytes, "shape": shape,
                               "dtype": dtype, "world": world, "domains": domains,
                               "root": root, "impl": impl, "set": set, "force": force,
                               "resume": resume, "workers": workers,
                               "scheduler": scheduler, "plots": plots, "nvls": nvls})
    nvls = check_nvls(nvls, "--nvls")
    impls = _names(impl)
    if not impls:
        raise ConfigError(f"--impl {impl!r}: give one or more of {', '.join(IMPLS)}")
    for name in impls:
        if name not in IMPLS:
            raise ConfigError(f"--impl: {name!r} is not one of {', '.join(IMPLS)}")
        if impls.count(name) > 1:
            raise ConfigError(f"--impl {impl!r}: {name} given twice")
    size = str(bytes) if isinstance(bytes, int) else bytes
    overrides = overrides_of("sweep", set)
    axes = shape_axes(op, size, (shape,) if isinstance(shape, str) else tuple(shape))
    refs = _names(system)
    if not refs:
        raise ConfigError(f"--system {system!r}: names no system")
    variants = [(SystemVariant(ref, overrides), load_system(ref, overrides)) for ref in refs]
    check_unique_systems([(v.ref, loaded) for v, loaded in variants], "--system")
    tasks = []
    for variant, loaded in variants:
        n = check_world(loaded, world, domains)
        check_root(root, n)
        check_dtype(loaded, dtype)
        for point in _product(axes):
            case = Case(op, op, point, dtype, n, domains, root)
            check_case(loaded, case, option=lambda key: "--bytes" if size else
                       "--shape" if key == "bytes" else f"--shape {key}")
            tasks.extend(RunTask(variant, case, name, nvls) for name in impls)
    out = _output(output, force or resume, report.sweep_files())
    _note(split_note(t.case for t in tasks))
    identity = {"command": "sweep", "op": op, "systems": list(refs), "set": list(overrides),
                "dtype": dtype, "world": world, "domains": domains, "root": root,
                "impls": list(impls), "nvls": nvls}
    order = {(t.variant.ref, t.case, t.impl): i for i, t in enumerate(tasks)}
    kept, tasks = _resumed(resume, out, "sweep.json", identity, "results", tasks, variants)
    journal = _journal(out, "sweep.json", identity, kept, force or resume)
    result = _run(tasks, workers, scheduler, on_start, on_done, journal)
    rows = attach_baselines(kept + result.rows, "nccl")
    rows.sort(key=lambda r: order[(r.system_ref, r.case, r.impl)])
    if rows and all(r.status == report.NOT_SUPPORTED for r in rows):
        if journal is not None:
            journal.finish()
        raise NotSupportedYet(rows[0].message)
    total = result.total + len(kept)
    systems = {loaded.name: loaded for _, loaded in variants}
    if out is None:
        entries = report.sweep_rows(rows, impls)
    else:
        partial = (f"partial: {len(rows)} of {total} rows (interrupted); the same command "
                   f"with --resume -o {out.path} completes it" if result.interrupted else "")
        entries = report.write_sweep(out, rows, impls, op, plots, systems, partial, identity)
        journal.finish()
    return SweepResult(op, impls, tuple(systems), tuple(rows), tuple(entries),
                       tuple(out.written) if out else (), result.interrupted, total, len(kept),
                       result.wall_s, out.path if out else None)


def shape_axes(op: str, size: str | None, shapes: tuple[str, ...]
               ) -> list[tuple[str, list[int]]]:
    if size and shapes:
        raise ConfigError("give --bytes or --shape, not both")
    if size:
        if op in SHAPE_KEYS:
            raise ConfigError(f"--op {op} takes --shape KEY=RANGE for each of "
                              f"{', '.join(SHAPE_KEYS[op])}, not --bytes")
        return [("bytes", parse_bytes_range(size))]
    if not shapes:
        raise ConfigError("give --bytes RANGE (e.g. 1KiB:8GiB) or --shape KEY=RANGE")
    axes = []
    for text in shapes:
        key, sep, values = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--shape: expected KEY=RANGE, got {text!r}")
        allowed = ("count", "m", "n") if op in COLLECTIVES else SHAPE_KEYS.get(op, (key,))
        if key not in allowed:
            raise ConfigError(f"--shape {key}: {op} takes {', '.join(allowed)}")
        if key in dict(axes):
            raise ConfigError(f"--shape {key}: given twice")
        axes.append((key, parse_bytes_range(values, f"--shape {key}")))
    keys = {k for k, _ in axes}
    if op in COLLECTIVES and keys not in ({"count"}, {"m", "n"}):
        raise ConfigError(f"--op {op} takes --bytes, --shape count=RANGE, or --shape m=... "
                          f"with --shape n=... (got {', '.join(sorted(keys))})")
    missing = [k for k in SHAPE_KEYS.get(op, ()) if k not in keys]
    if missing:
        raise ConfigError(f"--op {op} needs --shape for {', '.join(missing)}")
    return axes


def _product(axes):
    keys = [k for k, _ in axes]
    for combo in itertools.product(*(v for _, v in axes)):
        yield tuple(zip(keys, combo))


# ---- whatif ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyResult:
    """A study's rows (``rows``: every task's ``pksim_core.runner.TaskOutcome``, in the study's order;
    ``entries``: the summary, pk against the baseline, one dict per workload, system and
    variant), what was skipped and the files written."""
    study: Study
    rows: tuple[TaskOutcome, ...]
    entries: tuple[dict, ...]
    skipped: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()
    interrupted: bool = False
    total: int = 0
    kept: int = 0
    run_s: float = 0.0                      # running the tasks
    wall_s: float = 0.0                     # the whole call
    output: Path | None = None
    systems: dict = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """``pksim whatif --json``."""
        return {"study": self.study.name, "wall_s": self.wall_s,
                "interrupted": self.interrupted, "skipped": list(self.skipped),
                "rows": [json_entry(e) for e in self.entries],
                "files": [str(p) for p in self.files]}


def whatif(study: str | Study | None = None, systems: str | Sequence[str] = (),
           set: str | Sequence[str] | dict = (), vary: str | Sequence[str] = (),
           output: str | Path | None = None, force: bool = False, resume: bool = False,
           workers: int | None = None, scheduler: str | None = None, plots: bool = True,
           on_start: Callable[[int], None] | None = None,
           on_done: Callable[[TaskOutcome], None] | None = None,
           nvls: str | None = None) -> StudyResult:
    """A study (a file, a shipped study's name or a ``Study``; None: the built-in study):
    the best schedule, its time, the baseline and the speed-up of each workload on each
    system. ``systems`` replaces the study's; ``set`` overrides every system's figures;
    ``vary`` ("KEY=V1,V2", a value like 2x scales) changes one figure at a time; ``nvls``
    ("on"/"off", None: the study's) NCCL_NVLS_ENABLE for the nccl rows of collectives."""
    start = time.perf_counter()
    if not isinstance(study, Study):
        check_kind("whatif", "study", study, "text")
    _check_run_kinds("whatif", {"systems": systems, "set": set, "vary": vary, "force": force,
                                "resume": resume, "workers": workers, "scheduler": scheduler,
                                "plots": plots, "nvls": nvls})
    chosen = study if isinstance(study, Study) else find_study(study) if study is not None else \
        default_study()
    overrides = overrides_of("whatif", set)
    if systems and not _names(systems):
        raise ConfigError(f"--systems {systems!r}: names no system")
    chosen = chosen.with_options(_names(systems), overrides,
                                 (vary,) if isinstance(vary, str) else tuple(vary), nvls)
    pairs = load_variants(chosen, "--systems" if systems else "")
    _check_timeline(chosen, pairs, bool(systems), plots)
    tasks, skipped = tasks_for(pairs, chosen.workloads, chosen.impls,
                               chosen.path or chosen.name, chosen.programs, chosen.nvls)
    out = _output(output, force or resume, report.study_files(chosen))
    _note(split_note(t.case for t in tasks))
    identity = {"command": "whatif", "study": chosen.name, "systems": list(chosen.systems),
                "set": list(chosen.overrides),
                "vary": [[k, list(v)] for k, v in chosen.vary], "impls": list(chosen.impls),
                "nvls": chosen.nvls}
    kept, tasks = _resumed(resume, out, "results.json", identity, "rows", tasks, pairs)
    journal = _journal(out, "results.json", identity, kept, force or resume)
    result = _run(tasks, workers, scheduler, on_start, on_done, journal)
    rows = attach_baselines(kept + result.rows, chosen.baseline)
    order = [w.name for w in chosen.workloads] + [e.name for e in chosen.programs]
    labels = [v.label for v, _ in pairs]
    rows.sort(key=lambda r: (list(chosen.systems).index(r.system_ref),
                             labels.index(r.variant) if r.variant in labels else 0,
                             order.index(r.case.workload), r.case.world, r.case.shape, r.impl))
    systems_by_name = {loaded.name: loaded for _, loaded in pairs}
    wall = time.perf_counter() - start
    if out is not None:
        timelines = _timelines(chosen, rows) if plots and not result.interrupted else []
        report.write_study(out, chosen, rows, systems_by_name, timelines, plots,
                           {"wall_s": wall,
                            "tasks": result.total + len(kept), "finished": len(rows),
                            "interrupted": result.interrupted, "skipped": skipped,
                            "resume": identity})
        journal.finish()
    return StudyResult(chosen, tuple(rows), tuple(report.summary(rows)), tuple(skipped),
                       tuple(out.written) if out else (), result.interrupted,
                       result.total + len(kept), len(kept), result.wall_s, wall,
                       out.path if out else None, systems_by_name)


def _timelines(study: Study, rows: list[TaskOutcome]):
    """The recorded timelines for the study's timeline plot: pk best and baseline."""
    if "timeline" not in study.plots:
        return []
    want_system, want_workload = study.timeline or (rows[0].system if rows else "", "")
    chosen = [r for r in rows if r.ok and r.variant == "base" and r.case.is_collective
              and want_system in (r.system, r.system_ref)
              and (not want_workload or r.case.workload == want_workload)]
    if not chosen:
        return []
    first = min(chosen, key=lambda r: (r.case.world, r.nbytes)).case
    out = []
    for r in chosen:
        if r.case == first:
            label = f"{r.impl} {r.schedule.removeprefix('nccl/')}"
            out.append((label, recorded(r), load_system(r.system_ref, r.overrides)))
    return out
