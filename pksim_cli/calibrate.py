"""``pksim calibrate``: measure the microbenchmarks on a GPU (or read saved results), fit
the model's parameters and write a calibrated system file that inherits the catalog
entry. The fit itself lives in ``validation.calibrate.fit``; this module is the thin CLI."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import click

from hwmodels import profile as kernel_profile
from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, ValidationError
from hwmodels.resources import profiles_dir
from pksim_cli.output import emit_json, table
from validation.calibrate import fit as cal
from validation.calibrate import ranks as peer
from validation.calibrate.device import figure_lines, from_record, start_system
from validation.calibrate.device import probe as probe_device
from validation.calibrate.disjoint import suite_records
from validation.calibrate.file import inherits_ref, render_profile, render_toml, write_file
from pksim_core.plots import check_writable
from validation.calibrate.microbench import failures, find_gpu, run_microbenchmarks
from validation.environment import require

OUT_DIR = Path("pksim-out") / "calibrated"


# The hardware primitives alone (``--hardware-only``): copies by SMs, TMA and copy engines,
# TMA reductions, launches, copy bursts and flags; not our kernels' routines (the kernel
# profile's block_moves, epilogue_moves, fused_pull), nor the GEMMs.
HARDWARE_BENCHES = ("hbm_copy", "sm_copy", "tma_copy", "tma_reduce", "launch_latency",
                    "flag_latency")
HARDWARE_GROUPS = HARDWARE_BENCHES + ("ce_burst",)      # launch_latency's copy bursts
HARDWARE_BUDGET_S = 90.0


def _command(system_name: str | None, output: Path, from_json: tuple[Path, ...], device: int,
             quick: bool, partial: bool = False, profile_out: Path | None = None,
             hardware_only: bool = False, suite_points: bool = False) -> str:
    """The command line that reproduces the files (recorded in them)."""
    parts = ["pksim calibrate"]
    parts += [f"--from-json {p}" for p in from_json] if from_json else [f"--device {device}"]
    if quick and not from_json:
        parts.append("--quick")
    if partial:
        parts.append("--partial")
    if hardware_only:
        parts.append("--hardware-only")
    if suite_points:
        parts.append("--with-suite-points")
    if system_name is not None:
        parts.append(f"--system {system_name}")
    parts.append(f"-o {output}")
    if profile_out is not None:
        parts.append(f"--profile-out {profile_out}")
    return " ".join(parts)


def profile_target(output: Path, profile_out: Path | None) -> tuple[Path, str]:
    """Where the fitted kernel profile goes and how the calibrated file names it: beside the
    file (``<stem>.profile.toml``, named by its relative path) unless ``--profile-out``; a
    profile written into the shipped profiles' folder is named by its stem."""
    path = profile_out or output.with_name(f"{output.stem}.profile.toml")
    if path.resolve().parent == profiles_dir().resolve():
        return path, path.stem
    return path, "./" + os.path.relpath(path.resolve(), output.resolve().parent)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


@click.command()
@click.option("--device", type=int, default=0, show_default=True,
              help="CUDA device to measure (ignored with --from-json).")
@click.option("--system", "system_name", default=None,
              help="Catalog system (or system file) the fit starts from and the calibrated "
                   "file inherits [default: the one-GPU catalog system of the GPU measured; "
                   "refused if it describes another GPU].")
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
@click.option("--ranks", type=int, default=None, metavar="N",
              help="Measure the remote path instead: N processes read, write and reduce "
                   "into each other's buffers (CUDA IPC) per mechanism, SMs and size, and "
                   "the file gets gpu.transfer_remote. On one GPU all N share it: the "
                   "local path, which the file says.")
@click.option("--launcher", default=None, metavar="CMD",
              help="With --ranks: the command that starts N processes of what follows it "
                   f"[default: {peer.DEFAULT_LAUNCHER}].")
@click.option("--profile-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Kernel profile to write: the fitted figures of our kernels' own routines, "
                   "in cycles, which the calibrated file names [default: beside it, "
                   "<output stem>.profile.toml].")
