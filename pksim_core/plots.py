"""Plots and the files beside them: each plot is a PNG with its data as CSV and JSON.

Drawing uses matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``): no
display, no pyplot state, safe in worker processes. ``OutputDir`` owns the folder, refuses
to overwrite a file unless ``force`` and writes each whole or not at all (safe_files.whole).
"""
from __future__ import annotations

import csv
import functools
import itertools
import json
import math
import os
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes
from pksim_core.safe_files import whole

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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
        _mpl().FigureCanvasAgg(fig)
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


@functools.lru_cache(maxsize=1)
def _mpl() -> SimpleNamespace:
    """matplotlib's pieces, imported when the first plot is drawn (a command that draws
    none never loads matplotlib: docs/design/layout.md)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullLocator
    return SimpleNamespace(FigureCanvasAgg=FigureCanvasAgg, Figure=Figure, Line2D=Line2D,
                           Patch=Patch, NullLocator=NullLocator)


def _figure(panels: int, width: float = 5.2, height: float = 3.6) -> tuple[Figure, list]:
    cols = min(3, max(1, panels))
    rows = math.ceil(max(1, panels) / cols)
    fig = _mpl().Figure(figsize=(width * cols, height * rows), layout="constrained")
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


def _system_impl_legend(fig, colours: dict[str, str], impls: Iterable[str],
                        markers: dict[str, str] | None = None) -> None:
    """One legend entry per system (its colour, and its marker where ``markers`` gives
    each system one) and per impl (its line style; its marker too where the marker tells
    the impl), so that systems x impls never crowd the legend and each entry looks like
    the marks it names."""
    handles = [_mpl().Line2D([], [], color=c, linewidth=2, marker=(markers or {}).get(s),
                      markersize=4.5) for s, c in colours.items()]
    labels = list(colours)
    for impl in dict.fromkeys(impls):
        style = dict(IMPL_STYLE.get(impl, {}))
        if markers:
            style.pop("marker", None)
        handles.append(_mpl().Line2D([], [], color="black", **style, markersize=4))
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
    """Lines per (system, impl); ``points`` have system, impl, size_bytes and ``y`` (drawn
    times ``scale``: seconds in the data, microseconds on the axis)."""
    fig, (ax,) = _figure(1, 7.5, 4.6)
    colours = _colours(p["system"] for p in points)
    series: dict[tuple[str, str], list] = defaultdict(list)
    for p in points:
        if p.get(y) is not None:
            series[(p["system"], p["impl"])].append((p["size_bytes"], p[y] * scale))
    for values in series.values():
        values.sort()
    for (system, impl), same in _coinciding(series).items():
        values = series[(system, impl)]
        ax.plot(*zip(*values), color=colours[system],
                **IMPL_STYLE.get(impl, {}), markersize=3.5, linewidth=1.4)
        if same:
            _name_twins(ax, [system] + same, values, impl, colours[system])
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
    Systems whose line coincides with another's in a panel (same GPU and links: within
    1 %) are drawn once and named together on the line. ``y`` is drawn times ``scale`` (seconds in the
    data, microseconds on the axis)."""
    points = [{**p, y: p[y] * scale} if p.get(y) is not None else p for p in points]
    panels = list(dict.fromkeys(p["panel"] for p in points))
    fig, axes = _figure(len(panels))
    systems = list(dict.fromkeys(p["system"] for p in points))
    colours = _colours(systems)
    markers = dict(zip(systems, itertools.cycle("os^Dvp<>")))
    for ax, panel in zip(axes, panels):
        mine = [p for p in points if p["panel"] == panel and p.get(y) is not None
                and p["impl"] in impls]
        xs = sorted({p["x"] for p in mine})
        if len(xs) > 1:
            lines = {key: sorted((p["x"], p[y]) for p in mine
                                 if (p["system"], p["impl"]) == key)
                     for key in dict.fromkeys((p["system"], p["impl"]) for p in mine)}
            for (system, impl), same in _coinciding(lines).items():
                line = lines[(system, impl)]
                ax.plot(*zip(*line), color=colours[system],
                        linestyle=IMPL_STYLE.get(impl, {}).get("linestyle", "-"),
                        marker=markers[system], markersize=4.5, linewidth=1.6, alpha=0.85)
                if same:
                    _name_twins(ax, [system] + same, line, impl, colours[system])
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
                            [p["impl"] for p in drawn], markers)
    fig.suptitle(title)
    return fig


