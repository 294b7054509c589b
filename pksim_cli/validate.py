"""``pksim validate``: build, run, check, time and predict the generated collectives and
fused GEMM + communication kernels of a suite, and report predicted against measured. The
work is in ``validation.prepare.bundle`` (prepare, run) and ``validation.report.data``
(report), ``validation.published`` (``--published --add``: a user's nccl-tests run
turned into a corpus entry); this module is the thin CLI."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from hwmodels.errors import ConfigError
from pksim_cli.output import emit_json
from validation.environment import require
from validation.layout import (CASES, FUSED_DIR, FUSED_MEASURED, MEASURED, gpu_missing,
                               split_hint)
from validation.prepare.bundle import prepare
from validation.published.judge import judge, miss_reason, versus
from validation.published.nccl_tests import parse_nccl_tests, parse_tuning, read_text
from validation.published.pages import DOCS_DIR, HEADER, as_dict, summary_rows, write_pages
from validation.published.schema import MODES, NVLS, PROCESSES
from validation.published.writer import EntryMeta, entry_text, write_entry
from validation.report.data import build_report
from validation.report.ported import TARGETS as PORTED_TARGETS
from validation.report.ported import ported
from validation.report.numbers import fmt_abs_pct, fmt_pct
from validation.report.write import check_outputs, write_report
from validation.run.supervisor import run_bundle
from validation.suites.suite import load_suite

DEFAULT_OUT = Path("pksim-out") / "validate"


def _command() -> str:
    return "pksim " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["validate"] else ""


def _say_prepared(p, as_json: bool) -> None:
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    m = p.meta
    sizes = ", ".join(f"{k}: {v}" for k, v in m["cases_by_size"].items())
    say(f"prepared {m['cases']} cases of suite {m['suite']} in {p.out} "
        f"({len(m['libraries'])} libraries{'' if m['built'] else ', NOT built (--no-build)'}; "
        f"{m['groups']} (op, size, world) groups of {m['candidates_per_group']['min']}-"
        f"{m['candidates_per_group']['max']} candidates)")
    say(f"  cases per size: {sizes}")
    say(f"  predicted on {m['system']}: {m['cases'] - m['not_predicted']}; not predicted: "
        f"{m['not_predicted']} (listed in the report with the simulator's reason)")
    f = m.get("fused")
    if f:
        say(f"  fused: {f['cases']} cases in {f['groups']} (op, m x n x k, world) groups of "
            f"{f['candidates_per_group']['min']}-{f['candidates_per_group']['max']} candidates "
            f"({', '.join(f'{k}: {v}' for k, v in f['cases_by_overlap'].items())}); "
            f"not predicted: {f['not_predicted']}; in {p.out}/fused")
    if m.get("matrix_cases"):
        say(f"  correctness matrix: {m['matrix_cases']} cases in {p.out}/matrix")
    for left, what in ((m.get("left_out"), "cases"), (m.get("matrix_left_out"), "matrix cases"),
                       ((f or {}).get("left_out"), "fused cases")):
        if left:
            first = left[0]
            say(f"  left out {len(left)} {what} that cannot fit the GPU (listed in "
                f"prepare.json), e.g. {first['id']}: {first['reason']}")
    say(f"  estimated GPU time: {m['estimated_gpu_s']:.0f} s (from the predicted times; "
        f"measured ones may be several times longer)")


@click.command()
@click.option("--suite", "suite_ref", default="default", show_default=True, metavar="NAME|FILE",
              help="Shipped suite (default, quick) or a suite .toml file.")
@click.option("--system", "system_ref", default=None, metavar="NAME|FILE",
              help="System the predictions use [default: the suite's, h200-virtual-calibrated].")
@click.option("-o", "--out", "out_dir", default=None, type=click.Path(path_type=Path),
              help=f"Bundle / report directory [default: {DEFAULT_OUT}; with --report: the "
              "bundle itself]; with --published --add: the entry file to write.")
@click.option("--prepare", "do_prepare", is_flag=True,
              help="Only emit, build and predict: write DIR/cases.json for the GPU machine.")
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False,
              path_type=Path), metavar="DIR",
              help="Only report: read DIR/cases.json and DIR/measured.jsonl.")
@click.option("--measured", "measured", multiple=True, type=click.Path(dir_okay=False,
              path_type=Path), help="Measurements to report, repeatable: results of "
              "run_collectives and/or run_fused, matched to the cases by id [default: "
              "DIR/measured.jsonl and DIR/fused-measured.jsonl].")
@click.option("--no-build", is_flag=True, help="With --prepare: emit sources, skip nvcc.")
@click.option("--matrix", "with_matrix", is_flag=True,
              help="With --prepare: also write the collectives' correctness matrix to DIR/matrix "
                   "(for validation/device/validate.sh).")
@click.option("--gpu-memory", "gpu_memory", type=float, default=None, metavar="GB",
              help="Memory of the GPU the cases will run on: cases that cannot fit it are left "
                   "out, each with the reason [default: one GPU of --system].")
@click.option("--deadline-s", type=float, default=1800.0, show_default=True,
              help="Wall-clock limit of the GPU run (cases left are reported not measured).")
@click.option("--force", is_flag=True,
              help="Overwrite an existing bundle or report (DIR/measured.jsonl is kept: the "
                   "GPU run resumes from it; delete it to measure again).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--published", is_flag=True,
              help="Published measurements (validation/published): with --add, write a corpus "
                   "entry from your own nccl-tests output.")
@click.option("--write-docs", is_flag=True, help="With --published: (re)write the shipped "
              "pages docs/validation/published.md and docs/validation/published/*.png.")
@click.option("--add", "add_log", default=None, type=click.Path(dir_okay=False, exists=True,
              path_type=Path), metavar="LOG", help="With --published: an nccl-tests output file.")
@click.option("--tuning", "tuning_log", default=None, type=click.Path(dir_okay=False,
              exists=True, path_type=Path), metavar="LOG",
              help="With --add: an NCCL_DEBUG_SUBSYS=TUNING log of the same run (its cost "
                   "table and picks are stored).")
@click.option("--name", "entry_name", default=None, help="With --add: the entry's name "
              "[default: the -o file's stem].")
@click.option("--nccl-version", default=None, help="With --add: NCCL version, if the log "
              "does not print it.")
@click.option("--launch", type=click.Choice(MODES[:2]), default=None,
              help="With --add: CUDA graph or eager, if the log does not say (graph: N).")
@click.option("--processes", type=click.Choice(PROCESSES[:2]), default=None,
              help="With --add: one process per GPU or one for all, if the log does not say.")
@click.option("--nvls", type=click.Choice(NVLS[:3]), default=None,
              help="With --add: NVLink SHARP on, off (NCCL_NVLS_ENABLE=0) or NCCL's default.")
@click.option("--op", "op_name", default=None, help="With --add: the collective (all_reduce, "
              "all_gather, ...), if the log does not name its test.")
@click.option("--source", "source_text", default=None,
              help="With --add: where the run comes from (URL, repo + commit, or your words).")
@click.option("--ported", "ported_profile", default=None, metavar="PROFILE",
              help="Judge a kernel profile (a name in hwmodels/profiles or a file) on another "
                   "GPU's hardware: predict the suite on --system with PROFILE, against the "
                   "--measured files of that GPU; report in -o DIR with the portability targets.")
@click.option("--targets", "ported_targets", type=click.Choice(sorted(PORTED_TARGETS)),
              default="datasheet", show_default=True,
              help="With --ported: which of the issue's targets to judge (--system from the "
                   "datasheet, or after calibrate --hardware-only).")
def validate(suite_ref: str, system_ref: str | None, out_dir: Path | None, do_prepare: bool,
             report_dir: Path | None, measured: tuple[Path, ...], no_build: bool,
             with_matrix: bool, gpu_memory: float | None, deadline_s: float,
             force: bool, as_json: bool, published: bool = False, add_log: Path | None = None,
             tuning_log: Path | None = None, entry_name: str | None = None,
             nccl_version: str | None = None, launch: str | None = None,
             processes: str | None = None, nvls: str | None = None, op_name: str | None = None,
             source_text: str | None = None, write_docs: bool = False,
             ported_profile: str | None = None, ported_targets: str = "datasheet") -> None:
    """Judge the model on whole generated kernels: predicted vs measured.

    \b
    In one go (this machine has the GPU, nvcc and the simulator):
      pksim validate [--suite default|FILE] [--system CALIBRATED.toml] [-o DIR]
    Split (simulator and nvcc here, GPU elsewhere):
      pksim validate --prepare -o DIR        # emit, build, predict: DIR/cases.json, DIR/fused
      python -m validation.run.collectives --cases DIR/cases.json --out DIR/measured.jsonl
      python -m validation.run.fused --bundle DIR/fused --out DIR/fused-measured.jsonl
      pksim validate --report DIR            # report.json, report.md, scatter.png
    (validation/device/validate.sh runs both GPU steps, with memcheck, in one session.)
    Existing results: --report DIR --measured A.jsonl --measured B.jsonl.

    Every candidate schedule (algorithm x mechanism x blocks per rank) of every (op, size,
    world) of the suite is built, run as virtual ranks on one GPU, checked against torch,
    timed (median, cold L2) and predicted on the calibrated system. The report gives each
    case's error, the median and max |error| (targets 10 % and 25 %), whether the
    simulator's first choice was the measured fastest and by how much it lost (target 5 %),
    and, where a target is missed, the worst cases by (op, algorithm, mechanism). The fused
    kernels (the suite's [fused] table: gemm-rs, ag-gemm, gemm-ar; none, intra-SM, inter-SM)
    are judged separately, per (op, m x n x k, world), with their speed-up over none measured
    and predicted. Cases the simulator cannot predict are listed as such. These kernels are
    never calibration inputs.

    \b
    Published measurements (validation/published/README.md), no GPU:
      pksim validate --published [--json] [-o DIR] [--force] [--write-docs]
    predicts every corpus entry: |error| per curve and size band, NCCL's logged picks
    against the model's; pages (published.md, one plot per curve) in DIR [default:
    pksim-out/published; --write-docs: the shipped docs/validation].
      pksim validate --published --add all_reduce.log [--tuning tuning.log] -o ENTRY.toml
    asks for what the log lacks (system, source, launch mode, NVLS...) on a terminal."""
    if add_log is not None or tuning_log is not None:
        if not published:
            raise ConfigError("--add and --tuning only apply with --published")
        _add(add_log, tuning_log, out_dir, force, as_json,
             {"name": entry_name, "system": system_ref, "source": source_text,
              "nccl_version": nccl_version, "launch": launch, "processes": processes,
              "nvls": nvls, "op": op_name})
        return
    if write_docs and not published:
        raise ConfigError("--write-docs only applies with --published")
    if published:
        _published(out_dir, force, write_docs, as_json)
        return
    if ported_profile is not None:
        _ported(suite_ref, ported_profile, system_ref, measured, out_dir, ported_targets, force,
                as_json)
        return
    if out_dir is not None and out_dir.is_file():
        raise ConfigError(f"-o {out_dir}: is a file; give a directory")
    if not 0 < deadline_s < float("inf"):        # nan too
        raise ConfigError(f"--deadline-s {deadline_s:g}: must be a number of seconds above 0")
    if gpu_memory is not None and not 0.1 <= gpu_memory <= 1e6:
        raise ConfigError(f"--gpu-memory {gpu_memory:g}: GB of one GPU, from 0.1 to 1e6")
    if gpu_memory is not None and report_dir is not None:
        raise ConfigError("--gpu-memory applies to a run or --prepare, not --report")
    if do_prepare and report_dir is not None:
        raise ConfigError("--prepare and --report are two halves of a split run: give one")
    if do_prepare and measured:
        raise ConfigError(f"--measured {measured[0]}: measurements are reported (--report DIR, "
                          f"or a run), not prepared")
    if no_build and not do_prepare:
        raise ConfigError("--no-build only applies with --prepare (a run needs the libraries)")
    if report_dir is not None:
        out = out_dir or report_dir
        check_outputs(out, force)
        rep = build_report(report_dir, measured)
        _finish(rep, write_report(rep, out, force), as_json)
        return
    suite = load_suite(suite_ref)
    out = out_dir or DEFAULT_OUT
    if not do_prepare:
        missing = gpu_missing()
        if missing:
            raise ConfigError(f"{missing}; {split_hint(out)} (`pksim env` shows what this "
                              f"machine offers)")
        require("validate")                     # nvcc and the kernel sources, before a build
        check_outputs(out, force)
    elif not no_build:
        require("validate --prepare", "or give --no-build")
    if with_matrix and not do_prepare:
        raise ConfigError("--matrix only applies with --prepare")
    p = prepare(suite, out, system_ref, build=not no_build, force=force, command=_command(),
                matrix=with_matrix, gpu_memory_GB=gpu_memory)
    _say_prepared(p, as_json)
    if do_prepare:
        if as_json:
            emit_json(p.meta)
        else:
            click.echo(f"next, on the GPU machine: python -m validation.run.collectives --cases "
                       f"{out}/{CASES} --out {out}/{MEASURED}")
            if p.meta.get("fused"):
                click.echo(f"  and: python -m validation.run.fused --bundle {out}/{FUSED_DIR} "
                           f"--out {out}/{FUSED_MEASURED}")
            click.echo(f"then here: pksim validate --report {out}")
        return
    run_bundle(out, deadline_s)
    rep = build_report(out, measured)
    _finish(rep, write_report(rep, out, force), as_json)


def _published(out: Path | None, force: bool, write_docs: bool, as_json: bool) -> None:
    """``--published``: the corpus judged, a summary, the pages written."""
    if write_docs and out is not None:
        raise ConfigError("--write-docs writes docs/validation: give it or -o DIR, not both")
    target = DOCS_DIR if write_docs else (out or Path("pksim-out/published"))
    reports = judge()
    vs = versus()
    files = write_pages(reports, target, force or write_docs, vs)
    if as_json:
        emit_json(as_dict(reports, vs) | {"files": [str(f) for f in files]})
        return
    rows = [HEADER] + summary_rows(reports)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in reports:
        for c in r.curves:
            miss = miss_reason(c)
            if miss:
                click.echo(f"  miss: {r.name} / {c.label}: {miss}")
        bad = [p for p in r.picks if not p.match]
        for p in bad:
            click.echo(f"  pick: {r.name}: {p.coll} {p.bytes} B logged {p.logged}, "
                       f"model {p.model}")
    for v in vs:
        d = v["difference_parts"]
        click.echo(f"  pk vs NCCL: {v['system']} all-reduce {v['size_bytes'] >> 20} MiB: "
                   f"{v['pk']['label']} ({v['pk']['busiest_resource']}) "
                   f"{v['pk']['time_s'] * 1e6:.1f} us, {v['nccl']['label']} "
                   f"({v['nccl']['busiest_resource']}) {v['nccl']['time_s'] * 1e6:.1f} us; "
                   f"{'same' if v['same_busiest_group'] else 'DIFFERENT'} busiest resource; pk - NCCL: "
                   + ", ".join(f"{k.removesuffix('_s')} {x * 1e6:+.1f}" for k, x in d.items())
                   + " us")
    click.echo(f"  wrote {files[0]} and {len(files) - 1} plots")


_ASK = {  # option: (prompt, choices)
    "system": ("System (e.g. '8x H100 SXM, one NVSwitch node')", None),
    "source": ("Source (URL, repo + commit, or who ran it and when)", None),
    "nccl_version": ("NCCL version", None),
    "launch": ("Launch mode", MODES[:2]),
    "processes": ("Processes", PROCESSES[:2]),
    "nvls": ("NVLS", NVLS[:3]),
    "op": ("Collective", None),
}


def _add(log: Path | None, tuning: Path | None, out: Path | None, force: bool, as_json: bool,
         given: dict) -> None:
    """``--published --add``: a corpus entry from the user's nccl-tests output."""
    if log is None:
        raise ConfigError("--tuning needs --add LOG (the nccl-tests output of the same run)")
    if out is None:
        raise ConfigError("--published --add needs -o FILE.toml (the entry to write)")
    if out.exists() and not force:
        raise ConfigError(f"{out} exists (give --force to overwrite it)")
    run = parse_nccl_tests(read_text(log), str(log))
    tuning_log = parse_tuning(read_text(tuning), str(tuning)) if tuning else None
    known = {"nccl_version": run.nccl_version, "launch": run.launch_mode,
             "processes": run.processes, "op": run.op}
    values = {k: v for k, v in given.items() if v is not None}
    for key, value in known.items():
        values.setdefault(key, value)
    values = {k: v for k, v in values.items() if v is not None}
    values.setdefault("name", out.stem)
    interactive = sys.stdin is not None and sys.stdin.isatty()
    for key, (prompt, choices) in _ASK.items():
        if key in values:
            continue
        option = "--" + key.replace("_", "-")
        if not interactive:
            raise ConfigError(f"{log}: the log does not give {key.replace('_', ' ')}: "
                              f"give {option}")
        values[key] = click.prompt(prompt, type=click.Choice(choices) if choices else str,
                                   err=True)
    meta = EntryMeta(**{k: values[k] for k in ("name", "system", "source", "nccl_version",
                                              "launch", "processes", "nvls", "op")})
    entry = write_entry(entry_text(run, meta, tuning_log, log.name), out, force)
    if as_json:
        emit_json({"file": str(out), "name": entry.name, "rows": len(run.rows),
                   "tuning_choices": len(tuning_log.choices) if tuning_log else 0})
        return
    click.echo(f"wrote {out}: {entry.name}, {meta.op}, {len(run.rows)} sizes"
               f"{f', {len(tuning_log.choices)} tuner picks' if tuning_log else ''}")