@click.option("--hardware-only", is_flag=True,
              help=f"Measure and fit the hardware's primitives only ({', '.join(HARDWARE_BENCHES)}; "
                   f"at most {HARDWARE_BUDGET_S:g} s of GPU time): what to run first on a new GPU. "
                   "The kernel profile stays the one the rule gives (docs/design.md).")
@click.option("--with-suite-points", "suite_points", is_flag=True,
              help="Fit also the microbenchmark points that sit on a validation suite's (size, "
                   "world) [default: left out; the shipped H200 fit predates the rule].")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON.")
def calibrate(device: int, system_name: str | None, output: Path | None,
              from_json: tuple[Path, ...], results_out: Path | None, python: str, quick: bool,
              partial: bool, ranks: int | None, launcher: str | None, force: bool, as_json: bool,
              profile_out: Path | None = None, hardware_only: bool = False,
              suite_points: bool = False) -> None:
    """Fit the model to microbenchmarks and write a calibrated system file.

    Without --from-json, runs validation/microbench/run.py on the GPU (progress shown,
    results saved as JSON as they come), then fits. The file inherits --system and
    records device, driver, date and each fit's residual. A microbenchmark that fails
    stops it with the list, writing nothing, unless --partial."""

    if ranks is not None:
        name = system_name or "h200-single"
        _calibrate_ranks(load_system(name), name, ranks, output, from_json, results_out,
                         device, quick, launcher, partial, force, as_json)
        return
    if launcher is not None:
        raise ConfigError("--launcher only applies with --ranks N")
    results = None
    if system_name is not None:
        load_system(system_name)                  # a --system that does not load: said first
    if from_json:
        results = cal.merge_results([cal.load_results(p) for p in from_json])
        facts = from_record(results.device, results.path)
    else:
        gpu = find_gpu(device)
        facts = probe_device(device, python)
    start = start_system(facts, system_name)      # the catalog GPU it is, or refused
    system = load_system(start)
    stem = Path(system.path).stem
    output = output or OUT_DIR / f"{stem}-calibrated.toml"
    profile_path, profile_ref = profile_target(output, profile_out)
    for path in (output, profile_path):
        if path.exists() and not force:
            raise ConfigError(f"{path}: already exists (use --force to overwrite it)")
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    missing: dict[str, str] = {}
    if results is not None:
        results_ref = results.path
    else:
        require("calibrate", "refit saved results with --from-json RESULTS.json")
        say(f"measuring on {gpu}: {facts.describe()}, starting from {start}")
        run_dir = results_out or OUT_DIR / f"{stem}-microbench"
        hardware = (HARDWARE_BENCHES, HARDWARE_BUDGET_S) if hardware_only else ((), None)
        status, path = run_microbenchmarks(run_dir, device, python, quick, say, *hardware)
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
    if hardware_only:          # what --hardware-only measures, also from saved results
        results = dataclasses.replace(results, records=tuple(
            r for r in results.records if r["bench"] in HARDWARE_GROUPS))
    left_out = [] if suite_points else suite_records(results.records)
    if left_out:
        say(f"left out of the fit: {len(left_out)} points on a validation suite's (size, world) "
            f"(--with-suite-points fits them)")
    fitted = cal.fit(system, results, cal.HARDWARE_STAGES if hardware_only else cal.STAGES,
                     exclude=left_out)
    command = _command(system_name, output, from_json, device, quick, bool(missing),
                       profile_out, hardware_only, suite_points)
    kernel = any(k.startswith("gpu.kernel.") for k in fitted.values)
    if kernel:          # the fitted routines of our kernels: a kernel profile of their own
        base = kernel_profile.load_profile(system.profile.path)
        write_file(profile_path, render_profile(
            fitted, results, profile_path.stem if profile_ref == profile_path.stem
            else f"{output.stem}-profile", output.stem, base, command, results_ref), force)
    text = render_toml(fitted, results, inherits_ref(system, start, output),
                       output.stem, command, results_ref, missing,
                       (profile_ref, "fitted on this GPU from the same microbenchmarks as this "
                                     "file (the [calibration] command); docs/design.md, "
                                     "kernel profiles, rule P0") if kernel else None,
                       figure_lines(facts), len(left_out))
    _write_loadable(output, text, force)

    if as_json:
        emit_json({
            "output": str(output), "profile": str(profile_path) if kernel else None,
            "inherits": system.name, "device": results.device_name,
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
    click.echo(f"wrote {output}" + (f" and {profile_path}" if kernel else ""))


def _calibrate_ranks(system, system_name: str, n: int, output: Path | None,
                     from_json: tuple[Path, ...], results_out: Path | None, device: int,
                     quick: bool, launcher: str | None, partial: bool, force: bool,
                     as_json: bool) -> None:
    """``--ranks N``: the remote-path figures from N processes (validation.calibrate.ranks)."""
    if n < 2:
        raise ConfigError(f"--ranks {n}: peers need at least 2 ranks")
    if partial:
        raise ConfigError("--partial applies to the one-GPU microbenchmarks, not --ranks")
    if len(from_json) > 1:
        raise ConfigError("--ranks refits one results file: give --from-json PEERS.json once")
    stem = Path(system.path).stem
    output = output or OUT_DIR / f"{stem}-ranks{n}.toml"
    if output.exists() and not force:
        raise ConfigError(f"{output}: already exists (use --force to overwrite it)")
    check_writable(output.parent)
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    if from_json:
        path = from_json[0]
    else:
        say(f"measuring on {find_gpu(device)} with {n} processes")
        require("calibrate --ranks", "refit saved results with --from-json PEERS.json")
        lib = peer.build()
        points = peer.plan(n, system.gpu.sm.count, quick)
        path = peer.launch(n, lib, points, results_out or OUT_DIR / f"{stem}-ranks{n}",
                           launcher, say)
    doc = peer.load(path)
    if doc["world"] != n:
        raise ConfigError(f"{path}: measured with {doc['world']} ranks, not --ranks {n}")
    result = peer.fit(doc)
    parts = ["pksim calibrate", f"--ranks {n}"]
    parts += [f"--from-json {path}"] if from_json else [f"--device {device}"]
    if quick and not from_json:
        parts.append("--quick")
    if system_name != "h200-single":
        parts.append(f"--system {system_name}")
    command = " ".join(parts + [f"-o {output}"])
    text = peer.render(doc, result, inherits_ref(system, system_name, output), output.stem,
                       command, str(path))
    _write_loadable(output, text, force)
    if as_json:
        emit_json({"output": str(output), "results": str(path), "device": doc["device"],
                   "date": doc["date"], "ranks": n, "devices": doc["devices"],
                   "path": doc["path"],
                   "figures": {f"gpu.transfer_remote.{k}": {
                       "value": v, "was": cal.get_figure(system, f"gpu.transfer_remote.{k}")}
                       for k, v in result.values.items()},
                   "groups": [{"group": g.name, "points": g.points,
                               "median_abs_error": g.median_abs_error,
                               "max_abs_error": g.max_abs_error, "fitted": list(g.fitted),
                               "note": g.note} for g in result.groups]})
        return
    where = ("LOCAL path: all ranks on one device, a check of the machinery, not NVLink"
             if doc["path"] == "local" else f"{doc['devices']} devices")
    table(f"remote-path figures ({doc['device']}, {n} ranks, {where})",
          ["figure", "measured", system.name],
          [[f"gpu.transfer_remote.{k}", f"{v:.4g}",
            f"{cal.get_figure(system, f'gpu.transfer_remote.{k}'):.4g}"]
           for k, v in result.values.items()])
    table("prediction vs measurement", ["group", "points", "median |error|", "max |error|",
                                        "fitted"], peer.summary_rows(result))
    click.echo(f"wrote {output}")


def _write_loadable(output: Path, text: str, force: bool) -> None:
    """Write a calibrated system file, then load it: one that does not load is a bug here,
    not the user's input."""
    write_file(output, text, force)
    try:
        load_system(str(output))
    except ConfigError as exc:
        raise ValidationError(f"the calibrated file does not load: {exc}") from None
