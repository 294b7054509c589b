"""The model's predictions equal the golden file exactly (tests/golden/predictions.py writes
it): every case of the committed validation report and every row of the default what-if
study. A change that moves a prediction rewrites the file in the same commit."""
from __future__ import annotations

import gzip
import json

import pytest

from tests.golden.predictions import GOLDEN, predictions

pytestmark = pytest.mark.default_study      # its run of the default study serves test_docs too


def _diffs(want, got, at="") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{at}/{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{at}/{k}: new" for k in got.keys() - want.keys()]
        for k in sorted(want.keys() & got.keys()):
            out += _diffs(want[k], got[k], f"{at}/{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in _diffs(w, g, f"{at}[{i}]")]
    return [] if want == got else [f"{at}: golden {want!r}, now {got!r}"]


def test_predictions_equal_the_golden_file():
    want = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    got = json.loads(json.dumps(predictions()))          # the same JSON round trip
    diffs = _diffs(want, got)
    assert not diffs, f"{len(diffs)} predictions moved, first: " + "; ".join(diffs[:5])
