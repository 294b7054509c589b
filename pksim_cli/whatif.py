"""``pksim whatif``, ``pksim sweep`` and ``pksim trace``: studies, size sweeps, timelines."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.units import Seconds, format_bytes, format_time
from pksim_core import plots, report
from pksim.api import study as api
from pksim_core.gantt import gantt as gantt_chart
from pksim_cli.predict import _candidates, need_op, op_options
from pksim_cli.programs import program_prediction
from pksim_cli.output import emit_json, table
from pksim_core.plots import OutputDir
from pksim_core.runner import best_of
from pksim_core.schedule import DTYPES
from pksim_core.simulate import predict as run_predict
from pksim_core.programs.trace import chrome_trace as program_trace, gantt_rows as program_gantt
from pksim_core.trace import chrome_trace
from pksim_core.study import KNOWN_OPS, default_study, find_study
from pksim_core.study_programs import PROGRAM_OP
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.workloads.fused_ops import SHAPE_KEYS

OUT_ROOT = Path("pksim-out")


NVLS_HELP = ("NCCL's collectives with NVLink SHARP as NCCL_NVLS_ENABLE leaves it: off (=0, how "
             "most clusters run NCCL) takes NVLS and NVLSTree out of its tuner's choices")


def nvls_option(default_text: str):
    return click.option("--nvls", type=click.Choice(("on", "off")), default=None,
                        help=f"{NVLS_HELP} [default: {default_text}].")


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
    """A progress bar on stderr (quiet when stderr is not a terminal): ``start(total)`` as the
    tasks are known, ``advance`` as each finishes."""

    def __init__(self, label: str, quiet: bool = False):
        self.label, self.bar = label, None
        self.quiet = quiet or not sys.stderr.isatty()

    def start(self, total: int) -> None:
        if self.quiet:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task(self.label, total=total)
        self.bar.start()

    def advance(self, _row=None) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _with_progress(label: str, as_json: bool, call, *args, **kw):
    """``call(*args, **kw)`` with a progress bar fed by its ``on_start``/``on_done``, stopped
    however the call ends; what the call returns."""
    progress = _Progress(label, as_json)
    try:
        return call(*args, on_start=progress.start, on_done=progress.advance, **kw)
    finally:
        progress.stop()


def _finish(found, as_json: bool, print_tables, summary: str) -> None:
    """A study's or sweep's result: JSON, or its tables and a summary line; then, after Ctrl-C,
    what was kept (with the rows a --resume brought) and exit 130."""
    if as_json:
        emit_json(found.to_dict())
    else:
        print_tables()
        click.echo(summary)
    if found.interrupted:
        click.echo(f"pksim: interrupted: kept {len(found.rows)} of {found.total} results in "
                   f"{found.output} (--resume completes them)", err=True)
        sys.exit(130)


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
@nvls_option("the study's nvls key, else on")
@run_options
def whatif(study_file, systems, overrides, vary, nvls, output, force, resume, workers,
           scheduler, no_plots, as_json) -> None:
    """Run a study: the best schedule, its time, the baseline and the speed-up for each
    workload on each system; for each program of the study, its baseline (PyTorch + NCCL),
    pksim's best and roofline (with no options, the built-in 70B-class TP study)."""
    start = time.perf_counter()
    if output is not None and not output.strip():
        raise ConfigError(f"-o {output!r}: give the output folder (or leave -o out)")
    study = find_study(study_file) if study_file is not None else default_study()
    found = _with_progress(f"whatif {study.name}", as_json, api.whatif, study, systems,
                           overrides, vary, output or OUT_ROOT / study.name, force, resume,
                           workers, scheduler, not no_plots, nvls=nvls)
    _finish(found, as_json, lambda: _print_study(found.study, found.entries, found.skipped),
            f"{len(found.rows)} predictions ({found.run_s:.1f} s), {len(found.files)} files in "
            f"{found.output}/ ({time.perf_counter() - start:.1f} s in all)")


def _print_study(study, entries, skipped) -> None:
    title = study.title or study.name
    for system in dict.fromkeys(e["system"] for e in entries):
        mine = [e for e in entries if e["system"] == system and e["op"] != PROGRAM_OP]
        base = [e for e in mine if e["variant"] == "base"]
        if base:
            nvls = ", NCCL with NVLS off" if study.nvls == "off" else ""
            table(f"{title}: {system} (baseline: {study.baseline}{nvls})", report.TABLE_HEADERS,
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
@nvls_option("on, where the switches reduce")
@run_options
def sweep(systems, overrides, op, size, shapes, dtype, world, domains, root, impls, nvls,
          output, force, resume, workers, scheduler, no_plots, as_json) -> None:
    """A size (or shape) sweep in the nccl-tests layout: size, time, algbw, busbw for
    pk and nccl side by side, and a plot."""
    if output is not None and not output.strip():
        raise ConfigError(f"-o {output!r}: give the output folder (or leave -o out)")
    found = _with_progress(f"sweep {op}", as_json, api.sweep, systems, op, size, shapes, dtype,
                           world, domains, root, impls, overrides,
                           output or OUT_ROOT / f"sweep-{op}", force, resume, workers, scheduler,
                           not no_plots, nvls=nvls or "on")
    _finish(found, as_json, lambda: _print_sweep(op, found.entries, found.impls, found.systems),
            f"{len(found.rows)} predictions ({found.wall_s:.1f} s), {len(found.files)} files in "
            f"{found.output}/")


def _print_sweep(op: str, entries: list[dict], impls, order: list[str]) -> None:
    """nccl-tests columns; type, redop and root are the same on every line, so they go
    in the title (the CSV has them all)."""
    headers = ["size", "count"]
    for impl in impls:
        headers += [f"{impl} time", f"{impl} algbw", f"{impl} busbw", f"{impl} schedule"]
    for system in order:
        mine = [e for e in entries if e["system"] == system]
        if not mine:
            continue
        rows = []
        for e in mine:
            row = [format_bytes(e["size_bytes"]) if e["size_bytes"] else e["shape"],
                   e["count"] or ""]
            for impl in impls:
                t = e.get(f"{impl}_time_s")
                row += [Seconds(t),
                        _f(e.get(f"{impl}_algbw_GBps")), _f(e.get(f"{impl}_busbw_GBps")),
                        e.get(f"{impl}_label", "")]
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
            out.save(gantt_chart(events, f"{what} on {system.name}: {p.schedule.label()}"),
                     stem, report.gantt_data(events))
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
        out.save(gantt_chart(program_gantt(p), f"{p.program} on {p.system}: baseline "
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
