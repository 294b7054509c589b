"""The published judge: every corpus entry predicted, its error per curve and per size band,
NCCL's logged picks against the model's (``pksim validate --published``).

Per entry: the shipped system it maps to (``SYSTEMS``, by the entry's ``[system] gpu``; an
entry spanning several nodes over InfiniBand is not predicted: the scale-out path is not
judged here), the NCCL version it declares (None: the newest tables), NCCL's launch mode
(``launch_mode``) and NVLS (``[environment] nvls = "off"`` turns it off). Per series:
- ``nccl`` (and ``pynccl``): NCCL's own pick (pksim_core.nccl.nccl_schedule), simulated;
- custom kernels (``IMPLEMENTATIONS``: one-shot -> direct, two-shot, multimem ->
  in-network): pksim's best schedule of that algorithm, in a stream launch (pk kernels
  have no graph or one-thread launch; a row in another mode says so);
- others (NCCL's symmetric-memory kernels, vLLM/TRT-LLM custom all-reduce) are listed, not
  predicted, with the reason.
Per row: the measured time is ``time_*``, else bytes / algBw, else from busBw by the
nccl-tests factors; a size that is not in bytes (``size_MB``, ``size_as_labelled``) or no
size is "not predicted". Error = predicted / measured - 1. Primitive entries are inputs (not
judged). All numbers in seconds and fractions (0.1 = 10 %)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from hwmodels.catalog import load_system
from hwmodels.errors import PksimError
from hwmodels.topology import Topology
from pksim_core.nccl import nccl_schedule
from pksim_core.nccl_constants import constants
from pksim_core.nccl_graph import pick
from pksim_core.search import best
from pksim_core.simulate import predict
from pksim_core.versus import versus_nccl
from pksim_core.vocabulary import renamed
from validation.published.corpus import Entry, PrintedRow, Series, load_corpus

KiB, MiB = 1 << 10, 1 << 20
# Size bands (bytes per rank as nccl-tests prints them): [lo, hi)
BANDS = (("<64KiB", 0, 64 * KiB), ("64KiB-1MiB", 64 * KiB, MiB),
         ("1-64MiB", MiB, 64 * MiB + 1), (">64MiB", 64 * MiB + 1, math.inf))
LARGE_BANDS = ("64KiB-1MiB", "1-64MiB", ">64MiB")     # "sizes >= 64 KiB"
# The entry's [system] gpu -> the shipped system it is predicted on.
SYSTEMS = {"H200 SXM": "hgx-h200", "H200": "hgx-h200", "H100": "dgx-h100",
           "B200": "dgx-b200", "A100-SXM4-40GB": "dgx-a100", "GB200": "gb200-nvl72",
           "B300": "hgx-b300"}
NOT_MODELLED = {
    "H800": "H800's NVLink (8 links, 400 GB/s) is not a shipped system",
    "unknown": "the source does not state the GPU",
    "H100 / B200": "a primitive entry over two systems",
}
OPS = {"all_reduce": "all-reduce", "all_gather": "all-gather",
       "reduce_scatter": "reduce-scatter"}
COLLS = {"AllReduce": "all-reduce", "AllGather": "all-gather",
         "ReduceScatter": "reduce-scatter"}
PROTOS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
NCCL_IMPLS = ("nccl", "pynccl")
# custom kernel implementation -> pksim algorithm it is predicted with
IMPLEMENTATIONS = {"helion_1shot": "direct", "triton_1shot": "direct", "dist_1shot": "direct",
                   "ca_1stage": "direct", "vllm_custom_allreduce_1stage": "direct",
                   "dist_2shot": "two-shot", "ca_2stage": "two-shot",
                   "symm_mem_two_shot": "two-shot", "triton_multimem": "in-network",
                   "dist_multimem": "in-network", "symm_mem_multimem": "in-network"}
UNPREDICTED_IMPLS = {
    "nccl-symmetric": "NCCL's symmetric-memory kernels are not modelled",
    "vllm_custom_allreduce": "vLLM's custom all-reduce switches algorithm by size (not modelled)",
    "trtllm_custom_allreduce": "TRT-LLM's custom all-reduce switches algorithm by size "
                               "(not modelled)",
}
# targets (fractions): NCCL, sizes >= 64 KiB: median, p90; below 64 KiB: median; custom: median
TARGETS = {"nccl_median": 0.10, "nccl_p90": 0.25, "nccl_small_median": 0.25,
           "custom_median": 0.20}
PK_LAUNCH = "eager"           # pk kernels are predicted with a stream launch only


@dataclass
class Point:
    bytes: int | None
    measured_s: float | None
    predicted_s: float | None = None
    label: str | None = None          # the schedule (NCCL's pick or pk's best)
    bound: str | None = None          # the binding resource of the prediction
    reason: str | None = None         # why not predicted
    qualifier: str = "exact"          # the row's: "at-most" / "at-least" bound the time

    @property
    def error(self) -> float | None:
        """predicted / measured - 1; a row that only bounds the time ("under 8 us":
        at-most) counts a prediction on the bound's right side as no error."""
        if self.predicted_s is None or not self.measured_s:
            return None
        err = self.predicted_s / self.measured_s - 1
        if self.qualifier == "at-most":
            return max(0.0, err)
        if self.qualifier == "at-least":
            return min(0.0, err)
        return err


