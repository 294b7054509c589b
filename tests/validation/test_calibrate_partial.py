"""``pksim calibrate`` fails loudly: a microbenchmark that fails stops it with the list and
writes nothing, unless --partial, which fits the rest and records the missing groups. The GPU
run is replaced by a results file (the first H200 run) plus a failed build and a failed run."""
from __future__ import annotations

import gzip
import json
import tomllib

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from hwmodels.resources import data_dir
from pksim_cli import calibrate as calibrate_cli
from pksim_cli.main import cli
from validation.calibrate.device import from_record
from validation.calibrate.microbench import failures

RESULTS = data_dir() / "calibration" / "h200-microbench-2026-12-02.json.gz"


@pytest.fixture
def failed_run(tmp_path, monkeypatch):
    """calibrate's GPU run, faked: block_moves did not build, signal_chain timed out."""
    doc = json.loads(gzip.decompress(RESULTS.read_bytes()))
    doc["builds"] = [{"name": "block_moves", "ok": False,
                      "log_tail": "fatal error: collectives/collective.cuh: No such file"},
                     {"name": "hbm_copy", "ok": True, "log_tail": ""}]
    doc["runs"] = [{"bench": "hbm_copy", "status": "ok"},
                   {"bench": "signal_chain", "status": "timeout after 90 s"}]
    run_dir = tmp_path / "mb"
    run_dir.mkdir()
    (run_dir / "microbench.json").write_text(json.dumps(doc))

    def fake_run(out_dir, device, python, quick, echo, only=(), budget_s=None):
        return 1, run_dir / "microbench.json"
    monkeypatch.setattr(calibrate_cli, "find_gpu", lambda device: "GPU 0: NVIDIA H200 (fake)")
    monkeypatch.setattr(calibrate_cli, "probe_device",
                        lambda device, python: from_record(doc["device"], "the fake GPU"))
    monkeypatch.setattr(calibrate_cli, "require", lambda *a: None)
    monkeypatch.setattr(calibrate_cli, "run_microbenchmarks", fake_run)
    return run_dir


def test_failures_lists_builds_and_runs(failed_run):
    got = failures(failed_run / "microbench.json")
    assert set(got) == {"block_moves", "signal_chain"}
    assert got["block_moves"].startswith("build failed: fatal error: collectives/collective.cuh")
    assert got["signal_chain"] == "timeout after 90 s"


def test_a_failed_microbenchmark_stops_calibrate_and_writes_nothing(failed_run, tmp_path):
    out = tmp_path / "cal.toml"
    res = CliRunner().invoke(cli, ["calibrate", "-o", str(out), "--results-out", str(failed_run)])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("pksim: error: 2 microbenchmark(s) failed, nothing written")
    assert "block_moves: build failed" in last and "signal_chain: timeout" in last
    assert "--partial" in last
    assert not out.exists()


def test_partial_records_the_missing_groups(failed_run, tmp_path):
    out = tmp_path / "cal.toml"
    res = CliRunner().invoke(cli, ["calibrate", "--partial", "-o", str(out), "--results-out",
                                   str(failed_run), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert set(report["missing"]) == {"block_moves", "signal_chain"}
    data = tomllib.loads(out.read_text())
    assert set(data["calibration"]["missing"]) == {"block_moves", "signal_chain"}
    assert "--partial" in data["calibration"]["command"]
    system = load_system(str(out))
    assert set(system.calibration["missing"]) == {"block_moves", "signal_chain"}


def test_help_names_partial():
    res = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert res.exit_code == 0 and "--partial" in res.output
