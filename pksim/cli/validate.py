"""``pksim validate``: build, run, check, time and predict the generated collectives of a
suite, and report predicted against measured. The work is in ``validation.validate``
(prepare, run) and ``validation.validate_report`` (report); this module is the thin CLI."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from hwmodels.errors import ConfigError
from pksim.cli.output import emit_json

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
@click.option("--measured", "measured", default=None, type=click.Path(dir_okay=False,
              path_type=Path), help="Measurements to report [default: DIR/measured.jsonl].")
@click.option("--no-build", is_flag=True, help="With --prepare: emit sources, skip nvcc.")
@click.option("--deadline-s", type=float, default=1800.0, show_default=True,
              help="Wall-clock limit of the GPU run (cases left are reported not measured).")
@click.option("--force", is_flag=True,
              help="Overwrite an existing bundle or report (DIR/measured.jsonl is kept: the "
                   "GPU run resumes from it; delete it to measure again).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def validate(suite_ref: str, system_ref: str | None, out_dir: Path | None, do_prepare: bool,
             report_dir: Path | None, measured: Path | None, no_build: bool, deadline_s: float,
             force: bool, as_json: bool) -> None:
    """Judge the model on whole generated collectives: predicted vs measured.

    \b
    In one go (this machine has the GPU, nvcc and the simulator):
      pksim validate [--suite default|FILE] [--system CALIBRATED.toml] [-o DIR]
    Split (simulator and nvcc here, GPU elsewhere):
      pksim validate --prepare -o DIR        # emit, build, predict: DIR/cases.json
      python -m validation.run_collectives --cases DIR/cases.json --out DIR/measured.jsonl
      pksim validate --report DIR            # report.json, report.md, scatter.png

    Every candidate schedule (algorithm x mechanism x blocks per rank) of every (op, size,
    world) of the suite is built, run as virtual ranks on one GPU, checked against torch,
    timed (median, cold L2) and predicted on the calibrated system. The report gives each
    case's error, the median and max |error| (targets 10 % and 25 %), whether the
    simulator's first choice was the measured fastest and by how much it lost (target 5 %),
    and, where a target is missed, the worst cases by (op, algorithm, mechanism). Cases the
    simulator cannot predict are listed as such. These kernels are never calibration inputs."""
    from validation import validate_report as vr
    from validation import validate as vv

    if do_prepare and report_dir is not None:
        raise ConfigError("--prepare and --report are two halves of a split run: give one")
    if no_build and not do_prepare:
        raise ConfigError("--no-build only applies with --prepare (a run needs the libraries)")
    if report_dir is not None:
        out = out_dir or report_dir
        vr.check_outputs(out, force)
        rep = vr.build_report(report_dir, measured)
        _finish(rep, vr.write_report(rep, out, force), as_json)
        return
    from validation.suite import load_suite
    suite = load_suite(suite_ref)
    out = out_dir or DEFAULT_OUT
    if not do_prepare:
        missing = vv.gpu_missing()
        if missing:
            raise ConfigError(f"{missing}; {vv.split_hint(out)}")
        vr.check_outputs(out, force)
    p = vv.prepare(suite, out, system_ref, build=not no_build, force=force, command=_command())
    _say_prepared(p, as_json)
    if do_prepare:
        if as_json:
            emit_json(p.meta)
        else:
            click.echo(f"next, on the GPU machine: python -m validation.run_collectives --cases "
                       f"{out}/{vv.CASES} --out {out}/{vv.MEASURED}")
            click.echo(f"then here: pksim validate --report {out}")
        return
    vv.run_gpu(out, deadline_s)
    rep = vr.build_report(out, measured)
    _finish(rep, vr.write_report(rep, out, force), as_json)


def _finish(rep: dict, files: list[Path], as_json: bool) -> None:
    from validation.validate_report import fmt_abs_pct, fmt_pct
    s = rep["summary"]
    if as_json:
        emit_json(s | {"files": [str(f) for f in files]})
        return
    t = s["targets"]
    ok = {True: "met", False: "MISSED"}
    click.echo(f"{s['suite']} on {s['device'] or '?'}: {s['compared']} of {s['cases']} cases "
               f"compared ({s['not_predicted']} not predicted, {s['failed']} failed, "
               f"{s['not_measured']} not measured)")
    click.echo(f"  median |error| {fmt_abs_pct(s.get('median_abs_error'))} (target 10 %: "
               f"{ok[t['median_abs_error']['met']]}), max {fmt_abs_pct(s.get('max_abs_error'))}"
               f" (target 25 %: {ok[t['max_abs_error']['met']]})")
    click.echo(f"  ranking: first choice fastest in {s['ranking_hits']} of {s['groups_ranked']} "
               f"groups, worst regret {fmt_pct(s['max_regret'])} (target 5 %: "
               f"{ok[t['regret']['met']]})")
    for k in rep["kernels"][:5]:
        if k["max_abs_error"] > 0.25 or k["median_abs_error"] > 0.10:
            click.echo(f"  miss: {k['op']} {k['algorithm']}/{k['mechanism']}: median "
                       f"{fmt_pct(k['median_error'])}, max |error| "
                       f"{fmt_abs_pct(k['max_abs_error'])} (bound: {k['bound_resource']})")
    for f in files:
        click.echo(f"  wrote {f}")


__all__ = ["validate"]