@dataclass
class Curve:
    label: str
    implementation: str
    kind: str                         # "nccl" | "custom" | "other"
    algorithm: str | None
    launch: str | None
    world: int | None
    points: list[Point]
    note: str | None = None
    bands: dict = field(default_factory=dict)
    targets: dict = field(default_factory=dict)


@dataclass
class LoggedPick:
    coll: str
    bytes: int
    logged: str                       # "algo/proto"
    model: str | None
    match: bool
    channels_logged: str | None = None
    channels_model: int | None = None


@dataclass
class EntryReport:
    name: str
    role: str
    kind: str
    system_text: str
    system: str | None
    reason: str | None                # why the whole entry is not predicted
    nccl_version: str | None
    curves: list[Curve]
    picks: list[LoggedPick]
    bands: dict = field(default_factory=dict)
    targets: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(len(c.points) for c in self.curves)

    @property
    def predicted(self) -> int:
        return sum(p.error is not None for c in self.curves for p in c.points)


def band_of(nbytes: int) -> str:
    return next(name for name, lo, hi in BANDS if lo <= nbytes < hi)


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(points: list[Point]) -> dict:
    """{band: {n, median, p90, max}} of |error|, only bands with points."""
    out = {}
    for name, _lo, _hi in BANDS:
        errs = [abs(p.error) for p in points if p.error is not None and band_of(p.bytes) == name]
        if errs:
            out[name] = {"n": len(errs), "median": statistics.median(errs),
                         "p90": quantile(errs, 0.9), "max": max(errs)}
    return out


def system_for(entry: Entry) -> tuple[str | None, str | None]:
    """(shipped system, None) or (None, why not)."""
    gpu = entry.system["gpu"]
    if (entry.system.get("nodes") or 1) > 1:
        return None, ("spans several nodes over InfiniBand: NVLink partitions across a "
                      "network are not judged here (scale-out path not modelled for NCCL)")
    if gpu in NOT_MODELLED:
        return None, NOT_MODELLED[gpu]
    if gpu not in SYSTEMS:
        return None, f"GPU {gpu!r} has no shipped system in the mapping"
    return SYSTEMS[gpu], None


def launch_mode(entry: Entry) -> tuple[str, str | None]:
    """NCCL's launch mode for the entry, and the assumption made (None: as stated).
    nccl-tests without one process per GPU is one thread driving every GPU (-g N)."""
    mode, procs = entry.launch["mode"], entry.launch["processes"]
    if mode == "graph":
        return "graph", None
    if mode == "eager":
        if procs == "per-gpu":
            return "eager", None
        return "one-thread", (None if procs == "one"
                              else "processes not stated: one thread for all GPUs assumed")
    if procs == "one":
        return "one-thread", ("launch mode not stated: one process drives every GPU, without "
                              "a CUDA graph (nccl-tests' default) assumed")
    return "eager", "launch mode not stated: eager (one process per GPU) assumed"


def measured_s(entry: Entry, series: Series, row: PrintedRow, nbytes: int) -> float | None:
    t = row.time_s
    if t is not None:
        return t
    if "algbw_GBps" in row.values:
        return nbytes / row.gbps("algbw_GBps")
    n = entry.ranks(series)
    op = entry.op(series)
    if "busbw_GBps" in row.values and n and op in OPS:
        factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        return nbytes * factor / row.gbps("busbw_GBps")
    return None


