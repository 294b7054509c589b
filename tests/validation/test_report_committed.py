"""``pksim validate --report`` still reads the committed measurement files
(validation/data/report): the report of the committed cases against them gives the
committed report's numbers."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli
from tests.validation.committed import COMMITTED, committed_bundle, committed_report

SAME = ("cases", "compared", "measured_ok", "failed", "median_abs_error", "max_abs_error",
        "median_error", "within_10", "worst_case", "groups_ranked", "ranking_hits",
        "max_regret", "targets_met")


def test_report_of_the_committed_measurements_is_the_committed_report(tmp_path):
    bundle = committed_bundle(tmp_path / "bundle")
    args = ["validate", "--report", str(bundle), "-o", str(tmp_path / "rep"), "--json"]
    result = CliRunner().invoke(cli, args + [a for m in COMMITTED for a in ("--measured", m)])
    assert result.exit_code == 0, result.output
    want = committed_report()
    got = json.loads((tmp_path / "rep" / "report.json").read_text())
    for key in SAME:
        assert got["summary"][key] == pytest.approx(want["summary"][key]), key
        assert got["fused"]["summary"][key] == pytest.approx(want["fused"]["summary"][key]), key
    assert len(got["cases"]) == len(want["cases"]) == 1314
    case = got["cases"][0]          # sizes as docs/outputs.md names them, the old name beside
    assert case["size_bytes"] == case["bytes"] == want["cases"][0]["bytes"]
    assert json.loads(result.output)["median_abs_error"] == got["summary"]["median_abs_error"]
