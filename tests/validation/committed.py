"""The committed validation report as a bundle: its cases (with the predictions the report
was made from) and the measurement files it names, so that ``pksim validate --report`` can
be run on the committed measurements without a GPU or a fresh --prepare."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "validation" / "data" / "report" / "report.json.gz"
# The measurement files the committed report was made from (it names them by their old
# place, validation/data/; they lie in validation/data/report/ now).
COMMITTED = tuple(str(ROOT / "validation" / "data" / "report" / Path(p).name)
                  for p in json.loads(gzip.decompress(REPORT.read_bytes()))["measured_files"])
CASE_KEYS = ("id", "op", "algorithm", "mechanism", "world", "bytes", "dtype", "blocks_per_rank",
             "label", "predicted_s", "bound_resource", "not_predicted")
FUSED_KEYS = ("id", "kind", "op", "overlap", "algorithm", "mechanism", "world", "m", "n", "k",
              "comm_blocks", "tile_order", "label", "predicted_s", "predicted_baseline_s",
              "bound_resource", "not_predicted")


def committed_report() -> dict:
    return json.loads(gzip.decompress(REPORT.read_bytes()))


def committed_bundle(out: Path) -> Path:
    """A bundle (cases.json, prepare.json, fused/cases.json) of the committed report's cases."""
    rep = committed_report()
    (out / "fused").mkdir(parents=True)
    (out / "cases.json").write_text(json.dumps([{k: c.get(k) for k in CASE_KEYS}
                                                for c in rep["cases"]]))
    (out / "prepare.json").write_text(json.dumps(rep["prepare"]))
    fused = [{k: (None if c.get(k) == "-" else c.get(k)) for k in FUSED_KEYS}
             for c in rep["fused"]["cases"]]
    (out / "fused" / "cases.json").write_text(json.dumps(fused))
    return out
