"""The calibrated system file: its text, its parent reference, and writing it safely.

``render_toml`` writes a file that inherits the system the fit started from, says
``calibrated = {device, date, driver}``, keeps each group's residual under
``[calibration]`` and gives every fitted figure the source "pksim calibrate on
<device>, driver <driver>, <date>, fit residual ..." and the provenance "calibrated".
It holds the hardware's figures only; ``render_profile`` writes the fitted figures of our
kernels' own routines (``gpu.kernel.*``) as a kernel profile (hwmodels.profile), in cycles,
sectors, shares and bytes, converted exactly with the fitted GPU's clock, which the system
file names (``profile = { name = ..., why = ... }``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hwmodels import profile as kernel_profile
from hwmodels.catalog import SYSTEMS_DIR
from hwmodels.errors import ConfigError
from hwmodels.system import System
from validation.calibrate.fit import FitResult, Results

KERNEL = "gpu.kernel."            # the fit's keys of kernel-profile figures
METHOD = ("scipy.optimize.least_squares on log(predicted / measured time) of "
          "pksim_core.microbench_model, stage by stage, soft-L1 loss (scale 0.05), groups weighted "
          "equally")


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
                   command: str, results_ref: str, results_date: str, method: str,
                   profile: tuple[str, str] | None = None) -> list[str]:
    """A calibrated file's name, parent, device, kernel profile (``profile``: its name or
    path and why it applies, if the file names one) and [calibration] table (its command,
    results and fitting method), as every calibrated file starts."""
    named = ([f"profile = {{ name = {_q(profile[0])}, why = {_q(profile[1])} }}"]
             if profile else [])
    return [
        f"name = {_q(name)}",
        f"description = {_q(description)}",
        f"inherits = {_q(inherits)}",
        f"calibrated = {{ device = {_q(dev)}, date = {_q(day)}, driver = {_q(drv)} }}",
        *named,
        "",
        "[calibration]",
        f"command = {_q(command)}",
        f"results = {_q(results_ref)}",
        f"results_date = {_q(results_date)}",
        f"method = {_q(method)}",
        "",
    ]


def _source(stage, dev: str, drv: str, day: str) -> str:
    """A fitted figure's source: the device, the date and its stage's residual."""
    return (f"pksim calibrate on {dev}, driver {drv}, {day}, fit residual "
            f"{_pct(stage.median_abs_error)} median |error| (max {_pct(stage.max_abs_error)}) "
            f"over {' + '.join(stage.groups)} ({stage.points} points{RELATIVE * stage.relative})")


def _residual_lines(fit_result: FitResult, kernel: bool) -> list[str]:
    """``[calibration.residual.GROUP]`` of the stages that fitted hardware figures
    (``kernel`` False) or kernel-profile figures (True): a stage that fitted both (the
    collective moves: the kernels' routines and a moving kernel's start) goes in both files."""
    fitted: dict[str, tuple[list[str], list[str]]] = {}   # group: (its stages, their figures)
    for stage in fit_result.stages:
        if not any(k.startswith(KERNEL) is kernel for k in stage.params):
            continue
        for group in stage.groups:     # a group two stages fit (D83) is written once
            names, keys = fitted.setdefault(group, ([], []))
            names.append(stage.name)
            keys += stage.params
    lines: list[str] = []
    for group, (names, keys) in fitted.items():
        s = fit_result.summary[group]
        lines += [f"[calibration.residual.{group}]",
                  f"points = {s.predicted}",
                  f"median_abs_error = {_num(round(s.median_abs_error, 4))}",
                  f"max_abs_error = {_num(round(s.max_abs_error, 4))}",
                  f"rms_log_error = {_num(round(s.rms_log_error, 4))}",
                  f"stage = {_q(' + '.join(names))}",
                  f"fitted = [{', '.join(_q(k) for k in keys)}]", ""]
    return lines


def render_toml(fit_result: FitResult, results: Results, inherits: str, name: str,
                command: str, results_ref: str, missing: dict[str, str] | None = None,
                profile: tuple[str, str] | None = None,
                device: dict[str, list[str]] | None = None, left_out: int = 0) -> str:
    """The text of a calibrated system file: the fitted hardware figures; ``profile`` (the
    kernel profile written beside it by ``render_profile``: its name or path, and why) is
    the profile it names; ``missing`` (``calibrate --partial``): the microbenchmark groups
    that failed, recorded under ``[calibration.missing]``; ``device``: the device's own
    figures by table (validation.calibrate.device.figure_lines); ``left_out``: how many points
    on a validation suite's (size, world) the fit left out (said in [calibration] method)."""
    dev, drv, day = results.device_name, results.driver, results.day
    method = METHOD + (f"; {left_out} points on a validation suite's size and world left out "
                       f"(validation/calibrate/disjoint.py)" if left_out else "")
    lines = [
        f"# Calibrated on {dev} (driver {drv}) on {day}, written by:",
        f"#   {command}",
        f"# Fitted hardware figures only; everything else is inherited from {inherits}"
        + (f", our kernels' own figures are the kernel profile {profile[0]}." if profile
           else "."),
        "# Regenerate with the command above; the fit and its residuals: docs/VALIDATION.md.",
        *identity_lines(name, f"{dev} as calibrated by pksim calibrate on {day} from the "
                        f"microbenchmarks (inherits {inherits})", inherits, dev, day, drv,
                        command, results_ref, results.date, method, profile),
        *_residual_lines(fit_result, kernel=False),
    ]
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
    tables: dict[str, list[str]] = {t: list(rows) for t, rows in (device or {}).items()}
    for key, value in fit_result.values.items():
        if key.startswith(KERNEL):
            continue
        table, figure = key.rsplit(".", 1)
        source = _source(by_stage[fit_result.stage_of[key]], dev, drv, day)
        tables.setdefault(table, []).append(
            f"{figure} = {{ value = {_num(value)}, source = {_q(source)}, provenance = \"calibrated\" }}")
    for table in sorted(tables):
        lines += [f"[{table}]", *tables[table], ""]
    return "\n".join(lines).rstrip() + "\n"


