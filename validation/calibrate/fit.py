"""Calibration: fit the model's parameters to microbenchmark results and write a
calibrated system file.

``fit(system, results)`` runs ``scipy.optimize.least_squares`` on the residuals
log(predicted / measured) of ``pksim_core.microbench_model`` (the model the simulator uses),
stage by stage: each stage fits the parameters its microbenchmark groups determine
and holds those of earlier stages (flags -> ld/st copies -> launches -> copies ->
TMA copy -> TMA reduce -> collective moves -> epilogue moves -> shifted moves -> tensor). Within a stage every group weighs the same, and a soft-L1 loss
(scale 5 %) keeps a few far-off points from pulling the rest. Parameters are fitted
in log space, within the ranges below. A stage whose figures only add to a move another
stage costs (the shifted moves, D63) fits each point's time over that of its twin without
the addition (the same point from aligned sources): its figures carry the addition alone,
not the rest of the model's error at that point. ``validation.calibrate.file`` writes the
result; ``validation.calibrate.microbench`` measures on a GPU.
"""
from __future__ import annotations

import dataclasses
import datetime
import gzip
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hwmodels.errors import ConfigError, ValidationError
from hwmodels.profile import LOCAL_FIELDS, load_profile
from hwmodels.system import System
from validation.calibrate.manifest import locate
from pksim_core.microbench_model import (MEASURED_ONLY, REQUIRED, GroupSummary, PointResult, predict,
                              predict_time_s,
                              summarise, usable)

ROBUST_SCALE = 0.05          # soft-L1 scale, in log(predicted / measured)
SPREAD = 4.0                 # extra starts lie within this factor of the loaded figures
TOL = 1e-6                   # least-squares tolerances: figures are written to 4 digits


@dataclass(frozen=True)
class Param:
    key: str                  # dotted TOML key, value in the key's unit
    lo: float
    hi: float
    # where a figure at its floor starts (in log space a figure at the floor has no gradient)
    start: float | None = None


@dataclass(frozen=True)
class Stage:
    name: str
    groups: tuple[str, ...]
    params: tuple[Param, ...]
    starts: int = 1           # least-squares runs: from the loaded figures, then seeded random
    # the measurement_key of the point each point is fitted relative to (its time over that
    # point's, measured and predicted); points without one, or their own, are not fitted
    twin: Callable[[Mapping[str, Any]], str] | None = None
    # its figures only add to points an earlier stage fits: that stage fits with them at
    # their floor (none), so that they carry the addition alone (D83)
    additive: bool = False


def aligned_twin(rec: Mapping[str, Any]) -> str:
    """The same block_moves point from sources on the 16-byte grid (shift 0, same run): what
    a shifted move's time is fitted relative to (docs/decisions/D63.md)."""
    return measurement_key({**rec, "params": {**rec.get("params", {}), "shift": 0}})