def _curve(entry: Entry, system, series: Series, version: str | None) -> Curve:
    impl = series.implementation
    world = entry.ranks(series)
    op = OPS.get(entry.op(series) or "")
    mode, assumed = launch_mode(entry)
    if impl in NCCL_IMPLS:
        kind, alg, launch = "nccl", None, mode
    elif impl in IMPLEMENTATIONS:
        kind, alg, launch = "custom", IMPLEMENTATIONS[impl], PK_LAUNCH
        if entry.launch["mode"] == "graph":
            assumed = "measured in a CUDA graph: pk kernels have a stream launch only"
    else:
        kind, alg, launch = "other", None, None
    curve = Curve(series.label, impl, kind, alg, launch, world, [], assumed)
    for row in series.rows:
        nbytes = row.bytes
        point = Point(nbytes, measured_s(entry, series, row, nbytes) if nbytes else None,
                      qualifier=_time_qualifier(row.qualifier, row))
        curve.points.append(point)
        if kind == "other":
            point.reason = UNPREDICTED_IMPLS.get(impl, f"implementation {impl!r} not modelled")
        elif op is None:
            point.reason = f"op {entry.op(series)!r} not modelled"
        elif nbytes is None:
            point.reason = (f"size not in bytes ({row.size_key} as labelled)" if row.size_key
                            else "no size (a peak figure)")
        elif point.measured_s is None:
            point.reason = "no time or bandwidth to compare"
        else:
            _predict(point, system, op, nbytes, world, kind, alg, launch, version,
                     entry.environment["nvls"] != "off", forced(entry, series))
    return curve


def _time_qualifier(qualifier: str, row: PrintedRow) -> str:
    """A row's qualifier as a bound on the time: a bandwidth "at-least" bounds the time from
    above."""
    if qualifier not in ("at-most", "at-least") or row.time_s is not None:
        return qualifier
    return "at-most" if qualifier == "at-least" else "at-least"


def forced(entry: Entry, series: Series) -> tuple[str | None, str | None]:
    """The algorithm and protocol the measurement forced (NCCL_ALGO / NCCL_PROTO: the
    series', else the entry's [environment]), in NCCL's table names, or None."""
    algo = series.algo or entry.environment.get("algo")
    proto = series.proto or entry.environment.get("proto")
    return (_norm_algo(algo) if algo else None,
            PROTOS.get(proto.lower(), proto) if proto else None)


def _predict(point: Point, system, op, nbytes, world, kind, alg, launch, version, nvls,
             force=(None, None)):
    try:
        if kind == "nccl":
            p = predict(system, nccl_schedule(system, op, nbytes, world, version=version,
                                              launch=launch, nvls=nvls, algo=force[0],
                                              proto=force[1]))
        else:
            p = best(system, op, nbytes, world, algorithms=(alg,))
    except PksimError as exc:
        point.reason = str(exc)
        return
    point.predicted_s, point.label, point.bound = p.time_s, p.schedule.label(), p.bound_resource


def _norm_algo(text: str) -> str:
    return text.lower().replace("nvlstree", "nvls_tree").replace("-", "_")


def _picks(entry: Entry, system, version: str | None) -> list[LoggedPick]:
    if entry.tuner is None or system is None:
        return []
    out = []
    topo = Topology.build(system, entry.system.get("gpus"))
    c = constants(version)
    for ch in entry.tuner.choices:
        op = COLLS.get(ch.coll)
        p = pick(system, topo, c, op, ch.bytes, ch.nvls != "off") if op else None
        logged = f"{_norm_algo(ch.algo)}/{PROTOS.get(ch.proto.lower(), ch.proto)}"
        model = f"{p.algorithm}/{p.protocol}" if p else None
        chan = (None if ch.channel_hi is None
                else f"{(ch.channel_lo or 0)}..{ch.channel_hi}")
        out.append(LoggedPick(ch.coll, ch.bytes, logged, model, model == logged, chan,
                        p.channels if p else None))
    return out


