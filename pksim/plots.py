"""Plots and the files beside them: each plot is a PNG with its data as CSV and JSON.

Drawing uses matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``): no
display, no pyplot state, safe in worker processes. ``OutputDir`` owns the folder
and refuses to overwrite a file unless ``force``; every file is written whole or not at all
(pksim.safe_files.whole).
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import os
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import NullLocator

from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes
from pksim.safe_files import whole

# Legends: at most MAX_LEGEND entries, each a distinct colour of one qualitative palette
# (Okabe-Ito, told apart also by colour-blind readers); what does not fit is summed (bars)
# or drawn (spans) as "other", in grey.
MAX_LEGEND = 8
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442",
           "#000000")
OTHER, OTHER_COLOUR = "other", "#b0b0b0"
IMPL_STYLE = {"pk": {"linestyle": "-", "marker": "o"}, "nccl": {"linestyle": "--", "marker": "s"}}


class OutputDir:
    """A folder of results that never overwrites a file without ``force``."""

    def __init__(self, path: str | Path, force: bool = False):
        self.path = Path(path)
        self.force = force
        self.written: list[Path] = []

    def check(self, names: Iterable[str]) -> None:
        """Fail before any work if the folder cannot be written, or if a file to be
        written exists (and not ``force``)."""
        check_writable(self.path)
        if self.force:
            return
        clash = sorted(n for n in names if (self.path / n).exists())
        if clash:
            raise ConfigError(f"{self.path / clash[0]} exists (and {len(clash) - 1} more): "
                              f"use --force to overwrite, or -o another folder")

    def target(self, name: str) -> Path:
        path = self.path / name
        if path.exists() and not self.force:
            raise ConfigError(f"{path} exists: use --force to overwrite")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{path.parent}: cannot create the folder ({exc.strerror})") from None
        self.written.append(path)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        path = self.target(name)
        with _writing(path), whole(path) as tmp:
            tmp.write_text(json.dumps(obj, indent=1, default=_jsonable) + "\n")
        return path

    def write_csv(self, name: str, rows: Sequence[dict[str, Any]],
                  columns: Sequence[str] | None = None, comment: str = "") -> Path:
        """A CSV with a header; ``comment`` (e.g. that the file is partial) goes first,
        as ``# ...`` lines."""
        path = self.target(name)
        columns = list(columns or _columns(rows))
        with _writing(path), whole(path) as tmp, tmp.open("w", newline="") as handle:
            for line in comment.splitlines():
                handle.write(f"# {line}\n")
            writer = csv.DictWriter(handle, columns, extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _cell(row.get(k)) for k in columns})
        return path

    def save(self, fig: Figure, stem: str, data: Sequence[dict[str, Any]]) -> Path:
        """``stem``.png, with the plotted data as ``stem``.csv and ``stem``.json."""
        png = self.target(stem + ".png")
        FigureCanvasAgg(fig)
        with _writing(png), whole(png) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        self.write_csv(stem + ".csv", data)
        self.write_json(stem + ".json", list(data))
        return png


@contextmanager
def _writing(path: Path):
    """An OSError while writing ``path`` becomes a one-line ConfigError."""
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None


def check_writable(folder: str | Path) -> None:
    """Fail (ConfigError) unless files can be created in ``folder``: it is a folder, or
    can be made one under its nearest existing parent, and a probe file can be written
    there (the probe is removed; no folder is left behind)."""
    folder = Path(folder)
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        which = "is a file" if existing == folder else f"cannot be made: {existing} is a file"
        raise ConfigError(f"-o {folder}: {which}, not a folder")
    try:
        handle, probe = tempfile.mkstemp(prefix=".pksim-probe-", dir=existing)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"-o {folder}: cannot write in {existing} "
                          f"({exc.strerror or exc})") from None


def plot_files(stems: Iterable[str]) -> list[str]:
    return [f"{s}.{ext}" for s in stems for ext in ("png", "csv", "json")]


