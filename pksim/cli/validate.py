"""``pksim validate``: build, run, check, time and predict the generated collectives and
fused GEMM + communication kernels of a suite, and report predicted against measured. The
work is in ``validation.prepare.bundle`` (prepare, run) and ``validation.report.data``
(report); this module is the thin CLI."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from hwmodels.errors import ConfigError
from pksim.cli.output import emit_json
from validation.layout import (CASES, FUSED_DIR, FUSED_MEASURED, MEASURED, gpu_missing,
                               split_hint)
from validation.prepare.bundle import prepare
from validation.report.data import build_report
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
    say(f"  estimated GPU time: {m['estimated_gpu_s']:.0f} s (from the predicted times; "
        f"measured ones may be several times longer)")


@click.command()
@click.option("--suite", "suite_ref", default="default", show_default=True, metavar="NAME|FILE",
              help="Shipped suite (default, quick) or a suite .toml file.")
@click.option("--system", "system_ref", default=None, metavar="NAME|FILE",
              help="System the predictions use [default: the suite's, h200-virtual-calibrated].")
@click.option("-o", "--out", "out_dir", default=None, type=click.Path(file_okay=False,
              path_type=Path), help=f"Bundle / report directory [default: {DEFAULT_OUT}; "
              "with --report: the bundle itself].")
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
@click.option("--deadline-s", type=float, default=1800.0, show_default=True,
              help="Wall-clock limit of the GPU run (cases left are reported not measured).")
@click.option("--force", is_flag=True,
              help="Overwrite an existing bundle or report (DIR/measured.jsonl is kept: the "
                   "GPU run resumes from it; delete it to measure again).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def validate(suite_ref: str, system_ref: str | None, out_dir: Path | None, do_prepare: bool,
             report_dir: Path | None, measured: tuple[Path, ...], no_build: bool,
             with_matrix: bool, deadline_s: float,
             force: bool, as_json: bool) -> None:
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
    never calibration inputs."""
    if do_prepare and report_dir is not None:
        raise ConfigError("--prepare and --report are two halves of a split run: give one")
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
            raise ConfigError(f"{missing}; {split_hint(out)}")
        check_outputs(out, force)
    if with_matrix and not do_prepare:
        raise ConfigError("--matrix only applies with --prepare")
    p = prepare(suite, out, system_ref, build=not no_build, force=force, command=_command(),
                   matrix=with_matrix)
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
