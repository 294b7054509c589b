"""``pksim calibrate``: measure the microbenchmarks on a GPU (or read saved results), fit
the model's parameters and write a calibrated system file that inherits the catalog
entry. The fit itself lives in ``validation.calibrate.fit``; this module is the thin CLI."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, ValidationError
from pksim.cli.output import emit_json, table
from validation.calibrate import fit as cal
from validation.calibrate.file import inherits_ref, render_toml, write_file
from validation.calibrate.microbench import failures, find_gpu, run_microbenchmarks
from validation.environment import require

OUT_DIR = Path("pksim-out") / "calibrated"


def _command(system_name: str, output: Path, from_json: tuple[Path, ...], device: int,
             quick: bool, partial: bool = False) -> str:
    """The command line that reproduces the file (recorded in it)."""
    parts = ["pksim calibrate"]
    parts += [f"--from-json {p}" for p in from_json] if from_json else [f"--device {device}"]
    if quick and not from_json:
        parts.append("--quick")
    if partial:
        parts.append("--partial")
    if system_name != "h200-single":
        parts.append(f"--system {system_name}")
    parts.append(f"-o {output}")
    return " ".join(parts)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


@click.command()
@click.option("--device", type=int, default=0, show_default=True,
              help="CUDA device to measure (ignored with --from-json).")
@click.option("--system", "system_name", default="h200-single", show_default=True,
              help="Catalog system (or system file) the fit starts from and the "
                   "calibrated file inherits.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Calibrated system file to write "
                   "[default: pksim-out/calibrated/<system>-calibrated.toml].")
@click.option("--from-json", "from_json", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True, help="Refit saved results (a microbench.json) instead of "
                                  "running the microbenchmarks; needs no GPU. Repeat it to "
                                  "fit the records of several runs together.")
@click.option("--results-out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory of the microbenchmark run; its microbench.json is rewritten "
                   "as results come [default: pksim-out/calibrated/<system>-microbench].")
@click.option("--python", "python", default=sys.executable, show_default="this interpreter",
              help="Interpreter for the torch benchmarks (GEMM, attention; needs torch).")
@click.option("--quick", is_flag=True, help="Smaller microbenchmark sweeps (a smoke test).")
@click.option("--partial", is_flag=True,
              help="When microbenchmarks fail, fit what was measured and record the missing "
                   "groups in the file ([calibration.missing]) instead of stopping.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
def calibrate(device: int, system_name: str, output: Path | None, from_json: tuple[Path, ...],
              results_out: Path | None, python: str, quick: bool, partial: bool, force: bool,
              as_json: bool) -> None:
    """Fit the model to microbenchmarks and write a calibrated system file.

    Without --from-json, runs validation/microbench/run.py on the GPU (progress shown,
    results saved as JSON as they come), then fits. The file inherits --system and
    records device, driver, date and each fit's residual. A microbenchmark that fails
    stops it with the list, writing nothing, unless --partial."""

    system = load_system(system_name)
    stem = Path(system.path).stem
    output = output or OUT_DIR / f"{stem}-calibrated.toml"
    if output.exists() and not force:
        raise ConfigError(f"{output}: already exists (use --force to overwrite it)")
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    missing: dict[str, str] = {}
    if from_json:
        results = cal.merge_results([cal.load_results(p) for p in from_json])
        results_ref = results.path
    else:
        gpu = find_gpu(device)
        require("calibrate", "refit saved results with --from-json RESULTS.json")
        say(f"measuring on {gpu}")
        run_dir = results_out or OUT_DIR / f"{stem}-microbench"
        status, path = run_microbenchmarks(run_dir, device, python, quick, say)
        missing = failures(path) if status != 0 else {}
        if status != 0 and not missing:
            missing = {"run.py": f"exit status {status}"}
        if missing and not partial:
            listed = "; ".join(f"{b}: {why}" for b, why in missing.items())
            raise ValidationError(f"{len(missing)} microbenchmark(s) failed, nothing written "
                                  f"({listed}); the logs: {run_dir}/logs; --partial fits "
                                  f"without them and records them in the file")
        if missing:
            say(f"--partial: fitting without {', '.join(missing)} (recorded in the file)")
        results = cal.load_results(path)
        results_ref = str(path)
    fitted = cal.fit(system, results)
    command = _command(system_name, output, from_json, device, quick, bool(missing))
    text = render_toml(fitted, results, inherits_ref(system, system_name, output),
                       output.stem, command, results_ref, missing)
    write_file(output, text, force)
    try:
        load_system(str(output))
    except ConfigError as exc:                      # a bug here, not the user's input
        raise ValidationError(f"the calibrated file does not load: {exc}") from None

    if as_json:
        emit_json({
            "output": str(output), "inherits": system.name, "device": results.device_name,
            "driver": results.driver, "date": results.day, "results": results_ref,
            "missing": missing,
            "figures": {k: {"value": v, "was": cal.get_figure(system, k),
                            "stage": fitted.stage_of[k]} for k, v in fitted.values.items()},
            "groups": {b: {"points": s.points, "predicted": s.predicted,
                           "median_abs_error": s.median_abs_error,
                           "max_abs_error": s.max_abs_error, "rms_log_error": s.rms_log_error,
                           "note": s.note} for b, s in fitted.summary.items()},
        })
        return
    table(f"fitted figures ({results.device_name}, driver {results.driver}, {results.day})",
          ["figure", "calibrated", f"{system.name}", "stage"],
          [[k, f"{v:.4g}", f"{cal.get_figure(system, k):.4g}", fitted.stage_of[k]]
           for k, v in fitted.values.items()])
    table("prediction vs measurement per microbenchmark",
          ["benchmark", "points", "median |error|", "max |error|"],
          [[b, s.points, _pct(s.median_abs_error), _pct(s.max_abs_error) if s.predicted
            else "measured only"] for b, s in fitted.summary.items()])
    click.echo(f"wrote {output}")
