"""Writing a report: report.json (the data, validation/report/data.py), report.md
(validation/report/markdown.py) and scatter.png (validation/report/scatter.py)."""
from __future__ import annotations

import json
from pathlib import Path

from hwmodels.errors import ConfigError
from validation.report.data import OUTPUTS
from validation.report.markdown import markdown
from validation.report.scatter import scatter


def check_outputs(out: Path, force: bool) -> None:
    """Refuse before any work if a report file exists (and not ``force``)."""
    clash = [n for n in OUTPUTS if (out / n).exists()]
    if clash and not force:
        raise ConfigError(f"{out / clash[0]}: already exists (use --force to overwrite the "
                          f"report, or -o to write it elsewhere)")


def write_report(report: dict, out: Path, force: bool = False) -> list[Path]:
    check_outputs(out, force)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "report.md").write_text(markdown(report))
    scatter(report, out / "scatter.png")
    return [out / n for n in OUTPUTS]