def _name_twins(ax, systems: list[str], line: list, impl: str, colour: str) -> None:
    """Name the systems one drawn line stands for ('a ≈ b'): pk's at its end, the other
    impl's at its start, so that two such names never overlap."""
    first = impl == "pk"
    ax.annotate(" ≈ ".join(systems), line[-1] if first else line[0], fontsize=6,
                xytext=(-4 if first else 4, 5), textcoords="offset points",
                ha="right" if first else "left", color=colour)


def _coinciding(lines: dict[tuple[str, str], list]) -> dict[tuple[str, str], list[str]]:
    """The lines to draw, each with the systems whose line of the same impl is the same
    (within 1 %: one line at the plots' scale), which it stands for: those are not drawn,
    so none hides under it."""
    out: dict[tuple[str, str], list[str]] = {}
    for key, line in lines.items():
        twin = next((k for k in out if k[1] == key[1] and _same(lines[k], line)), None)
        if twin is None:
            out[key] = []
        else:
            out[twin].append(key[0])
    return out


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(xa == xb and abs(ya - yb) <= 1e-2 * max(abs(ya), abs(yb))
                                    for (xa, ya), (xb, yb) in zip(a, b))


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
    axis.set_minor_locator(_mpl().NullLocator())


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
        fig.legend([_mpl().Patch(color=c) for c in colours.values()], list(colours),
                   loc="outside right upper", fontsize=8, title="resource")
    fig.suptitle(title + "  (black tick: predicted time)")
    return fig


def roofline(points: Sequence[dict], roofs: dict[str, dict[str, float]], title: str) -> Figure:
    """Achieved bus bandwidth against size, under each system's NVLink ceiling and
    its latency slope (bytes / (launch + one hop)). ``points``: system, impl, size_bytes,
    busbw_GBps; ``roofs``: system -> {nvlink_GBps, alpha_s}."""
    fig, (ax,) = _figure(1, 8.5, 4.8)
    colours = _colours(list(roofs) + [p["system"] for p in points])
    sizes = [p["size_bytes"] for p in points] or [1024, 1 << 30]
    lo, hi = min(sizes) / 2, max(sizes) * 2
    ceilings: dict[float, list[str]] = defaultdict(list)
    for system, roof in roofs.items():
        ceilings[round(roof["nvlink_GBps"], 1)].append(system)
    for value, names in ceilings.items():
        ax.annotate(f"{value:g} GB/s: {', '.join(names)}", (0.01, value),
                    xycoords=("axes fraction", "data"), fontsize=6.5, va="bottom",
                    color=colours[names[0]])
    slopes: dict[float, list[str]] = defaultdict(list)    # one line per alpha, named
    for system, roof in roofs.items():
        ax.axhline(roof["nvlink_GBps"], color=colours[system], linewidth=0.9, linestyle=":")
        if roof["nvlink_GBps"] * 1e9 * roof["alpha_s"] > lo:     # the slope is in range
            slopes[roof["alpha_s"]].append(system)
    for alpha, names in slopes.items():
        knee = max(roofs[n]["nvlink_GBps"] for n in names) * 1e9 * alpha
        xs = [lo, min(hi, knee)]
        ax.plot(xs, [x / alpha / 1e9 for x in xs], color=colours[names[0]], linewidth=0.9,
                linestyle="--")
        ax.annotate(f"{alpha * 1e6:.3g} us: {', '.join(names)}", (xs[1], xs[1] / alpha / 1e9),
                    fontsize=6.5, ha="right", va="bottom", color=colours[names[0]])
    # points of one size sit side by side, one step per system, so that none hides another
    order = list(dict.fromkeys(p["system"] for p in points))
    dodge = {s: 2 ** (0.09 * (i - (len(order) - 1) / 2)) for i, s in enumerate(order)}
    for p in points:
        ax.scatter(p["size_bytes"] * dodge[p["system"]], p["busbw_GBps"],
                   color=colours[p["system"]], s=22,
                   marker="o" if p["impl"] == "pk" else "s",
                   facecolors="none" if p["impl"] != "pk" else colours[p["system"]])
    for system in roofs:
        ax.plot([], [], color=colours[system], marker="o", linestyle="", label=system)
    ax.scatter([], [], color="grey", marker="o", label="pk (searched best)")
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="s", label="nccl")
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    _bytes_axis(ax, sizes)
    ax.set_ylabel("bus bandwidth (GB/s)")
    _log_ticks(ax.yaxis, [p["busbw_GBps"] for p in points]
               + [r["nvlink_GBps"] for r in roofs.values()])
    drawn = "dotted: NVLink ceiling per GPU" + (
        "; dashed: latency slope, size / (launch + one hop)" if slopes else
        " (no latency slope: every size is past its knee)")
    ax.set_title(f"{title}\n{drawn}", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="outside right upper")
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
        ax.legend([_mpl().Patch(color=c) for c in colours.values()], list(colours), fontsize=6,
                  loc="best")
    fig.suptitle(title + "  (on each bar: the binding resource; * the best schedule changed)")
    return fig


