"""The published judge as data (``as_dict``: seconds, fractions, null where nothing applies)
and as pages: ``published.md`` plus one overlay plot per predicted curve in ``published/``
(measured and predicted time over size, log-log, NCCL's pick or pk's schedule written at each
point). ``write_pages(reports, out_dir, force)`` refuses to overwrite without ``force``."""
from __future__ import annotations

from pathlib import Path

from hwmodels.errors import ConfigError
from pksim_core.versus import PARTS
from pksim_core.vocabulary import renamed
from validation.published.judge import BANDS, EntryReport, miss_reason

# A point's keys renamed in this release (the old names stay as aliases: docs/outputs.md).
POINT_RENAMED = {"bytes": "size_bytes", "schedule": "label", "bound": "bound_resource"}

PAGE = "published.md"
PLOTS = "published"
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs" / "validation"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def _band_dict(bands: dict) -> dict:
    return {name: ({"n": b["n"], "median_abs_error": b["median"], "p90_abs_error": b["p90"],
                    "max_abs_error": b["max"]} if (b := bands.get(name)) else None)
            for name, _lo, _hi in BANDS}


def as_dict(reports: list[EntryReport], versus: list[dict] | None = None) -> dict:
    """The whole report as one JSON-able object (``versus``: judge.versus's rows)."""
    entries = []
    for r in reports:
        entries.append({
            "entry": r.name, "role": r.role, "system": r.system, "system_text": r.system_text,
            "not_predicted": r.reason, "nccl_version": r.nccl_version, "rows": r.rows,
            "rows_predicted": r.predicted, "bands": _band_dict(r.bands),
            "target_met": r.targets.get("met"),
            "curves": [{"label": c.label, "implementation": c.implementation, "kind": c.kind,
                        "algorithm": c.algorithm, "launch": c.launch, "world": c.world,
                        "note": c.note, "bands": _band_dict(c.bands),
                        "targets": c.targets or None, "miss": miss_reason(c),
                        "points": [renamed({"bytes": p.bytes, "measured_s": p.measured_s,
                                            "predicted_s": p.predicted_s, "error": p.error,
                                            "schedule": p.label, "bound": p.bound,
                                            "not_predicted": p.reason}, POINT_RENAMED)
                                   for p in c.points]}
                       for c in r.curves],
            "picks": [renamed({"coll": p.coll, "bytes": p.bytes, "logged": p.logged,
                               "model": p.model, "match": p.match,
                               "channels_logged": p.channels_logged,
                               "channels_model": p.channels_model}, ("bytes",))
                      for p in r.picks] or None})
    judged = [r for r in reports if r.targets.get("judged")]
    return {"entries": entries, "versus_nccl": versus, "summary": {
        "entries": len(reports), "judged": len(judged),
        "targets_met": sum(bool(r.targets["met"]) for r in judged),
        "picks": sum(len(r.picks) for r in reports),
        "picks_matched": sum(p.match for r in reports for p in r.picks)}}


def summary_rows(reports: list[EntryReport]) -> list[list[str]]:
    """entry, role, system, rows predicted, then median / p90 / max per band, target."""
    rows = []
    for r in reports:
        cells = [r.name, r.role, r.system or "-", f"{r.predicted}/{r.rows}"]
        for name, _lo, _hi in BANDS:
            b = r.bands.get(name)
            cells.append("-" if b is None else
                         f"{b['median'] * 100:.0f}/{b['p90'] * 100:.0f}/{b['max'] * 100:.0f}")
        met = r.targets.get("met")
        cells.append("-" if met is None else ("met" if met else "MISSED"))
        rows.append(cells)
    return rows