def _columns(rows: Sequence[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=_jsonable)
    return "" if value is None else value


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def _figure(panels: int, width: float = 5.2, height: float = 3.6) -> tuple[Figure, list]:
    cols = min(3, max(1, panels))
    rows = math.ceil(max(1, panels) / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(max(1, panels))]
    return fig, axes


def _colours(names: Iterable[str]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(names))}


def legend_groups(weights: dict[str, float]) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> legend entry, legend entry -> colour) for named parts weighted by
    ``weights``: all of them when at most MAX_LEGEND, else the MAX_LEGEND - 1 heaviest
    and "other" for the rest. Entries keep the order of the heaviest first; each gets its
    own palette colour ("other": grey)."""
    ranked = sorted(weights, key=lambda k: -weights[k])
    keep = ranked if len(ranked) <= MAX_LEGEND else ranked[:MAX_LEGEND - 1]
    entry = {name: name if name in keep else OTHER for name in ranked}
    colours = {name: PALETTE[i] for i, name in enumerate(keep)}
    if len(keep) < len(ranked):
        colours[OTHER] = OTHER_COLOUR
    return entry, colours


def _system_impl_legend(fig, colours: dict[str, str], impls: Iterable[str]) -> None:
    """One legend entry per system (its colour) and per impl (its line style), so that
    systems x impls never crowd the legend."""
    handles = [Line2D([], [], color=c, linewidth=2) for c in colours.values()]
    labels = list(colours)
    for impl in dict.fromkeys(impls):
        handles.append(Line2D([], [], color="black", **IMPL_STYLE.get(impl, {}),
                              markersize=4))
        labels.append(impl)
    fig.legend(handles[:MAX_LEGEND], labels[:MAX_LEGEND], loc="outside right upper",
               fontsize=8)


def _bytes_axis(ax, sizes: Sequence[float]) -> None:
    """Log-2 axis over ``sizes`` with at most ~10 power-of-two ticks named in bytes."""
    lo, hi = min(sizes), max(sizes)
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo / 1.4, hi * 1.4)
    first, last = math.ceil(math.log2(lo)), math.floor(math.log2(hi))
    step = max(1, math.ceil((last - first + 1) / 10))
    ticks = [2.0 ** e for e in range(first, last + 1, step)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_bytes(t) for t in ticks], rotation=45, ha="right")
    ax.minorticks_off()


# ---- sweep: busbw / time against size ------------------------------------------------
def against_size(points: Sequence[dict], y: str, title: str, ylabel: str,
                 logy: bool = False, scale: float = 1.0) -> Figure:
    """Lines per (system, impl); ``points`` have system, impl, size_B and ``y`` (drawn
    times ``scale``: seconds in the data, microseconds on the axis)."""
    fig, (ax,) = _figure(1, 7.5, 4.6)
    colours = _colours(p["system"] for p in points)
    series: dict[tuple[str, str], list] = defaultdict(list)
    for p in points:
        if p.get(y) is not None:
            series[(p["system"], p["impl"])].append((p["size_B"], p[y] * scale))
    for (system, impl), values in series.items():
        values.sort()
        ax.plot(*zip(*values), color=colours[system],
                **IMPL_STYLE.get(impl, {}), markersize=3.5, linewidth=1.4)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("size (bytes, as nccl-tests counts them)")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    if series:
        _bytes_axis(ax, [x for values in series.values() for x, _ in values])
        _system_impl_legend(fig, {s: colours[s] for s, _ in series},
                            [i for _, i in series])
    return fig


# ---- study: time / speed-up against shape, per workload group ------------------------
def by_group(points: Sequence[dict], y: str, ylabel: str, title: str,
             impls: Sequence[str] = ("pk", "nccl"), hline: float | None = None,
             logy: bool = True, scale: float = 1.0) -> Figure:
    """A panel per ``panel`` key (a workload, or a workload at one world size); in it, lines over
    the varying shape key per system (pk solid, nccl dashed), or bars per system when
    the shape is fixed. ``points`` have panel, system, impl, x, x_label, bar and ``y``.
    Systems that coincide (same GPU and links) are drawn thick under thin. ``y`` is drawn
    times ``scale`` (seconds in the data, microseconds on the axis)."""
    points = [{**p, y: p[y] * scale} if p.get(y) is not None else p for p in points]
    panels = list(dict.fromkeys(p["panel"] for p in points))
    fig, axes = _figure(len(panels))
    systems = list(dict.fromkeys(p["system"] for p in points))
    colours = _colours(systems)
    markers = dict(zip(systems, itertools.cycle("os^Dvp<>")))
    widths = {s: 1.6 if len(systems) < 3 else 3.0 - 1.8 * i / (len(systems) - 1)
              for i, s in enumerate(systems)}
    for ax, panel in zip(axes, panels):
        mine = [p for p in points if p["panel"] == panel and p.get(y) is not None
                and p["impl"] in impls]
        xs = sorted({p["x"] for p in mine})
        if len(xs) > 1:
            for (system, impl) in dict.fromkeys((p["system"], p["impl"]) for p in mine):
                line = sorted((p["x"], p[y]) for p in mine
                              if (p["system"], p["impl"]) == (system, impl))
                ax.plot(*zip(*line), color=colours[system],
                        linestyle=IMPL_STYLE.get(impl, {}).get("linestyle", "-"),
                        marker=markers[system], markersize=4.5, linewidth=widths[system],
                        alpha=0.85)
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.minorticks_off()
            ax.set_xlabel(mine[0]["x_label"] if mine else "")
            if logy:
                ax.set_yscale("log")
                _log_ticks(ax.yaxis, [p[y] for p in mine])
        else:
            for i, p in enumerate(mine):
                ax.bar(i, p[y], color=colours[p["system"]],
                       hatch="//" if p["impl"] != "pk" else None, edgecolor="white")
            ax.set_xticks(range(len(mine)))
            ax.set_xticklabels([p["bar"] for p in mine], fontsize=7, rotation=30, ha="right")
        if hline is not None:
            ax.axhline(hline, color="black", linewidth=0.8)
        ax.set_title(panel, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    drawn = [p for p in points if p.get(y) is not None and p["impl"] in impls]
    if drawn:
        _system_impl_legend(fig, {p["system"]: colours[p["system"]] for p in drawn},
                            [p["impl"] for p in drawn])
    fig.suptitle(title)
    return fig


def _log_ticks(axis, values: Sequence[float]) -> None:
    """Readable ticks on a log axis: 1-2-5 steps inside the data's range."""
    values = [v for v in values if v and v > 0]
    if not values:
        return
    lo, hi = min(values), max(values)
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1,
                                          math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if lo / 1.5 <= t <= hi * 1.5] or [lo, hi]
    axis.set_ticks(ticks)
    axis.set_ticklabels([f"{t:g}" for t in ticks])
    axis.set_minor_locator(NullLocator())