def judge_entry(entry: Entry) -> EntryReport:
    version = entry.nccl_version
    name, reason = system_for(entry)
    rep = EntryReport(entry.name, entry.role, entry.kind, entry.system["name"], name, reason,
                      version, [], [])
    if entry.role == "primitive":
        rep.reason = "a primitive: an input of the model, not judged"
        return rep
    system = load_system(name) if name else None
    if system is not None:
        try:
            constants(version)
        except PksimError as exc:
            rep.reason, system = str(exc), None
    rep.picks = _picks(entry, system, version)
    for series in entry.series:
        curve = _curve(entry, system, series, version) if system else Curve(
            series.label, series.implementation, "other", None, None, entry.ranks(series),
            [Point(r.bytes, None, reason=reason) for r in series.rows])
        curve.bands = stats(curve.points)
        curve.targets = targets(curve)
        rep.curves.append(curve)
    rep.bands = stats([p for c in rep.curves for p in c.points])
    rep.targets = _entry_targets(rep)
    return rep


def targets(curve: Curve) -> dict:
    """{target: {value, limit, met}} of a curve (empty: nothing judged)."""
    errs = [p for p in curve.points if p.error is not None]
    if not errs:
        return {}
    out = {}
    if curve.kind == "nccl":
        large = [abs(p.error) for p in errs if p.bytes >= 64 * KiB]
        small = [abs(p.error) for p in errs if p.bytes < 64 * KiB]
        if large:
            out["median>=64KiB"] = (statistics.median(large), TARGETS["nccl_median"])
            out["p90>=64KiB"] = (quantile(large, 0.9), TARGETS["nccl_p90"])
        if small:
            out["median<64KiB"] = (statistics.median(small), TARGETS["nccl_small_median"])
    elif curve.kind == "custom":
        out["median"] = (statistics.median(abs(p.error) for p in errs),
                         TARGETS["custom_median"])
    return {k: {"value": v, "limit": lim, "met": v <= lim} for k, (v, lim) in out.items()}


def _entry_targets(rep: EntryReport) -> dict:
    met = [t["met"] for c in rep.curves for t in c.targets.values()]
    if rep.picks:
        met.append(all(p.match for p in rep.picks))
    return {"judged": bool(met), "met": all(met) if met else None}


def miss_reason(curve: Curve) -> str | None:
    """Where a target is missed: by how much, the worst point, and what bounds it."""
    misses = [f"{k} {v['value']:.0%} (target {v['limit']:.0%}, over by "
              f"{(v['value'] - v['limit']) * 100:.0f} points)"
              for k, v in curve.targets.items() if not v["met"]]
    if not misses:
        return None
    worst = max((p for p in curve.points if p.error is not None), key=lambda p: abs(p.error))
    side = "high" if worst.error > 0 else "low"
    return (f"{'; '.join(misses)}; worst at {worst.bytes} B: predicted {side} by "
            f"{abs(worst.error):.0%} ({worst.label}, bound by {worst.bound})")


# pk's best schedule against NCCL's pick where both have the switch's reduction (NVLS):
# the systems the judged entries map to, at sizes from 64 MiB (pksim_core.versus, D44)
VERSUS_SYSTEMS = ("dgx-h100", "hgx-h200", "dgx-b200")
VERSUS_BYTES = (64 * MiB, 256 * MiB, 1024 * MiB)


def versus(systems: tuple[str, ...] = VERSUS_SYSTEMS,
           sizes: tuple[int, ...] = VERSUS_BYTES) -> list[dict]:
    """All-reduce: pk's best schedule against NCCL's pick (its default launch), each with its
    binding resource and time, and the difference itemised (pksim_core.versus.versus_nccl)."""
    rows = []
    for name in systems:
        system = load_system(name)
        for nbytes in sizes:
            rows.append(renamed({"system": name, "bytes": nbytes,
                                 **versus_nccl(system, "all-reduce", nbytes)}, ("bytes",)))
    return rows


def judge(entries: tuple[Entry, ...] | None = None) -> list[EntryReport]:
    """The whole corpus judged (``entries`` default: every shipped entry)."""
    return [judge_entry(e) for e in (entries if entries is not None else load_corpus())]


__all__ = ["judge", "judge_entry", "versus", "EntryReport", "Curve", "Point", "Pick", "BANDS",
           "SYSTEMS", "TARGETS", "miss_reason", "band_of", "stats"]