def render_profile(fit_result: FitResult, results: Results, name: str, system_name: str,
                   base: kernel_profile.Profile, command: str, results_ref: str,
                   kernels: str | None = None) -> str:
    """The text of the kernel profile fitted with a calibration: every fitted ``gpu.kernel``
    figure in the profile's portable unit, converted exactly with the fitted GPU's clock
    (``hwmodels.profile.portable_value``), its source the stage's residual and the one-GPU
    value it came from; the figures no stage fitted are ``base``'s (the profile the fit
    started from), with their sources. ``system_name``: the calibrated system file it goes
    with; ``kernels``: the kernel generation it describes (default ``base``'s)."""
    dev, drv, day = results.device_name, results.driver, results.day
    gpu = fit_result.system.gpu
    by_stage = {s.name: s for s in fit_result.stages}
    lines = [
        f"# Kernel profile fitted on {dev} (driver {drv}) on {day}, written by:",
        f"#   {command}",
        "# Our kernels' own routines in cycles, L2 sectors, shares and bytes (hwmodels.profile);",
        f"# the hardware they ran on: {system_name}. Figures no stage fitted come from "
        f"{base.name}.",
        f"name = {_q(name)}",
        f"description = {_q(f'the generated kernels routines on {base.architecture} as fitted on {dev} on {day} by pksim calibrate (the rest from {base.name})')}",
        f"architecture = {_q(base.architecture)}",
        f"kernels = {_q(kernels or base.kernels)}",
        f"fitted_on = {{ system = {_q(system_name)}, device = {_q(dev)}, date = {_q(day)}, "
        f"driver = {_q(drv)}, clock_MHz = {_num(gpu.sm.clock_Hz / 1e6)}, "
        f"nvlink_latency_ns = {_num(gpu.nvlink.latency_s / 1e-9)} }}",
        f"conversion = {_q(kernel_profile.conversion_text(gpu))}",
        "",
        "[calibration]",
        f"command = {_q(command)}",
        f"results = {_q(results_ref)}",
        f"results_date = {_q(results.date)}",
        f"method = {_q(METHOD)}",
        "",
        *_residual_lines(fit_result, kernel=True),
    ]
    tables: dict[str, list[str]] = {t: [] for t in kernel_profile.TABLES}
    for key, f in kernel_profile.FIELDS.items():
        meta = f.metadata
        fitted = KERNEL + meta["key"]
        if fitted in fit_result.values:
            local = fit_result.values[fitted]
            value = kernel_profile.portable_value(meta, local, gpu)
            source = (f"{_source(by_stage[fit_result.stage_of[fitted]], dev, drv, day)}: "
                      f"{_num(local)} {_unit(meta['key'])} on it")
            tag = "calibrated"
        else:
            value, given = base.values[key], base.provenance[key]
            source, tag = f"{base.name}: {given.source}", given.tag
        tables[meta["table"]].append(
            f"{key} = {{ value = {_num(value)}, source = {_q(source)}, provenance = {_q(tag)} }}")
    for table, rows in tables.items():
        lines += [f"[{table}]", *rows, ""]
    return "\n".join(lines).rstrip() + "\n"


def _unit(local_key: str) -> str:
    """The unit a one-GPU key names ('ns_per_KiB' -> 'ns per KiB')."""
    for unit in ("ns_per_KiB", "ps_per_element", "ns", "ps", "GBps", "MiB"):
        if local_key.endswith("_" + unit):
            return unit.replace("_per_", " per ")
    return "(no unit)"


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
