"""The multi-domain worlds predict what they predicted before the engine was made fast
(tests/golden/large_worlds.py: 4,608 and 9,216 ranks, four collectives, 4 KiB and 1 GiB, the
searched best and NCCL's pick): the same schedules, every time and busy time equal to 1e-9
relative.

The default suite predicts the slice DEFAULT (every collective at 4,608 ranks, two at 9,216: the
cheap ones); the rest, the broadcasts and the largest split sizes at 9,216 ranks (about 80 % of
this file's time), are marked ``exhaustive`` and run under ``make test-full``."""
from __future__ import annotations

import json
import math

import pytest

from tests.golden.large_worlds import GOLDEN, case_id, cases, predict_case

RTOL = 1e-9
EXPECTED = json.loads(GOLDEN.read_text())


def _same(got, want, where: str) -> list[str]:
    if isinstance(want, dict):
        if set(got) != set(want):
            return [f"{where}: keys {sorted(got)} != {sorted(want)}"]
        return [d for k in want for d in _same(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, float):
        return [] if math.isclose(got, want, rel_tol=RTOL, abs_tol=0.0) else \
            [f"{where}: {got!r} != {want!r}"]
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def test_the_golden_file_has_every_case():
    assert sorted(EXPECTED) == sorted(case_id(*c) for c in cases())
    assert {v["world"] for v in EXPECTED.values()} == {4608, 9216}


DEFAULT = {"gb200-nvl72x64/all-reduce/4KiB", "gb200-nvl72x64/all-reduce/1GiB",
           "gb200-nvl72x64/all-gather/36KiB", "gb200-nvl72x64/all-gather/9GiB",
           "gb200-nvl72x64/reduce-scatter/36KiB", "gb200-nvl72x64/reduce-scatter/9GiB",
           "gb200-nvl72x64/broadcast/1GiB",
           "gb200-nvl576x16/all-reduce/4KiB", "gb200-nvl576x16/all-gather/36KiB"}


def test_the_default_slice_is_cases_of_the_golden_file():
    assert DEFAULT <= set(EXPECTED)
    assert {k.split("/")[1] for k in DEFAULT} == {"all-reduce", "all-gather", "reduce-scatter",
                                                  "broadcast"}
    assert {k.split("/")[0] for k in DEFAULT} == {"gb200-nvl72x64", "gb200-nvl576x16"}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=() if case_id(*c) in DEFAULT else pytest.mark.exhaustive)
    for c in cases()], ids=lambda c: case_id(*c))
def test_large_world_prediction_is_unchanged(case):
    assert _same(predict_case(*case), EXPECTED[case_id(*case)], case_id(*case)) == []
