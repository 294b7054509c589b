"""``pksim whatif``, ``pksim sweep`` and ``pksim trace``: studies, size sweeps, timelines."""
from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn)

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes, format_time, parse_bytes_range
from pksim import plots, report
from pksim.cli.predict import _candidates, need_op, op_options
from pksim.cli.programs import program_prediction
from pksim.cli.output import emit_json, json_entry, table
from pksim.inputs import check_dtype, check_root, check_unique_systems, check_world
from pksim.plots import OutputDir
from pksim.safe_files import Journal, journal_path
from pksim.runner import (NotSupportedYet, Task, attach_baselines, best_of, check_case,
                          default_workers, recorded, resume_from, run_tasks, tasks_for)
from pksim.schedule import DTYPES, IMPLS
from pksim.simulate import predict as run_predict
from pksim.programs.trace import chrome_trace as program_trace, gantt_rows as program_gantt
from pksim.trace import chrome_trace
from pksim.study import (KNOWN_OPS, Case, Variant, default_study, find_study, load_variants,
                         split_note)
from pksim.study_programs import PROGRAM_OP
from pksim.workloads.collectives import COLLECTIVES
from pksim.workloads.fused import SHAPE_KEYS

OUT_ROOT = Path("pksim-out")


def run_options(fn):
    """Options shared by whatif and sweep: output folder, resume, parallelism, format."""
    for option in reversed([
        click.option("-o", "--output", metavar="DIR", default=None,
                     help="Output folder (default: ./pksim-out/<study>)."),
        click.option("--force", is_flag=True, help="Overwrite files already there."),
        click.option("--resume", is_flag=True,
                     help="Complete an interrupted run in the output folder: keep the rows "
                          "it wrote, compute the rest (same command and options)."),
        click.option("--workers", type=int, default=None,
                     help="Processes to use (default: every core)."),
        click.option("--scheduler", metavar="ADDRESS", default=None,
                     help="Run the tasks on a Dask cluster (needs pksim[dask])."),
        click.option("--no-plots", is_flag=True, help="Write CSV/JSON only."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables."),
    ]):
        fn = option(fn)
    return fn


class _Progress:
    """A progress bar on stderr (quiet when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, quiet: bool = False):
        self.bar = None
        if quiet or not sys.stderr.isatty():
            return
        self.bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task(label, total=total)
        self.bar.start()

    def advance(self, _row=None) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _run(tasks: list[Task], workers: int | None, scheduler: str | None, label: str,
         quiet: bool, journal: Journal):
    """Run the tasks, each row into ``journal`` the moment it is done."""
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    progress = _Progress(len(tasks), label, quiet)

    def done(row) -> None:
        journal.add(row.to_dict())
        progress.advance()
    try:
        return run_tasks(tasks, workers or default_workers(), scheduler, done)
    finally:
        progress.stop()


def _run_resumable(results: Path, records_key: str, identity: dict, tasks: list[Task],
                   pairs: list, resume: bool, force: bool, run_args: tuple):
    """(rows a --resume kept from ``results`` and its journal, the run of the rest, the
    journal of this run); ``pairs``: (variant, system); ``run_args``: _run's workers,
    scheduler, label and quiet."""
    kept: list = []
    if resume:
        name_of = {variant: system.name for variant, system in pairs}
        kept, tasks = resume_from(results, identity, records_key, tasks,
                                  {t: name_of[t.variant] for t in tasks})
    journal = _journal(results, identity, kept, force or resume)
    return kept, _run(tasks, *run_args, journal), journal


def _journal(results: Path, identity: dict, kept: list, again: bool) -> Journal:
    """The journal of this run's rows beside ``results``; one an interrupted run left is
    completed by --resume or started again with --force, never overwritten otherwise."""
    path = journal_path(results)
    if path.exists() and not again:
        raise ConfigError(f"{path}: the rows of an interrupted run: --resume completes it, "
                          f"--force starts again")
    return Journal(path, identity, [r.to_dict() for r in kept])


def _interrupted(result, out: OutputDir, kept: int = 0) -> None:
    """After Ctrl-C: say what was kept (``kept``: rows a --resume brought) and exit 130."""
    if result.interrupted:
        click.echo(f"pksim: interrupted: kept {len(result.rows) + kept} of "
                   f"{result.total + kept} results in {out.path} (--resume completes them)",
                   err=True)
        sys.exit(130)


def _note(text: str) -> None:
    if text:
        click.echo(f"pksim: note: {text}", err=True)


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for text in values for v in text.split(",") if v.strip())


# ---- whatif ---------------------------------------------------------------------------------
@click.command()
@click.option("--study", "study_file", metavar="FILE", default=None,
              help="A study TOML file (or a shipped study's name); default: the built-in study.")
@click.option("--systems", "systems", multiple=True, metavar="A,B,C",
              help="Systems to run (names or system files), instead of the study's.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a figure of every system (repeatable).")
@click.option("--vary", multiple=True, metavar="KEY=V1,V2,...",
              help="What-if: one change at a time; a value like 2x scales the system's figure.")
@run_options
def whatif(study_file, systems, overrides, vary, output, force, resume, workers, scheduler,
           no_plots, as_json) -> None:
    """Run a study: the best schedule, its time, the baseline and the speed-up for each
    workload on each system; for each program of the study, its baseline (PyTorch + NCCL),
    pksim's best and roofline (with no options, the built-in 70B-class TP study)."""
    start = time.perf_counter()
    study = find_study(study_file) if study_file else default_study()
    if systems and not _split(systems):
        raise ConfigError(f"--systems {' '.join(systems)!r}: names no system")
    study = study.with_options(_split(systems), overrides, vary)
    pairs = load_variants(study, "--systems" if systems else "")
    tasks, skipped = tasks_for(pairs, study.workloads, study.impls, study.path or study.name,
                               study.programs)
    out = OutputDir(output or OUT_ROOT / study.name, force or resume)
    out.check(report.study_files(study))
    _note(split_note(t.case for t in tasks))
    identity = {"command": "whatif", "study": study.name, "systems": list(study.systems),
                "set": list(study.overrides), "vary": [[k, list(v)] for k, v in study.vary],
                "impls": list(study.impls)}
    kept, result, journal = _run_resumable(
        out.path / "results.json", "rows", identity, tasks, pairs, resume, force,
        (workers, scheduler, f"whatif {study.name}", as_json))
    rows = attach_baselines(kept + result.rows, study.baseline)
    order = [w.name for w in study.workloads] + [e.name for e in study.programs]
    rows.sort(key=lambda r: (list(study.systems).index(r.system_ref), _variant_order(r, pairs),
                             order.index(r.case.workload), r.case.world, r.case.shape, r.impl))
    systems_by_name = {system.name: system for _, system in pairs}
    timelines = [] if no_plots or result.interrupted else _timelines(study, rows, pairs)
    wall = time.perf_counter() - start
    report.write_study(out, study, rows, systems_by_name, timelines, not no_plots,
                       {"wall_s": wall, "tasks": result.total + len(kept), "finished": len(rows),
                        "interrupted": result.interrupted, "skipped": skipped,
                        "resume": identity})
    journal.finish()
    entries = report.summary(rows)
    if as_json:
        emit_json({"study": study.name, "wall_s": wall, "interrupted": result.interrupted,
                   "skipped": skipped, "rows": [json_entry(e) for e in entries],
                   "files": [str(p) for p in out.written]})
    else:
        _print_study(study, entries, skipped)
        click.echo(f"{len(rows)} predictions ({result.wall_s:.1f} s), "
                   f"{len(out.written)} files in {out.path}/ "
                   f"({time.perf_counter() - start:.1f} s in all)")
    _interrupted(result, out, len(kept))


def _variant_order(row, pairs) -> int:
    labels = [v.label for v, _ in pairs]
    return labels.index(row.variant) if row.variant in labels else 0


def _print_study(study, entries, skipped) -> None:
    title = study.title or study.name
    for system in dict.fromkeys(e["system"] for e in entries):
        mine = [e for e in entries if e["system"] == system and e["op"] != PROGRAM_OP]
        base = [e for e in mine if e["variant"] == "base"]
        if base:
            table(f"{title}: {system} (baseline: {study.baseline})", report.TABLE_HEADERS,
                  report.table_rows(base))
        changed = [e for e in mine if e["variant"] != "base"
                   and e["status"] != report.NOT_SUPPORTED]
        if changed:
            table(f"what if, on {system}: one change at a time", report.WHATIF_HEADERS,
                  report.table_rows(changed, what_if=True))
        _print_programs(title, system, [e for e in entries if e["system"] == system
                                        and e["op"] == PROGRAM_OP])
    unsupported = {e["message"] for e in entries if e["status"] == report.NOT_SUPPORTED}
    for message in sorted(unsupported):
        click.echo(f"note: {message}")
    if skipped:
        click.echo(f"note: skipped {len(skipped)} (workload, system) pairs whose world is "
                   f"larger than the domain, e.g. {skipped[0]}")


def _print_programs(title: str, system: str, entries: list[dict]) -> None:
    """A study's programs on one system: the three times, the shares of the roofline and
    the speed-up; then, per what-if change, what it buys the baseline and pksim's best."""
    base = [e for e in entries if e["variant"] == "base"]
    if base:
        table(f"{title}: programs on {system} (baseline: PyTorch + NCCL)",
              report.PROGRAM_HEADERS, report.program_table_rows(base))
    changed = [e for e in entries if e["variant"] != "base"]
    if changed:
        table(f"what if, programs on {system}: one change at a time",
              report.PROGRAM_WHATIF_HEADERS, report.program_table_rows(changed, what_if=True))


def _timelines(study, rows, pairs):
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


# ---- sweep ----------------------------------------------------------------------------------
@click.command()
@click.option("--system", "systems", multiple=True, required=True, metavar="NAME[,NAME]",
              help="System(s) to sweep (names or files); several go on one plot.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a system figure (repeatable).")
@click.option("--op", required=True, type=click.Choice(KNOWN_OPS), help="Operation.")
@click.option("--bytes", "size", default=None, metavar="RANGE",
              help="Sizes: 1KiB:8GiB (powers of two), or a list 1MiB,1GiB.")
@click.option("--shape", "shapes", multiple=True, metavar="KEY=RANGE",
              help="A shape key and its range, e.g. m=1024:16384 (repeatable).")
@click.option("--dtype", type=click.Choice(tuple(DTYPES)), default="bf16", show_default=True)
@click.option("--world", type=int, default=None, help="Ranks (default: the whole domain).")
@click.option("--domains", type=int, default=1, show_default=True)
@click.option("--root", type=int, default=0, show_default=True)
@click.option("--impl", "impls", default="pk,nccl", show_default=True, metavar="pk,nccl",
              help="Implementations side by side.")
@run_options
def sweep(systems, overrides, op, size, shapes, dtype, world, domains, root, impls, output,
          force, resume, workers, scheduler, no_plots, as_json) -> None:
    """A size (or shape) sweep in the nccl-tests layout: size, time, algbw, busbw for
    pk and nccl side by side, and a plot."""
    impl_list = _split((impls,))
    if not impl_list:
        raise ConfigError(f"--impl {impls!r}: give one or more of {', '.join(IMPLS)}")
    for impl in impl_list:
        if impl not in IMPLS:
            raise ConfigError(f"--impl: {impl!r} is not one of {', '.join(IMPLS)}")
    shape_axes = _shape_axes(op, size, shapes)
    refs = _split(systems)
    if not refs:
        raise ConfigError(f"--system {' '.join(systems)!r}: names no system")
    variants = [(Variant(ref, tuple(overrides)), load_system(ref, overrides)) for ref in refs]
    check_unique_systems([(v.ref, system) for v, system in variants], "--system")
    tasks = []
    for variant, system in variants:
        n = check_world(system, world, domains)
        check_root(root, n)
        check_dtype(system, dtype)
        for shape in _product(shape_axes):
            case = Case(op, op, shape, dtype, n, domains, root)
            check_case(system, case, option=lambda key: "--bytes" if size else
                       "--shape" if key == "bytes" else f"--shape {key}")
            tasks.extend(Task(variant, case, impl) for impl in impl_list)
    out = OutputDir(output or OUT_ROOT / f"sweep-{op}", force or resume)
    out.check(report.sweep_files())
    _note(split_note(t.case for t in tasks))
    identity = {"command": "sweep", "op": op, "systems": list(refs), "set": list(overrides),
                "dtype": dtype, "world": world, "domains": domains, "root": root,
                "impls": list(impl_list)}
    order = {(t.variant.ref, t.case, t.impl): i for i, t in enumerate(tasks)}
    kept, result, journal = _run_resumable(
        out.path / "sweep.json", "results", identity, tasks, variants, resume, force,
        (workers, scheduler, f"sweep {op}", as_json))
    rows = attach_baselines(kept + result.rows, "nccl")
    rows.sort(key=lambda r: order[(r.system_ref, r.case, r.impl)])
    if rows and all(r.status == report.NOT_SUPPORTED for r in rows):
        journal.finish()
        raise NotSupportedYet(rows[0].message)
    total = result.total + len(kept)
    partial = (f"partial: {len(rows)} of {total} rows (interrupted); the same command with "
               f"--resume -o {out.path} completes it" if result.interrupted else "")
    entries = report.write_sweep(out, rows, impl_list, op, not no_plots,
                                 {s.name: s for _, s in variants}, partial, identity)
    journal.finish()
    if as_json:
        emit_json({"op": op, "rows": [json_entry(e) for e in entries],
                   "files": [str(p) for p in out.written]})
    else:
        _print_sweep(op, entries, impl_list, [s.name for _, s in variants])
        click.echo(f"{len(rows)} predictions ({result.wall_s:.1f} s), {len(out.written)} "
                   f"files in {out.path}/")
    _interrupted(result, out, len(kept))


def _shape_axes(op: str, size: str | None, shapes: tuple[str, ...]
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
    keys = set(dict(axes))
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


def _print_sweep(op: str, entries: list[dict], impls, order: list[str]) -> None:
    """nccl-tests columns; type, redop and root are the same on every line, so they go
    in the title (the CSV has them all)."""
    headers = ["size", "count"]
    for impl in impls:
        headers += [f"{impl} time(us)", f"{impl} algbw", f"{impl} busbw", f"{impl} schedule"]
    for system in order:
        mine = [e for e in entries if e["system"] == system]
        if not mine:
            continue
        rows = []
        for e in mine:
            row = [format_bytes(e["size_B"]) if e["size_B"] else e["shape"], e["count"] or ""]
            for impl in impls:
                t = e.get(f"{impl}_time_s")
                row += [f"{t * 1e6:.2f}" if t is not None else "-",
                        _f(e.get(f"{impl}_algbw_GBps")), _f(e.get(f"{impl}_busbw_GBps")),
                        e.get(f"{impl}_schedule", "")]
            rows.append(row)
        e = mine[0]
        root = f", root {e['root']}" if e["root"] >= 0 else ""
        table(f"{op} {e['type']} {e['redop']}{root} on {system}, {e['world']} ranks "
              f"(algbw, busbw in GB/s)", headers, rows)


def _f(value) -> str:
    return "-" if value is None else f"{value:.2f}"


# ---- trace ----------------------------------------------------------------------------------
def _trace_command():
    @click.command()
    @op_options
    @click.option("-o", "--output", metavar="FILE.json", default=None,
                  help="Trace file (default: ./pksim-out/trace/<system>-<op>-<size>.json).")
    @click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
    @click.option("--gantt", is_flag=True, help="Also write a Gantt chart (FILE-gantt.png, with its data).")
    def trace(output, force, gantt, **kw) -> None:
        """The timeline of one prediction as a Chrome/Perfetto trace: a track per rank,
        per SM group (fused ops: compute SMs and communication SMs) and per link class
        (without --algorithm etc., the best schedule). With --program: the program's
        baseline and pksim's best, a track per lane and the host."""
        if kw["program"]:
            _trace_program(output, force, gantt, kw)
            return
        need_op(kw)
        if output == "":
            raise ConfigError("-o '': give the trace's FILE.json (or leave -o out)")
        system = load_system(kw["system_name"], kw["overrides"])
        collective = kw["op"] in COLLECTIVES
        size = kw["size"] if collective else "-".join(
            f"{key}{kw['n_' if key == 'n' else key]}" for key in SHAPE_KEYS[kw["op"]])
        path = Path(output) if output else (
            OUT_ROOT / "trace" / f"{system.name}-{kw['op']}-{size}.json")
        if path.suffix != ".json":
            raise ConfigError(f"-o {path}: the trace is JSON; name it FILE.json")
        out = OutputDir(path.parent, force)
        stem = path.stem + "-gantt"
        out.check([path.name] + (plots.plot_files([stem]) if gantt else []))
        candidates = _candidates(system, kw)
        chosen = candidates[0] if len(candidates) == 1 else \
            best_of(system, candidates, cold=kw["cold"]).schedule
        p = run_predict(system, chosen, reduced=not kw["full"], record=True, cold=kw["cold"])
        what = (f"{kw['op']} {format_bytes(p.nbytes)}" if collective else
                f"{kw['op']} {' '.join(f'{k}={v}' for k, v in p.schedule.shape)}")
        out.write_json(path.name, chrome_trace(system, p))
        if gantt:
            events = report.gantt_events([(p.schedule.impl, p, system)])
            out.save(plots.gantt(events, f"{what} on {system.name}: {p.schedule.label()}"),
                     stem, events)
        if kw["as_json"]:
            emit_json({"prediction": p.to_dict(), "files": [str(f) for f in out.written]})
            return
        click.echo(f"{what} on {system.name} ({p.schedule.world} ranks): "
                   f"{p.schedule.label()}, {format_time(p.time_s)}; "
                   f"{len(p.timeline)} timeline events recorded")
        for f in out.written:
            click.echo(f"wrote {f}")
        click.echo("open the .json in https://ui.perfetto.dev or chrome://tracing")

    return trace


def _trace_program(output, force, gantt, kw) -> None:
    p = program_prediction(kw)
    path = Path(output) if output else OUT_ROOT / "trace" / f"{p.system}-{p.program}.json"
    if path.suffix != ".json":
        raise ConfigError(f"-o {path}: the trace is JSON; name it FILE.json")
    out = OutputDir(path.parent, force)
    stem = path.stem + "-gantt"
    out.check([path.name] + (plots.plot_files([stem]) if gantt else []))
    out.write_json(path.name, program_trace(p))
    if gantt:
        out.save(plots.gantt(program_gantt(p), f"{p.program} on {p.system}: baseline "
                             f"{format_time(p.baseline_s)}, pksim {format_time(p.best_s)}"),
                 stem, program_gantt(p))
    if kw["as_json"]:
        emit_json({"prediction": p.to_dict(timeline=True),
                   "files": [str(f) for f in out.written]})
        return
    click.echo(f"program {p.program} on {p.system}: baseline {format_time(p.baseline_s)}, "
               f"pksim {format_time(p.best_s)} ({p.speedup:.2f}x)")
    for f in out.written:
        click.echo(f"wrote {f}")
    click.echo("open the .json in https://ui.perfetto.dev or chrome://tracing")


trace = _trace_command()
