"""The golden file of the model's predictions: every case of the committed validation report
(collectives and fused kernels, re-predicted on its calibrated system) and every row of the
default what-if study. A refactoring must leave this file unchanged; a model change rewrites
it on purpose and says why in its commit.

    python -m tests.golden.predictions            # rewrite tests/golden/predictions.json.gz
"""
from __future__ import annotations

import functools
import gzip
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from click.testing import CliRunner

from hwmodels.catalog import load_system
from pksim_cli.main import cli
from validation.suites.suite import Candidate
from validation.prepare.predict import predict_candidate, predict_fused_case

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "validation" / "data" / "report" / "report.json.gz"
# The report's path as the golden file records it ("report"): where the report lay when the
# golden file was written (it moved to validation/data/report/ since); a label, not a path.
REPORT_LABEL = "validation/data/h200-validate-2026-12-04-run47/report.json.gz"
GOLDEN = Path(__file__).with_name("predictions.json.gz")
KEPT = ("predicted_s", "bound_s", "bound_resource", "predicted_baseline_s")
VOLATILE = ("wall_s", "seconds")   # a what-if row's wall time (and its old name)


def report_cases() -> tuple[str, list[dict], list[dict]]:
    rep = json.loads(gzip.decompress(REPORT.read_bytes()))
    return rep["prepare"]["system"], rep["cases"], rep["fused"]["cases"]


def _collective(args: tuple[str, dict]) -> tuple[str, dict]:
    system_name, c = args
    cand = Candidate(op=c["op"], algorithm=c["algorithm"], mechanism=c["mechanism"],
                     world=c["world"], nbytes=c["bytes"], blocks_per_rank=c["blocks_per_rank"],
                     dtype=c["dtype"])
    fields, why = predict_candidate(load_system(system_name), cand)
    return c["id"], {k: fields.get(k) for k in KEPT if k in fields} | {"not_predicted": why}


def _fused(args: tuple[str, dict]) -> tuple[str, dict]:
    system_name, c = args
    case = {k: (None if v == "-" else v) for k, v in c.items()}   # the report prints "-"
    fields, why = predict_fused_case(load_system(system_name), case)
    return c["id"], {k: fields.get(k) for k in KEPT if k in fields} | {"not_predicted": why}


@functools.lru_cache(maxsize=1)
def default_study() -> tuple[tuple[dict, ...], str]:
    """The default what-if study, run once per process: its results.json rows and what
    ``pksim whatif`` printed (at the width docs/run_examples.py gives its examples).
    The golden test compares the rows; tests/test_docs.py compares the guide's
    default-study block with the printed tables, so CI runs the study only once."""
    with tempfile.TemporaryDirectory() as tmp:
        res = CliRunner().invoke(cli, ["whatif", "-o", tmp, "--force", "--no-plots"],
                                 env={"COLUMNS": "100"})
        if res.exit_code != 0:
            raise RuntimeError(f"pksim whatif failed: {res.output}")
        rows = json.loads((Path(tmp) / "results.json").read_text())["rows"]
    return tuple(rows), res.output


def whatif_rows() -> list[dict]:
    rows, _ = default_study()
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def predictions(workers: int = 2) -> dict:
    system_name, cases, fused = report_cases()
    with ProcessPoolExecutor(workers) as pool:
        coll = dict(pool.map(_collective, [(system_name, c) for c in cases], chunksize=32))
        fus = dict(pool.map(_fused, [(system_name, c) for c in fused], chunksize=4))
    return {"report": REPORT_LABEL, "system": system_name,
            "collectives": coll, "fused": fus, "whatif": whatif_rows()}


def encode(data: dict) -> bytes:
    return gzip.compress(json.dumps(data, indent=0, sort_keys=True).encode(), mtime=0)


def main() -> int:
    GOLDEN.write_bytes(encode(predictions()))
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
