"""The model's predictions equal the golden file exactly (tests/golden/predictions.py writes
it): every case of the committed validation report and every row of the default what-if
study. A change that moves a prediction rewrites the file in the same commit."""
from __future__ import annotations

import gzip
import importlib.util
import json
import shlex
import sys
from pathlib import Path

from tests.golden.predictions import GOLDEN, default_study, predictions

ROOT = Path(__file__).resolve().parents[2]


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


def _run_examples():
    spec = importlib.util.spec_from_file_location("run_examples", ROOT / "docs" / "run_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("run_examples", module)
    spec.loader.exec_module(module)
    return module


def is_default_study(command: str) -> bool:
    """``pksim whatif`` with no study, --set or --vary: the default study (output folder and
    workers do not change what it prints)."""
    args = shlex.split(command, comments=True)[1:]
    rest = [a for i, a in enumerate(args)
            if a not in ("-o", "--output", "--workers", "--force")
            and (i == 0 or args[i - 1] not in ("-o", "--output", "--workers"))]
    return rest == ["whatif"]


def test_the_guides_default_study_block_matches_this_run():
    """docs/guide/default-study.md's study block (numbers within 2 %, words exact, as
    tests/test_docs.py checks every other example) against the tables this file's run of
    the study printed: in this file so that one worker runs the study once for both."""
    run_examples = _run_examples()
    page = ROOT / "docs" / "guide" / "default-study.md"
    (example,) = [ex for ex in run_examples.examples(page)
                  if is_default_study(ex.command)]
    _, printed = default_study()
    diff = run_examples.first_difference(example.output, printed.rstrip())
    assert diff is None, f"{page.name}: `{example.command}`: {diff} (run `make docs`)"