def roofline_shares(points: Sequence[dict], title: str) -> Figure:
    """Percent of the roofline each way of running reaches, per program, a panel per system;
    ``points``: system, program, baseline_pct, best_pct. Programs are sorted by the
    baseline's share; a line joins each program's two points (the gain)."""
    systems = list(dict.fromkeys(p["system"] for p in points))
    fig = _mpl().Figure(figsize=(13, 3.6 * len(systems)), layout="constrained")
    for index, system in enumerate(systems, start=1):
        ax = fig.add_subplot(len(systems), 1, index)
        mine = sorted((p for p in points if p["system"] == system),
                      key=lambda p: (p["baseline_pct_of_roofline"], p["best_pct_of_roofline"]))
        xs = range(len(mine))
        for x, p in zip(xs, mine):
            ax.plot([x, x], [p["baseline_pct_of_roofline"], p["best_pct_of_roofline"]], color=OTHER_COLOUR, lw=0.8)
        ax.scatter(xs, [p["baseline_pct_of_roofline"] for p in mine], s=14, color=PALETTE[1],
                   marker="s", label="baseline (PyTorch + NCCL)", zorder=3)
        ax.scatter(xs, [p["best_pct_of_roofline"] for p in mine], s=14, color=PALETTE[0],
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
                ys = [p["baseline_pct_of_roofline"], p["best_pct_of_roofline"]]
                if None in ys:
                    continue
                ax.plot([x, x], ys, color=colours[variant], linewidth=1.0)
                ax.scatter([x], ys[:1], marker="s", s=18, facecolors="none",
                           edgecolors=colours[variant], zorder=3)
                ax.scatter([x], ys[1:], marker="o", s=18, color=colours[variant], zorder=3)
        ax.set_yscale("log")
        _log_ticks(ax.yaxis, [v for p in mine for v in (p["baseline_pct_of_roofline"], p["best_pct_of_roofline"])
                              if v is not None])
        ax.set_xticks(range(len(programs)))
        ax.set_xticklabels(programs, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("% of roofline")
        ax.set_title(system, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    line = _mpl().Line2D
    handles = [line([], [], color=c, linewidth=2) for c in colours.values()]
    handles += [line([], [], color="grey", marker="s", markerfacecolor="none", linestyle=""),
                line([], [], color="grey", marker="o", linestyle="")]
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
    patch = _mpl().Patch
    handles = [patch(color=c) for c in colours.values()]
    handles += [patch(facecolor="grey"), patch(facecolor="grey", hatch="//", edgecolor="white")]
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