STAGES = (
    Stage("flags", ("flag_latency",), (
        Param("gpu.sync.flag_latency_ns", 10, 1e5), Param("gpu.sync.flag_latency_sys_ns", 10, 1e5))),
    # min(port, bytes in flight / latency): a latency that does not bind at the start gets
    # no gradient, so this stage tries several starts.
    Stage("ld/st copies", ("sm_copy",), (
        Param("gpu.transfer.ldst_local_per_sm_GBps", 1, 1e3), Param("gpu.hbm.efficiency", 0.1, 1.0),
        Param("gpu.transfer.issue_knee", 0.5, 30), Param("gpu.hbm.latency_ns", 10, 1e5)),
        starts=8),
    Stage("launches", ("launch_latency",), (
        Param("gpu.sync.launch_api_us", 0.1, 50), Param("gpu.sync.kernel_launch_us", 0.05, 50),
        Param("gpu.sync.host_sync_us", 0.1, 100), Param("gpu.sync.copy_api_us", 0.1, 100),
        Param("gpu.sync.event_api_us", 0.01, 100), Param("gpu.sync.stream_launch_us", 0.01, 50))),
    Stage("copies", ("hbm_copy", "ce_burst"), (
        Param("gpu.l2.bandwidth_GBps", 100, 1e5),
        Param("gpu.copy_engine.setup_latency_us", 0.01, 50),
        Param("gpu.copy_engine.command_us", 0.01, 50),
        Param("gpu.copy_engine.stream_start_us", 0.01, 50),
        Param("gpu.sync.stream_chain_us", 0.01, 50),
        Param("gpu.copy_engine.bandwidth_GBps", 100, 1e4),
        Param("gpu.sync.event_wait_us", 0.001, 50)), starts=3),
    Stage("tma copy", ("tma_copy",), (
        Param("gpu.transfer.tma_local_per_sm_GBps", 1, 1e3),
        Param("gpu.transfer.tma_message_half_bytes", 1, 1e7))),
    Stage("tma reduce", ("tma_reduce",), (
        Param("gpu.transfer.tma_reduce_per_sm_GBps", 1, 1e3),
        Param("gpu.transfer.tma_reduce_issue_ns", 0.1, 1e4),
        Param("gpu.hbm.reduce_efficiency", 0.05, 1.0))),
    Stage("collective moves", ("block_moves", "block_moves_own", "block_moves_cross"), (
        Param("gpu.kernel.tma_move_base_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.tma_move_dest_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.tma_move_reduce_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.tma_move_source_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.tma_message_ns", 0.01, 1e4),
        Param("gpu.kernel.ldst_move_base_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.ldst_move_dest_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.ldst_move_reduce_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.ldst_move_source_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.move_knee", 0.5, 30),
        Param("gpu.kernel.tma_move_reduce_knee", 0.5, 30),
        Param("gpu.kernel.move_buffer_latency_ns", 1, 5000),
        Param("gpu.kernel.dest_set_latency_ns", 1, 5000),
        Param("gpu.transfer.move_start_ns", 1, 1e4),
        Param("gpu.transfer.thread_start_ps", 0.01, 1e4),
        Param("gpu.kernel.tma_shared_reuse_MiB", 1, 1e6),
        Param("gpu.kernel.ldst_fanout_write", 0.001, 5.0),
        Param("gpu.kernel.ldst_fanout_reach_MiB", 1, 1e5),
        Param("gpu.kernel.tma_shared_read", 0.01, 1.0),
        Param("gpu.kernel.ldst_shared_read", 0.01, 1.0),
        Param("gpu.kernel.load_round_ns", 1, 1e5)), starts=3),
    # the crossed sums alone: what reading every source crossed adds to a TMA sum, with the
    # collective moves' figures as that stage fits them with it at its floor (D83)
    Stage("crossed sums", ("block_moves_cross", "crossed_sums"), (
        Param("gpu.kernel.tma_move_cross_ns_per_KiB", 1e-6, 1e4, start=10.0),), additive=True),
    Stage("epilogue moves", ("epilogue_moves",), (
        Param("gpu.kernel.tma_move_bias_ns", 0.01, 1e5),
        Param("gpu.kernel.ldst_move_epilogue_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.ldst_move_bias_ps_per_element", 0.01, 1e5))),
    # block_moves --shift alone: what sources off the 16-byte grid add to the aligned move, on
    # each point's time over its aligned twin's (docs/decisions/D63.md)
    Stage("shifted moves", ("block_moves_shift",), (
        Param("gpu.kernel.ldst_move_word_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.ldst_word_l2_GBps", 100, 1e6),
        Param("gpu.kernel.tma_move_realign_ns_per_KiB", 0.01, 1e4)), twin=aligned_twin),
    Stage("handoffs", ("signal_chain",), (Param("gpu.sync.release_ns", 1, 1e5),)),
    Stage("fused pull", ("fused_pull",), (
        Param("gpu.kernel.pull_move_base_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.pull_move_source_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.pull_move_dest_ns_per_KiB", 0.01, 1e4))),
    Stage("fused pull tma", ("fused_pull_tma",), (
        Param("gpu.kernel.pull_tma_move_base_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.pull_tma_move_source_ns_per_KiB", 0.01, 1e4),
        Param("gpu.kernel.pull_tma_move_dest_ns_per_KiB", 0.01, 1e4))),
    Stage("tensor", ("gemm", "attention"), (
        Param("gpu.tensor.gemm_efficiency", 0.1, 1.0), Param("gpu.tensor.gemm_k_overhead", 1, 1e4),
        Param("gpu.tensor.sustained_fraction", 0.2, 1.0),
        Param("gpu.tensor.sustained_after_us", 1, 1e6),
        Param("gpu.tensor.sustained_sm_exponent", 0.01, 3),
        Param("gpu.tensor.attention_efficiency", 0.1, 1.0),
        Param("gpu.tensor.attention_causal_overhead", 1, 1e5))),
    Stage("epilogue", ("gemm_store_add",), (
        Param("gpu.tensor.epilogue_overlap", 0.01, 1.0),
        Param("gpu.hbm.tile_reduce_efficiency", 0.05, 1.0))),
)