def _ported(suite_ref: str, profile_ref: str, system_ref: str | None, measured, out: Path | None,
            kind: str, force: bool, as_json: bool) -> None:
    """``--ported PROFILE``: the suite on --system with PROFILE, judged on --measured."""
    if system_ref is None or out is None:
        raise ConfigError("--ported needs --system TARGET (the GPU's system, e.g. h100-virtual) "
                          "and -o DIR")
    check_outputs(out, force)
    rep, port = ported(load_suite(suite_ref), out, profile_ref, system_ref, list(measured), kind,
                       force, _command())
    files = write_report(rep, out, force)
    path = out / "ported.json"
    path.write_text(json.dumps(port, indent=1) + "\n")
    files.append(path)
    if as_json:
        emit_json(rep["summary"] | {"ported": port, "files": [str(f) for f in files]})
        return
    click.echo(f"ported: profile {port['profile']} (fitted on {port['profile_fitted_on']}) on "
               f"{port['system']} ({port['system_model']}), measured on "
               f"{port['measured_device'] or '?'}; {port['note']}")
    for key, t in port["targets"].items():
        shown = (f"{t['value']} of {t['of']} (target {t['target']})" if "of" in t else
                 f"{fmt_abs_pct(t['value'])} (target {fmt_abs_pct(t['target'])})")
        click.echo(f"  {port['targets_kind']} {key}: {shown}: {'met' if t['met'] else 'MISSED'}")
    for c in port["culprits"] if not port["targets_met"] else ():
        click.echo(f"  worst: {c['kernel']}: median {fmt_pct(c['median_error'])}, bound by "
                   f"{c['bound']}: {c['figure']}")
    _finish(rep, files, False)


