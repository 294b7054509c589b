"""``pksim validate --ported PROFILE`` (issue #43): the suite predicted on another system with a
named kernel profile and judged on that GPU's measurement files, with the portability targets;
its JSON keeps every key of ``--report --json``. The quick suite's cases, "measured" as their
h200-virtual-calibrated predictions x 1.05: no GPU."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli
from validation.report.ported import TARGETS, judge, p90, unstable


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ported")
    bundle = tmp / "bundle"
    res = CliRunner().invoke(cli, ["validate", "--suite", "quick", "--prepare", "--no-build",
                                   "-o", str(bundle)])
    assert res.exit_code == 0, res.output
    cases = json.loads((bundle / "cases.json").read_text())
    rows = [{"id": c["id"], "ok": True, "median_s": c["predicted_s"] * 1.05,
             "device": "NVIDIA H200", **{k: c[k] for k in ("op", "algorithm", "mechanism",
                                                             "world", "count", "dtype")}}
            for c in cases if c.get("op") and c["predicted_s"]]
    path = tmp / "measured.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = CliRunner().invoke(cli, ["validate", "--report", str(bundle), "--measured",
                                      str(path), "-o", str(tmp / "rep"), "--json"])
    assert report.exit_code == 0, report.output
    return path, json.loads(report.stdout), tmp


def test_ported_predicts_on_the_target_with_the_profile(measured):
    path, report, tmp = measured
    out = tmp / "ported"
    res = CliRunner().invoke(cli, ["validate", "--suite", "quick", "--ported", "pk-hopper",
                                   "--system", "hgx-h200-virtual", "--measured", str(path),
                                   "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert set(report) <= set(got)                   # --report --json's keys, and "ported"
    port = got["ported"]
    assert (port["profile"], port["system"], port["measured_device"]) == \
        ("pk-hopper", "hgx-h200-virtual", "NVIDIA H200")
    assert port["same_gpu_as_profile"] and port["note"] == \
        "virtual ranks on one GPU never exercise NVLink"
    assert set(port["targets"]) == set(TARGETS["datasheet"])
    assert json.loads((out / "ported.json").read_text()) == port
    # the bundle was predicted on the target with the profile (the ported system file)
    system_file = (out / "ported-system.toml").read_text()
    assert 'name = "hgx-h200-virtual-ported-pk-hopper"' in system_file
    assert json.loads((out / "bundle" / "cases.json").read_text())


def test_ported_refuses_another_gpus_rows_and_missing_options(measured, tmp_path):
    path, _, _ = measured
    args = ["validate", "--suite", "quick", "--ported", "pk-hopper", "--measured", str(path)]
    res = CliRunner().invoke(cli, args + ["--system", "h100-virtual", "-o", str(tmp_path / "a")])
    assert res.exit_code == 2
    assert "the rows were measured on NVIDIA H200, not on h100-virtual's H100 SXM5 80GB" in \
        res.output
    res = CliRunner().invoke(cli, args + ["-o", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--ported needs --system TARGET" in res.output
    res = CliRunner().invoke(cli, ["validate", "--ported", "nope", "--system",
                                   "hgx-h200-virtual", "--measured", str(path), "-o",
                                   str(tmp_path / "c")])
    assert res.exit_code == 2 and "unknown kernel profile 'nope'" in res.output


def test_targets_and_p90_in_closed_form():
    assert p90([0.01 * i for i in range(1, 11)]) == pytest.approx(0.09)
    rep = {"summary": {"median_abs_error": 0.08, "max_abs_error": 0.3, "groups_within_5": 86,
                       "groups_ranked": 90},
           "fused": {"summary": {"median_abs_error": 0.11, "groups_within_5": 2,
                                 "groups_ranked": 3}},
           "cases": [{"error": e} for e in (0.05, -0.1, 0.15, 0.3)]}
    got = judge(rep, TARGETS["datasheet"])
    assert got["median_abs_error"]["met"] and not got["p90_abs_error"]["met"]
    assert got["groups_within_5"] == {"value": 86, "of": 90, "target": 85, "met": True}
    assert not got["fused_median_abs_error"]["met"]
    # on fewer groups the count scales: 14 of 15 fused picks is 3 of 3 (14/15 x 3 -> 3)
    hw = judge(rep, TARGETS["hardware-only"])
    assert hw["fused_groups_within_5"] == {"value": 2, "of": 3, "target": 3, "met": False}


def test_unstable_cases_are_reported_apart(tmp_path):
    """D73: a case whose repeats' interquartile range is over 20 % of their median is listed,
    and the median and max |error| are also given without it."""
    rows = [{"id": "a", "ok": True, "median_s": 1.0, "times_s": [1.0, 1.0, 1.01, 0.99, 1.0]},
            {"id": "b", "ok": True, "median_s": 1.0, "times_s": [0.5, 1.0, 1.0, 2.0, 3.0]},
            {"id": "c", "ok": True, "median_s": 1.0}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = {"cases": [{"id": "a", "error": 0.02}, {"id": "b", "error": -0.8},
                     {"id": "c", "error": 0.1}, {"id": "d", "error": None}]}
    got = unstable(rep, [path])
    assert got == {"unstable_cases": ["b"], "stable_median_abs_error": pytest.approx(0.06),
                   "stable_max_abs_error": 0.1}