# The stages that fit the hardware's figures alone (``pksim calibrate --hardware-only``): none
# of the kernel profile's (gpu.kernel).
HARDWARE_STAGES = tuple(s for s in STAGES if not any(p.key.startswith("gpu.kernel.")
                                                     for p in s.params))


# ---- results files ----------------------------------------------------------------------
@dataclass(frozen=True)
class Results:
    path: str
    device: Mapping[str, Any]
    date: str
    command: str
    records: tuple[Mapping[str, Any], ...]

    @property
    def device_name(self) -> str:
        return str(self.device.get("name") or "unknown GPU")

    @property
    def driver(self) -> str:
        return str(self.device.get("driver_version") or self.device.get("driver") or "unknown")

    @property
    def day(self) -> str:
        return self.date[:10] if self.date else datetime.date.today().isoformat()


def load_results(path: str | Path) -> Results:
    """Read a microbench.json (validation/microbench/run.py); bad input is a one-line
    ValidationError naming the file, the record and the key. A file moved from
    validation/data/NAME is found where it is now (validation/calibrate/manifest.locate)."""
    path = locate(path)
    try:
        # gzip-compressed files (.gz) as the device runs commit them
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        doc = json.loads(text)
    except (OSError, EOFError) as exc:
        if isinstance(exc, gzip.BadGzipFile):
            raise ValidationError(f"{path}: not a gzip file ({exc})") from None
        raise ValidationError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: "
                              f"{exc.msg})") from None
    except UnicodeDecodeError:
        raise ValidationError(f"{path}: not a text file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValidationError(f"{path}: expected an object with a 'results' list (the "
                              f"microbench.json that validation/microbench/run.py writes)")
    device = doc.get("device", {})
    if not isinstance(device, dict):
        raise ValidationError(f"{path}: device = {device!r} is not an object")
    for i, rec in enumerate(doc["results"]):
        _check_record(path, i, rec)
    records = tuple(_grouped(rec) for rec in doc["results"])
    if not any(usable(r) and r["bench"] not in MEASURED_ONLY for r in records):
        raise ValidationError(f"{path}: no usable result (check 'ok' and a positive time_s) "
                              f"of a benchmark the model predicts")
    return Results(str(path), device, str(doc.get("date", "")), str(doc.get("command", "")),
                   records)


def _grouped(rec: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record under the group that fits it: block_moves run with --shift (its records carry
    "shift") is the shifted moves' own group, block_moves_shift (docs/decisions/D63.md)."""
    if rec.get("bench") == "block_moves" and "shift" in (rec.get("params") or {}):
        return {**rec, "bench": "block_moves_shift"}
    return rec


def measurement_key(rec: Mapping[str, Any]) -> str:
    """What a record measured: its benchmark, parameters and bytes (not its times)."""
    return json.dumps([rec.get("bench"), rec.get("params"), rec.get("bytes")], sort_keys=True)


def merge_results(parts: Sequence[Results]) -> Results:
    """Several runs as one, given oldest first: a measurement taken again (same benchmark,
    parameters and bytes) replaces the earlier one, so a rerun of a changed microbenchmark
    supersedes its old records; device, date and command of the latest run (the device must
    be the same)."""
    if len(parts) == 1:
        return parts[0]
    names = {r.device_name for r in parts}
    if len(names) > 1:
        raise ValidationError(f"results from different devices cannot be fitted together: "
                              f"{', '.join(sorted(names))}")
    latest = max(parts, key=lambda r: r.date)
    records = {measurement_key(rec): rec for r in parts for rec in r.records}
    return Results(", ".join(r.path for r in parts), latest.device, latest.date,
                   "; ".join(r.command for r in parts if r.command), tuple(records.values()))


def _check_record(path: Path, i: int, rec: Any) -> None:
    where = f"{path}: results[{i}]"
    if not isinstance(rec, dict):
        raise ValidationError(f"{where} = {rec!r} is not an object")
    bench = rec.get("bench")
    if not isinstance(bench, str):
        raise ValidationError(f"{where}: missing key 'bench'")
    if rec.get("check") != "ok":
        return                                    # failed points are not timed: skipped
    t = rec.get("time_s")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0 or not math.isfinite(t):
        raise ValidationError(f"{where} ({bench}): time_s = {t!r} is not a positive number")
    params = rec.get("params", {})
    if not isinstance(params, dict):
        raise ValidationError(f"{where} ({bench}): params = {params!r} is not an object")
    record_keys, param_keys = REQUIRED.get(bench, ((), ()))
    for key in record_keys:
        if not isinstance(rec.get(key), (int, float)) or isinstance(rec.get(key), bool):
            raise ValidationError(f"{where} ({bench}): missing number {key!r}")
    for key in param_keys:
        if key not in params:
            raise ValidationError(f"{where} ({bench}): params has no {key!r}")


# ---- figures on a loaded system -----------------------------------------------------------
def residuals(system: System) -> dict[str, Any]:
    """The fit residuals of a calibrated system's ``[calibration.residual]`` and, when its
    kernel profile was fitted with it (on the same GPU: not carried), the profile's."""
    out = dict((system.calibration or {}).get("residual", {}))
    if system.profile is not None and not system.profile.carried:
        profile = load_profile(system.profile.path)
        out.update((profile.calibration or {}).get("residual", {}))
    return out


def provenance_key(dotted: str) -> str:
    """Where a fitted figure's provenance is kept: its own key, or for a kernel figure
    (``gpu.kernel.tma_move_base_ns_per_KiB``) its profile key (``profile.
    tma_move_base_cycles_per_KiB``)."""
    if dotted.startswith("gpu.kernel."):
        return "profile." + LOCAL_FIELDS[dotted.split(".", 2)[2]].metadata["portable"]
    return dotted



def _field(obj: Any, key: str) -> dataclasses.Field:
    for f in dataclasses.fields(obj):
        if f.metadata.get("key") == key:
            return f
    raise ConfigError(f"unknown key {key!r} in {type(obj).__name__}")


def get_figure(system: System, dotted: str) -> float:
    """A figure of a loaded system, in its TOML unit (``gpu.hbm.bandwidth_GBps`` -> GB/s)."""
    top, *rest = dotted.split(".")
    obj = getattr(system, top)
    for part in rest[:-1]:
        obj = getattr(obj, _field(obj, part).name)
    f = _field(obj, rest[-1])
    return getattr(obj, f.name) / f.metadata["factor"]


def with_figures(system: System, values: Mapping[str, float]) -> System:
    """A copy of ``system`` with figures replaced (values in their TOML units)."""
    def replace(obj: Any, parts: list[str], value: float) -> Any:
        f = _field(obj, parts[0])
        if len(parts) == 1:
            return dataclasses.replace(obj, **{f.name: value * f.metadata["factor"]})
        return dataclasses.replace(obj, **{f.name: replace(getattr(obj, f.name), parts[1:],
                                                          value)})
    for dotted, value in values.items():
        top, *rest = dotted.split(".")
        system = dataclasses.replace(system, **{top: replace(getattr(system, top), rest, value)})
    return system


# ---- the fit -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageResult:
    name: str
    groups: tuple[str, ...]
    params: tuple[str, ...]
    points: int
    median_abs_error: float | None
    max_abs_error: float | None
    success: bool
    evaluations: int
    relative: bool = False    # errors of each point's time over its twin's (Stage.twin)


@dataclass(frozen=True)
class FitResult:
    system: System                         # the calibrated system, in memory
    values: Mapping[str, float]            # fitted figures, TOML units
    stage_of: Mapping[str, str]            # figure -> stage that fitted it
    stages: tuple[StageResult, ...]
    points: tuple[PointResult, ...]
    summary: Mapping[str, GroupSummary]


def _robust(e: np.ndarray) -> np.ndarray:
    """Soft-L1 as a transformed residual: ~e when small, ~sqrt(2 s |e|) when large."""
    s = ROBUST_SCALE
    return np.sign(e) * s * np.sqrt(2.0 * (np.sqrt(1.0 + (e / s) ** 2) - 1.0))


def _fit_stage(system: System, stage: Stage, records: Sequence[Mapping[str, Any]]):
    # points the model has no figure for (the two events alone of launch_latency's
    # behind_write) are reported, not fitted
    recs = [r for r in records if r["bench"] in stage.groups
            and predict_time_s(system, r) is not None]
    refs: list[Mapping[str, Any]] = []
    if stage.twin is not None:
        by_key = {measurement_key(r): r for r in recs}
        pairs = [(r, by_key.get(stage.twin(r))) for r in recs]
        pairs = [(r, t) for r, t in pairs if t is not None and t is not r]
        recs, refs = [r for r, _ in pairs], [t for _, t in pairs]
    if not recs:
        return system, {}, None
    counts = {g: sum(r["bench"] == g for r in recs) for g in stage.groups}
    present = [g for g in stage.groups if counts[g]]
    weights = np.array([1.0 / math.sqrt(counts[r["bench"]] * len(present)) for r in recs])
    measured = np.array([r["time_s"] for r in recs])
    keys = [p.key for p in stage.params]
    lo = np.log([p.lo for p in stage.params])
    hi = np.log([p.hi for p in stage.params])
    # a figure the start system leaves at 0 (none measured) starts at its lower bound
    start = np.array([math.log(p.start if p.start is not None and get_figure(system, p.key)
                               <= p.lo else max(get_figure(system, p.key), p.lo))
                      for p in stage.params])
    start = np.clip(start, lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))

    def trial(u: np.ndarray) -> System:
        return with_figures(system, dict(zip(keys, np.exp(u))))

    def log_errors(s: System) -> np.ndarray:
        """log(predicted / measured) of every point, relative to its twin's if any."""
        pred = np.array([p.predicted_s for p in predict(s, recs)])
        out = np.log(pred / measured)
        if refs:
            ref = np.array([p.predicted_s for p in predict(s, refs)])
            out -= np.log(ref / np.array([r["time_s"] for r in refs]))
        return out

    def residuals(u: np.ndarray) -> np.ndarray:
        return weights * _robust(log_errors(trial(u)))

    # Extra starts (seeded, so the fit is reproducible) lie within a factor SPREAD of
    # the loaded figures; the lowest cost wins.
    rng = np.random.default_rng(0)
    near_lo = np.maximum(lo, start - math.log(SPREAD))
    near_hi = np.minimum(hi, start + math.log(SPREAD))
    starts = [start] + [near_lo + rng.random(len(keys)) * (near_hi - near_lo)
                        for _ in range(stage.starts - 1)]
    from scipy.optimize import least_squares   # scipy loads only for a fit
    sol = min((least_squares(residuals, x0, bounds=(lo, hi), method="trf", x_scale=1.0,
                             ftol=TOL, xtol=TOL, gtol=TOL) for x0 in starts),
              key=lambda s: s.cost)
    fitted = with_figures(system, dict(zip(keys, np.exp(sol.x))))
    errs = [float(abs(math.expm1(e))) for e in log_errors(fitted)]
    result = StageResult(stage.name, tuple(present), tuple(keys), len(recs),
                         statistics.median(errs), max(errs), bool(sol.success), int(sol.nfev),
                         bool(refs))
    return fitted, dict(zip(keys, (float(v) for v in np.exp(sol.x)))), result


def fit(system: System, results: Results, stages: Sequence[Stage] = STAGES,
        exclude: Sequence[Mapping[str, Any]] = ()) -> FitResult:
    """Fit every stage that has data; parameters of stages without data stay as loaded.
    ``exclude``: records left out of the fit (pksim calibrate: the points on a validation
    suite's size and world, validation/calibrate/disjoint.py); they are still predicted."""
    left_out = {id(r) for r in exclude}
    records = [r for r in results.records if usable(r) and r["bench"] not in MEASURED_ONLY
               and id(r) not in left_out]
    benches = {r["bench"] for r in records}
    floors = {p.key: p.lo for s in stages if s.additive and benches & set(s.groups)
              for p in s.params}
    system = with_figures(system, floors) if floors else system
    values: dict[str, float] = {}
    stage_of: dict[str, str] = {}
    done = []
    for stage in stages:
        system, fitted, result = _fit_stage(system, stage, records)
        if result is None:
            continue
        done.append(result)
        for key, value in fitted.items():
            values[key] = _round(value)
            stage_of[key] = stage.name
    system = with_figures(system, values)          # exactly the figures the file will hold
    points = tuple(predict(system, results.records))
    return FitResult(system, values, stage_of, tuple(done), points, summarise(points))


def _round(value: float) -> float:
    return float(f"{value:.4g}")
