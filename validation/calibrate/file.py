"""The calibrated system file: its text, its parent reference, and writing it safely.

``render_toml`` writes a file that inherits the system the fit started from, says
``calibrated = {device, date, driver}``, keeps each group's residual under
``[calibration]`` and gives every fitted figure the source "pksim calibrate on
<device>, driver <driver>, <date>, fit residual ..." and the provenance "calibrated".
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hwmodels.catalog import SYSTEMS_DIR
from hwmodels.errors import ConfigError
from hwmodels.system import System
from validation.calibrate.fit import FitResult, Results


# ---- the calibrated file ------------------------------------------------------------------
# what a stage fitted relative to twins (fit.Stage.twin: the shifted moves, D63) adds to its source
RELATIVE = ", each as its time over its aligned twin's"

def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)         # a valid TOML basic string


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def identity_lines(name: str, description: str, inherits: str, dev: str, day: str, drv: str,
                   command: str, results_ref: str, results_date: str, method: str) -> list[str]:
    """A calibrated file's name, parent, device and [calibration] table (its command, results
    and fitting method), as every calibrated file starts."""
    return [
        f"name = {_q(name)}",
        f"description = {_q(description)}",
        f"inherits = {_q(inherits)}",
        f"calibrated = {{ device = {_q(dev)}, date = {_q(day)}, driver = {_q(drv)} }}",
        "",
        "[calibration]",
        f"command = {_q(command)}",
        f"results = {_q(results_ref)}",
        f"results_date = {_q(results_date)}",
        f"method = {_q(method)}",
        "",
    ]


def render_toml(fit_result: FitResult, results: Results, inherits: str, name: str,
                command: str, results_ref: str, missing: dict[str, str] | None = None) -> str:
    """The text of a calibrated system file; ``missing`` (``calibrate --partial``): the
    microbenchmark groups that failed, recorded under ``[calibration.missing]``."""
    dev, drv, day = results.device_name, results.driver, results.day
    lines = [
        f"# Calibrated on {dev} (driver {drv}) on {day}, written by:",
        f"#   {command}",
        f"# Fitted figures only; everything else is inherited from {inherits}.",
        "# Regenerate with the command above; the fit and its residuals: docs/VALIDATION.md.",
        *identity_lines(name, f"{dev} as calibrated by pksim calibrate on {day} from the "
                        f"microbenchmarks (inherits {inherits})", inherits, dev, day, drv,
                        command, results_ref, results.date,
                        "scipy.optimize.least_squares on log(predicted / measured time) of "
                        "pksim.microbench_model, stage by stage, soft-L1 loss (scale 0.05), "
                        "groups weighted equally"),
    ]
    for stage in fit_result.stages:
        for group in stage.groups:
            s = fit_result.summary[group]
            lines += [f"[calibration.residual.{group}]",
                      f"points = {s.predicted}",
                      f"median_abs_error = {_num(round(s.median_abs_error, 4))}",
                      f"max_abs_error = {_num(round(s.max_abs_error, 4))}",
                      f"rms_log_error = {_num(round(s.rms_log_error, 4))}",
                      f"stage = {_q(stage.name)}",
                      f"fitted = [{', '.join(_q(k) for k in stage.params)}]", ""]
    if missing:
        lines.append("[calibration.missing]   # failed microbenchmarks: fitted without them")
        lines += [f"{b} = {_q(why)}" for b, why in sorted(missing.items())]
        lines.append("")
    measured_only = [s for s in fit_result.summary.values() if s.predicted == 0]
    if measured_only:
        lines.append("[calibration.measured_only]")
        lines += [f"{s.bench} = {_q(s.note)}" for s in measured_only]
        lines.append("")
    by_stage = {s.name: s for s in fit_result.stages}
    tables: dict[str, list[str]] = {}
    for key, value in fit_result.values.items():
        table, figure = key.rsplit(".", 1)
        stage = by_stage[fit_result.stage_of[key]]
        source = (f"pksim calibrate on {dev}, driver {drv}, {day}, fit residual "
                  f"{_pct(stage.median_abs_error)} median |error| (max {_pct(stage.max_abs_error)}) "
                  f"over {' + '.join(stage.groups)} ({stage.points} points{RELATIVE * stage.relative})")
        tables.setdefault(table, []).append(
            f"{figure} = {{ value = {_num(value)}, source = {_q(source)}, provenance = \"calibrated\" }}")
    for table in sorted(tables):
        lines += [f"[{table}]", *tables[table], ""]
    return "\n".join(lines).rstrip() + "\n"


def inherits_ref(system: System, system_arg: str, out_path: Path) -> str:
    """How the calibrated file names its parent: the catalog name, or a relative path."""
    parent = Path(system.path).resolve()
    if parent.parent == SYSTEMS_DIR.resolve():
        return parent.stem
    return os.path.relpath(parent, out_path.resolve().parent)


def write_file(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path``; never over a user's file without ``force``."""
    if path.exists() and not force:
        raise ConfigError(f"{path}: already exists (use --force to overwrite it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
