"""The Gantt chart of a timeline (``pksim trace --gantt``, a study's ``timeline`` plot): a
row per track, grouped by run (pk's best and the baseline, or a program's two runs) under a
heading that names the run once, and a legend that says what each phase is."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

from pksim_core.plots import OTHER, _mpl, legend_groups

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# What the phases of a timeline are (a span's ``group``): the steps of an algorithm
# (pksim_core.workloads.collectives), the generated kernels' phases (pksim_core.workloads.phases:
# "k" + the op), NCCL's own, a fused op's parts, the host.
PHASES = {
    "rs": "reduce-scatter steps",
    "ag": "all-gather steps",
    "a2a": "all-to-all steps",
    "ar1": "one-shot all-reduce steps",
    "bcast": "broadcast steps",
    "reduce": "reduce steps",
    "gather": "gather steps",
    "scatter": "scatter steps",
    "chain": "a chain through the ranks (NCCL's tree in a node)",
    "h-rs-in": "hierarchical: reduce-scatter inside a domain",
    "h-rs-x": "hierarchical: reduce-scatter across domains",
    "h-ag-in": "hierarchical: all-gather inside a domain",
    "h-ag-x": "hierarchical: all-gather across domains",
    "kar": "the generated all-reduce kernel's phases (loads, sums, stores)",
    "kag": "the generated all-gather kernel's phases",
    "krs": "the generated reduce-scatter kernel's phases",
    "ka2a": "the generated all-to-all kernel's phases",
    "kbc": "the generated broadcast kernel's phases",
    "kred": "the generated reduce kernel's phases",
    "kga": "the generated gather kernel's phases",
    "ksc": "the generated scatter kernel's phases",
    "kv": "the generated -v kernel's phases",
    "nvls-copy": "NCCL NVLS: copies into and out of its registered buffers",
    "launch": "kernel launch",
    "launch floor": "the host's launch floor (nothing in flight)",
    "GEMM": "GEMM tiles",
    "epilogue": "the GEMM's epilogue",
    "outputs": "the owners' outputs written",
    "library": "the library kernel",
    "attention": "attention blocks",
}


def explain(group: str) -> str:
    """A legend entry: the phase and what it is ('ag+rs': both at once, lanes in different
    phases)."""
    if group == OTHER:
        return OTHER
    parts = group.split("+")
    if len(parts) > 1:
        return f"{group}: {' and '.join(parts)} at once (lanes in different phases)"
    return f"{group}: {PHASES[group]}" if group in PHASES else group


def _phase(event: dict) -> str:
    """A span's phase; phases at once in either order ('rs+ag', 'ag+rs') are one."""
    return "+".join(sorted(event["group"].split("+")))


def gantt(events: Sequence[dict], title: str, max_tracks: int = 40) -> Figure:
    """Horizontal bars per track, in microseconds; ``events`` have track, name, start_s,
    end_s (seconds), group, and optionally run: the tracks of each run are listed under a
    heading naming it, so that no row repeats it."""
    runs: dict[str, list[str]] = defaultdict(list)
    for e in events:
        tracks = runs[e.get("run", "")]
        if e["track"] not in tracks:
            tracks.append(e["track"])
    rows: dict[tuple[str, str], int] = {}
    labels: list[str] = []
    headings: list[tuple[int, str]] = []
    for run, tracks in runs.items():
        if run and len(runs) > 1:
            headings.append((len(labels), run))
            labels.append("")
        for track in tracks:
            if len(rows) < max_tracks:
                rows[(run, track)] = len(labels)
                labels.append(track)
    fig = _mpl().Figure(figsize=(11, 0.32 * len(labels) + 1.8), layout="constrained")
    ax = fig.add_subplot()
    weights: dict[str, float] = defaultdict(float)
    for e in events:
        weights[_phase(e)] += e["end_s"] - e["start_s"]
    entry, groups = legend_groups(weights)
    for e in events:
        row = rows.get((e.get("run", ""), e["track"]))
        if row is not None:
            ax.barh(row, (e["end_s"] - e["start_s"]) * 1e6, left=e["start_s"] * 1e6,
                    height=0.7, color=groups[entry[_phase(e)]], edgecolor="white",
                    linewidth=0.3)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    for row, run in headings:
        if row:
            ax.axhline(row - 0.5, color="grey", linewidth=0.6)
        ax.text(0.0, row, f" {run}", transform=ax.get_yaxis_transform(), fontsize=8,
                fontweight="bold", va="center", ha="left")
    ax.set_ylim(len(labels) - 0.5, -0.6)
    ax.set_xlabel("time (us)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend([_mpl().Patch(color=c) for c in groups.values()], [explain(g) for g in groups],
               fontsize=7, loc="outside lower center", ncols=2, title="phase")
    return fig