def _finish(rep: dict, files: list[Path], as_json: bool) -> None:
    s = rep["summary"]
    if as_json:
        emit_json(s | {"files": [str(f) for f in files]})
        return
    parts = [("collectives", s, rep["kernels"], "algorithm")] if s["cases"] else []
    if rep.get("fused"):
        parts.append(("fused", rep["fused"]["summary"], rep["fused"]["kernels"], "overlap"))
    ok = {True: "met", False: "MISSED"}
    for name, p, kernels, second in parts:
        t = p["targets"]
        click.echo(f"{p['suite']} {name} on {p['device'] or '?'}: {p['compared']} of "
                   f"{p['cases']} cases compared ({p['not_predicted']} not predicted, "
                   f"{p['failed']} failed, {p['not_measured']} not measured)")
        click.echo(f"  median |error| {fmt_abs_pct(p.get('median_abs_error'))} (target 10 %: "
                   f"{ok[t['median_abs_error']['met']]}), max "
                   f"{fmt_abs_pct(p.get('max_abs_error'))} (target 25 %: "
                   f"{ok[t['max_abs_error']['met']]})")
        click.echo(f"  ranking: first choice fastest in {p['ranking_hits']} of "
                   f"{p['groups_ranked']} groups, worst regret {fmt_pct(p['max_regret'])} "
                   f"(target 5 %: {ok[t['regret']['met']]})")
        if p.get("vs_none_compared"):
            click.echo(f"  fused vs none: faster than none in {p['fused_faster_measured']} of "
                       f"{p['vs_none_compared']} measured, {p['fused_faster_predicted']} "
                       f"predicted; same side of none in {p['vs_none_agree']}")
        for k in kernels[:5]:
            if k["max_abs_error"] > 0.25 or k["median_abs_error"] > 0.10:
                click.echo(f"  miss: {k['op']} {k[second]}/{k['mechanism']}: median "
                           f"{fmt_pct(k['median_error'])}, max |error| "
                           f"{fmt_abs_pct(k['max_abs_error'])} (bound: {k['bound_resource']})")
    for f in files:
        click.echo(f"  wrote {f}")


__all__ = ["validate"]