HEADER = ["entry", "role", "system", "predicted"] + \
    [f"{name} med/p90/max %" for name, _lo, _hi in BANDS] + ["target"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def plot_name(r: EntryReport, label: str) -> str:
    return f"{r.name}--{_slug(label)}.png"


def versus_rows(versus: list[dict]) -> list[list[str]]:
    """One row per (system, size): both schedules and bindings, times, pk - NCCL per part."""
    us = lambda x: f"{x * 1e6:.1f}"                                        # noqa: E731
    return [[v["system"], str(v["size_bytes"] >> 20), v["pk"]["label"], v["pk"]["busiest_resource"],
             v["nccl"]["label"], v["nccl"]["busiest_resource"], "yes" if v["same_busiest_group"] else "NO",
             us(v["pk"]["time_s"]), us(v["nccl"]["time_s"])]
            + [us(v["difference_parts"][k]) for k in PARTS] for v in versus]


VERSUS_HEADER = ["system", "MiB", "pk", "pk bound", "NCCL", "NCCL bound", "same",
                 "pk us", "NCCL us"] + [f"d {k.removesuffix('_s')} us" for k in PARTS]


def _versus_section(versus: list[dict]) -> list[str]:
    same = sum(v["same_busiest_group"] for v in versus)
    return ["", "## pk against NCCL from 64 MiB", "",
            "All-reduce, pk's best schedule against NCCL's pick (its default eager launch), "
            "both with the switch's reduction (NVLS): the resource class busiest over each run, "
            "and pk - NCCL split into parts that add up to the difference (pksim_core.versus; "
            "docs/decisions/D44.md): launch, the host's floor, the binding resource's payload "
            "at its raw capacity, its wire overhead (protocol and mechanism efficiency), and "
            f"what is exposed beyond it. Same binding resource in {same} of {len(versus)}.",
            ""] + _table(VERSUS_HEADER, versus_rows(versus))


def markdown(reports: list[EntryReport], versus: list[dict] | None = None) -> str:
    d = as_dict(reports)["summary"]
    lines = ["# Multi-GPU: published measurements", "",
             "Generated by `pksim validate --published --write-docs` (do not edit). Every entry "
             "of validation/published/corpus predicted; |error| = |predicted / measured - 1|, "
             "per size band (bytes per call as nccl-tests prints them). Targets: NCCL median "
             "<= 10 % and p90 <= 25 % for sizes >= 64 KiB, median <= 25 % below; custom "
             "kernels median <= 20 %; the logged picks reproduced.", "",
             f"{d['judged']} entries judged of {d['entries']}, targets met in "
             f"{d['targets_met']}; NCCL picks reproduced: {d['picks_matched']} of "
             f"{d['picks']}.", "", "## Summary", ""]
    lines += _table(HEADER, summary_rows(reports))
    if versus:
        lines += _versus_section(versus)
    for r in reports:
        lines += ["", f"## {r.name}", "",
                  f"{r.role}; system: {r.system_text} -> "
                  f"{r.system or 'not predicted'}; NCCL {r.nccl_version or 'not stated'}."]
        if r.reason:
            lines += ["", f"Not predicted: {r.reason}."]
        for c in r.curves:
            lines += ["", f"### {c.label} ({c.implementation}, {c.kind}"
                      f"{', ' + c.algorithm if c.algorithm else ''}"
                      f"{', launch ' + c.launch if c.launch else ''}, {c.world or '?'} ranks)"]
            if c.note:
                lines += ["", f"Note: {c.note}."]
            miss = miss_reason(c)
            if miss:
                lines += ["", f"Missed: {miss}."]
            if any(p.predicted_s is not None for p in c.points):
                lines += ["", f"![{c.label}]({PLOTS}/{plot_name(r, c.label)})"]
            rows = [[str(p.bytes) if p.bytes is not None else "-",
                     f"{p.measured_s * 1e6:.2f}" if p.measured_s else "-",
                     f"{p.predicted_s * 1e6:.2f}" if p.predicted_s else "-",
                     _pct(p.error), p.label or "-", p.bound or (p.reason or "-")]
                    for p in c.points]
            lines += [""] + _table(["bytes", "measured us", "predicted us", "error",
                                    "schedule", "bound / why not"], rows)
        if r.picks:
            lines += ["", "NCCL's logged picks against the model's:", ""]
            lines += _table(["coll", "bytes", "logged", "model", "channels logged",
                             "channels model", "match"],
                            [[p.coll, str(p.bytes), p.logged, p.model or "-",
                              p.channels_logged or "-", str(p.channels_model or "-"),
                              "yes" if p.match else "NO"] for p in r.picks])
    return "\n".join(lines) + "\n"


def _plot(r: EntryReport, curve, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = [p for p in curve.points if p.predicted_s is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog([p.bytes for p in pts], [p.measured_s * 1e6 for p in pts], "o-",
              label="measured")
    ax.loglog([p.bytes for p in pts], [p.predicted_s * 1e6 for p in pts], "s--",
              label="predicted")
    last = None
    for p in pts:
        if p.label != last:
            ax.annotate(p.label.removeprefix("nccl/"), (p.bytes, p.predicted_s * 1e6),
                        fontsize=7, rotation=30, xytext=(3, 6), textcoords="offset points")
            last = p.label
    ax.set_xlabel("bytes")
    ax.set_ylabel("time (us)")
    ax.set_title(f"{r.name}: {curve.label}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_pages(reports: list[EntryReport], out_dir: Path, force: bool = False,
                versus: list[dict] | None = None) -> list[Path]:
    """published.md and the plots under ``out_dir``; existing files need ``force``."""
    page = out_dir / PAGE
    plots = out_dir / PLOTS
    if not force and (page.exists() or plots.exists()):
        raise ConfigError(f"{page if page.exists() else plots} exists (give --force to "
                          f"overwrite it)")
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    files = []
    for r in reports:
        for c in r.curves:
            if any(p.predicted_s is not None for p in c.points):
                path = plots / plot_name(r, c.label)
                _plot(r, c, path)
                files.append(path)
    page.write_text(markdown(reports, versus))
    return [page] + files


__all__ = ["as_dict", "markdown", "write_pages", "summary_rows", "versus_rows", "HEADER",
           "VERSUS_HEADER", "DOCS_DIR"]
