"""A microbenchmark's JSON lines (the rows a program prints when run alone, as committed under
validation/data/report) in run.py's microbench.json form, so that ``pksim calibrate
--from-json`` reads them. Each row is kept as it is, but for one key added to its params,
``run``, naming the file it came from: rows of the same point measured on several GPUs stay
apart (fit.merge_results keeps one row per benchmark, params and bytes).

    python -m validation.calibrate.convert --run a=A.jsonl.gz --run b=B.jsonl.gz \\
        --device "NVIDIA H200" --date DATE --command "..." -o OUT.json.gz

(the shifted moves' calibration input, docs/decisions/D63.md, was written so: MANIFEST.toml).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Sequence

from hwmodels.errors import PksimError, ValidationError


def read_rows(path: Path) -> list[dict]:
    """The JSON object on every non-empty line of ``path`` (gzip-compressed if .gz)."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{path}: cannot read ({exc})") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path}: line {n} is not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("params"), dict):
            raise ValidationError(f"{path}: line {n} is not a record with params")
        rows.append(row)
    return rows


def as_results(runs: Sequence[tuple[str, Path]], device: str, date: str, command: str) -> dict:
    """The microbench.json document of the rows of every (name, file) in ``runs``, in order,
    each row's params with ``run`` = its name."""
    results = []
    for name, path in runs:
        for row in read_rows(path):
            results.append({**row, "params": {**row["params"], "run": name}})
    return {"device": {"name": device}, "date": date, "command": command, "results": results}


def dumps(doc: dict) -> bytes:
    """The document as gzip-compressed JSON, byte for byte the same from the same rows (no
    time in the gzip header), so that its sha256 in MANIFEST.toml can be checked."""
    return gzip.compress(json.dumps(doc, indent=1).encode() + b"\n", mtime=0)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True, metavar="NAME=FILE",
                    help="a JSON-lines file and the name its rows' params get as 'run'")
    ap.add_argument("--device", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--command", required=True, help="what measured the rows")
    ap.add_argument("-o", "--out", required=True, type=Path)
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    a = ap.parse_args(argv)
    try:
        runs = []
        for item in a.run:
            name, sep, file = item.partition("=")
            if not sep or not name or not file:
                raise ValidationError(f"--run {item!r}: expected NAME=FILE")
            runs.append((name, Path(file)))
        if a.out.exists() and not a.force:
            raise ValidationError(f"{a.out}: already exists (use --force to overwrite it)")
        a.out.write_bytes(dumps(as_results(runs, a.device, a.date, a.command)))
    except PksimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