def breakdown(items: Sequence[dict], title: str) -> Figure:
    """Stacked busy time per resource class, in microseconds; ``items`` have group, label,
    time_s and busy_s (dict, seconds). Resources overlap in time, so a stack can exceed
    the total time (the black tick)."""
    groups = list(dict.fromkeys(i["group"] for i in items))
    weights: dict[str, float] = defaultdict(float)
    for item in items:
        for cls, busy in item["busy_s"].items():
            weights[cls] += busy
    entry, colours = legend_groups(weights)
    fig, axes = _figure(len(groups), 5.6, 3.8)
    for ax, group in zip(axes, groups):
        mine = [i for i in items if i["group"] == group]
        for x, item in enumerate(mine):
            summed: dict[str, float] = defaultdict(float)
            for cls, busy in item["busy_s"].items():
                summed[entry[cls]] += busy * 1e6
            bottom = 0.0
            for name in colours:
                if summed.get(name):
                    ax.bar(x, summed[name], bottom=bottom, color=colours[name],
                           edgecolor="white", linewidth=0.4)
                    bottom += summed[name]
            ax.plot([x - 0.4, x + 0.4], [item["time_s"] * 1e6] * 2, color="black",
                    linewidth=2)
        ax.set_xticks(range(len(mine)))
        ax.set_xticklabels([i["label"] for i in mine], fontsize=7, rotation=35, ha="right")
        ax.set_ylabel("busy time (us)")
        ax.set_title(group, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    if colours:
        fig.legend([Patch(color=c) for c in colours.values()], list(colours),
                   loc="outside right upper", fontsize=8, title="resource")
    fig.suptitle(title + "  (black tick: predicted time)")
    return fig


def roofline(points: Sequence[dict], roofs: dict[str, dict[str, float]], title: str) -> Figure:
    """Achieved bus bandwidth against size, under each system's NVLink ceiling and
    its latency slope (bytes / (launch + one hop)). ``points``: system, impl, size_B,
    busbw_GBps; ``roofs``: system -> {nvlink_GBps, alpha_s}."""
    fig, (ax,) = _figure(1, 8.5, 4.8)
    colours = _colours(list(roofs) + [p["system"] for p in points])
    sizes = [p["size_B"] for p in points] or [1024, 1 << 30]
    lo, hi = min(sizes) / 2, max(sizes) * 2
    ceilings: dict[float, list[str]] = defaultdict(list)
    for system, roof in roofs.items():
        ceilings[round(roof["nvlink_GBps"], 1)].append(system)
    for value, names in ceilings.items():
        ax.annotate(f"{value:g} GB/s: {', '.join(names)}", (0.01, value),
                    xycoords=("axes fraction", "data"), fontsize=6.5, va="bottom",
                    color=colours[names[0]])
    for system, roof in roofs.items():
        c = colours[system]
        ax.axhline(roof["nvlink_GBps"], color=c, linewidth=0.9, linestyle=":")
        knee = roof["nvlink_GBps"] * 1e9 * roof["alpha_s"]
        if knee > lo:                       # the latency slope, where it is in range
            xs = [lo, min(hi, knee)]
            ax.plot(xs, [x / roof["alpha_s"] / 1e9 for x in xs], color=c, linewidth=0.9,
                    linestyle=":")
    for p in points:
        ax.scatter(p["size_B"], p["busbw_GBps"], color=colours[p["system"]], s=22,
                   marker="o" if p["impl"] == "pk" else "s",
                   facecolors="none" if p["impl"] != "pk" else colours[p["system"]])
    for system in roofs:
        ax.plot([], [], color=colours[system], label=system)
    ax.scatter([], [], color="grey", marker="o", label="pk (searched best)")
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="s", label="nccl")
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    _bytes_axis(ax, sizes)
    ax.set_ylabel("bus bandwidth (GB/s)")
    _log_ticks(ax.yaxis, [p["busbw_GBps"] for p in points]
               + [r["nvlink_GBps"] for r in roofs.values()])
    ax.set_title(title + "\n(dotted: NVLink per-GPU ceiling and latency slope)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="outside right upper")
    return fig


def gantt(events: Sequence[dict], title: str, max_tracks: int = 40) -> Figure:
    """Horizontal bars per track, in microseconds; ``events`` have track, name, start_s,
    end_s (seconds), group."""
    tracks = list(dict.fromkeys(e["track"] for e in events))[:max_tracks]
    fig = Figure(figsize=(11, 0.32 * len(tracks) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    weights: dict[str, float] = defaultdict(float)
    for e in events:
        weights[e["group"]] += e["end_s"] - e["start_s"]
    entry, groups = legend_groups(weights)
    row = {t: i for i, t in enumerate(tracks)}
    for e in events:
        if e["track"] in row:
            ax.barh(row[e["track"]], (e["end_s"] - e["start_s"]) * 1e6, left=e["start_s"] * 1e6,
                    height=0.7, color=groups[entry[e["group"]]], edgecolor="white",
                    linewidth=0.3)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels(tracks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend([Patch(color=c) for c in groups.values()], list(groups), fontsize=7,
               loc="outside right upper", title="phase")
    return fig


def sensitivity(points: Sequence[dict], title: str) -> Figure:
    """Gain (unchanged time / changed time) per what-if change, a panel per system;
    ``points``: system, variant, case, gain, bound_resource."""
    systems = list(dict.fromkeys(p["system"] for p in points))
    fig, axes = _figure(len(systems), 6.0, 3.8)
    for ax, system in zip(axes, systems):
        mine = [p for p in points if p["system"] == system]
        variants = list(dict.fromkeys(p["variant"] for p in mine))
        cases = list(dict.fromkeys(p["case"] for p in mine))
        entry, colours = legend_groups({c: -i for i, c in enumerate(cases)})
        width = 0.8 / max(1, len(cases))
        for j, case in enumerate(cases):
            for i, variant in enumerate(variants):
                hit = [p for p in mine if p["case"] == case and p["variant"] == variant]
                if hit and hit[0]["gain"] is not None:
                    x = i + (j - (len(cases) - 1) / 2) * width
                    ax.bar(x, hit[0]["gain"], width, color=colours[entry[case]])
                    note = hit[0]["bound_resource"] + (" *" if hit[0]["changed"] else "")
                    ax.text(x, hit[0]["gain"], " " + note, rotation=90, ha="center",
                            va="bottom", fontsize=6)
        _gain_axes(ax, system, variants, margin=0.25, rotation=20)
        ax.legend([Patch(color=c) for c in colours.values()], list(colours), fontsize=6,
                  loc="best")
    fig.suptitle(title + "  (on each bar: the binding resource; * the best schedule changed)")
    return fig


def roofline_shares(points: Sequence[dict], title: str) -> Figure:
    """Percent of the roofline each way of running reaches, per program, a panel per system;
    ``points``: system, program, baseline_pct, best_pct. Programs are sorted by the
    baseline's share; a line joins each program's two points (the gain)."""
    systems = list(dict.fromkeys(p["system"] for p in points))
    fig = Figure(figsize=(13, 3.6 * len(systems)), layout="constrained")
    for index, system in enumerate(systems, start=1):
        ax = fig.add_subplot(len(systems), 1, index)
        mine = sorted((p for p in points if p["system"] == system),
                      key=lambda p: (p["baseline_pct"], p["best_pct"]))
        xs = range(len(mine))
        for x, p in zip(xs, mine):
            ax.plot([x, x], [p["baseline_pct"], p["best_pct"]], color=OTHER_COLOUR, lw=0.8)
        ax.scatter(xs, [p["baseline_pct"] for p in mine], s=14, color=PALETTE[1],
                   marker="s", label="baseline (PyTorch + NCCL)", zorder=3)
        ax.scatter(xs, [p["best_pct"] for p in mine], s=14, color=PALETTE[0],
                   marker="o", label="pksim's best", zorder=3)
        ax.set_yscale("log")
        ax.set_ylabel("% of roofline")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([p["program"] for p in mine], rotation=90, fontsize=6)
        ax.set_xlim(-1, len(mine))
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"{system}: {title}", fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    return fig


# ---- study: programs per what-if -------------------------------------------------------
def _variant_colours(points: Sequence[dict]) -> dict[str, str]:
    """One colour per what-if variant (the unchanged system first, in black)."""
    variants = list(dict.fromkeys(p["variant"] for p in points))
    rest = [v for v in variants if v != "base"]
    colours = {"base": "#000000"} if "base" in variants else {}
    colours.update({v: PALETTE[i % (len(PALETTE) - 1)] for i, v in enumerate(rest)})
    return colours


def program_roofline(points: Sequence[dict], title: str) -> Figure:
    """% of the roofline the baseline (square) and pksim's best (circle) reach, per program and
    what-if variant (a colour each), a panel per system; a line joins the two, so its length
    on the log axis is the speed-up. Each variant is measured against its own roofline.
    ``points``: system, variant, program, baseline_pct, best_pct."""
    systems = list(dict.fromkeys(p["system"] for p in points))
    colours = _variant_colours(points)
    fig, axes = _figure(len(systems), 6.4, 4.0)
    for ax, system in zip(axes, systems):
        mine = [p for p in points if p["system"] == system]
        programs = list(dict.fromkeys(p["program"] for p in mine))
        width = 0.8 / max(1, len(colours))
        for j, variant in enumerate(colours):
            for p in (p for p in mine if p["variant"] == variant):
                x = programs.index(p["program"]) + (j - (len(colours) - 1) / 2) * width
                ys = [p["baseline_pct"], p["best_pct"]]
                if None in ys:
                    continue
                ax.plot([x, x], ys, color=colours[variant], linewidth=1.0)
                ax.scatter([x], ys[:1], marker="s", s=18, facecolors="none",
                           edgecolors=colours[variant], zorder=3)
                ax.scatter([x], ys[1:], marker="o", s=18, color=colours[variant], zorder=3)
        ax.set_yscale("log")
        _log_ticks(ax.yaxis, [v for p in mine for v in (p["baseline_pct"], p["best_pct"])
                              if v is not None])
        ax.set_xticks(range(len(programs)))
        ax.set_xticklabels(programs, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("% of roofline")
        ax.set_title(system, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    handles = [Line2D([], [], color=c, linewidth=2) for c in colours.values()]
    handles += [Line2D([], [], color="grey", marker="s", markerfacecolor="none", linestyle=""),
                Line2D([], [], color="grey", marker="o", linestyle="")]
    labels = list(colours) + ["baseline (PyTorch + NCCL)", "pksim's best"]
    fig.legend(handles[:MAX_LEGEND], labels[:MAX_LEGEND], loc="outside right upper",
               fontsize=8)
    fig.suptitle(title)
    return fig


def program_gain(points: Sequence[dict], title: str) -> Figure:
    """Speed-up over the unchanged system per what-if change, per program: pksim's best
    (solid) and the baseline (hatched), a colour per change, a panel per system.
    ``points``: system, variant, program, gain, baseline_gain."""
    systems = list(dict.fromkeys(p["system"] for p in points))
    colours = _variant_colours(points)
    colours.pop("base", None)
    fig, axes = _figure(len(systems), 6.4, 4.0)
    for ax, system in zip(axes, systems):
        mine = [p for p in points if p["system"] == system]
        programs = list(dict.fromkeys(p["program"] for p in mine))
        width = 0.8 / max(1, 2 * len(colours))
        for j, variant in enumerate(colours):
            for p in (p for p in mine if p["variant"] == variant):
                x = programs.index(p["program"]) + (2 * j - len(colours) + 0.5) * width
                for k, (key, hatch) in enumerate((("gain", None), ("baseline_gain", "//"))):
                    if p[key] is not None:
                        ax.bar(x + k * width, p[key], width, color=colours[variant],
                               hatch=hatch, edgecolor="white", linewidth=0.4)
                        ax.text(x + k * width, p[key], f" {p[key]:.2f}x", rotation=90,
                                ha="center", va="bottom", fontsize=6)
        _gain_axes(ax, system, programs, margin=0.2, rotation=30)
    handles = [Patch(color=c) for c in colours.values()]
    handles += [Patch(facecolor="grey"), Patch(facecolor="grey", hatch="//", edgecolor="white")]
    labels = list(colours) + ["pksim's best", "baseline (PyTorch + NCCL)"]
    fig.legend(handles[:MAX_LEGEND], labels[:MAX_LEGEND], loc="outside right upper",
               fontsize=8)
    fig.suptitle(title)
    return fig


def _gain_axes(ax, system: str, ticks: list[str], margin: float, rotation: int) -> None:
    """A speed-up panel's frame: the 1x line, one tick per bar group, the system as title."""
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.margins(y=margin)
    ax.set_xticks(range(len(ticks)))
    ax.set_xticklabels(ticks, fontsize=7, rotation=rotation, ha="right")
    ax.set_ylabel("speed-up vs unchanged")
    ax.set_title(system, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
