"""`pksim calibrate --ranks N` without a GPU: a fake launcher (tests/validation/fake_ranks.py)
stands in for torchrun and the N ranks and answers with times from known figures; the fit
recovers them, the file says how each remote-path key was measured, and a one-device run
says that its path was local."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pksim_cli.calibrate as cli_calibrate
from hwmodels.catalog import load_system
from pksim_cli.main import cli
from validation.calibrate import ranks

FAKE = Path(__file__).with_name("fake_ranks.py")
sys.path.insert(0, str(FAKE.parent))
import fake_ranks  # noqa: E402

REMOTE = "gpu.transfer_remote."


@pytest.fixture
def no_gpu_needed(monkeypatch, tmp_path):
    """The GPU probe, the environment check and the nvcc build stand aside: the fake
    launcher needs none of them."""
    monkeypatch.setattr(cli_calibrate, "find_gpu", lambda device: "GPU 0: Fake GPU")
    monkeypatch.setattr(cli_calibrate, "require", lambda *a, **k: None)
    monkeypatch.setattr(ranks, "build", lambda cache=None: tmp_path / "libpeer_moves.so")


def _calibrate(tmp_path, path="peer", n=4, extra=()):
    out = tmp_path / f"ranks-{path}.toml"
    launcher = f"{{python}} {FAKE} --path {path} --nproc {{n}} {' '.join(extra)}"
    result = CliRunner().invoke(cli, ["calibrate", "--ranks", str(n), "--launcher", launcher,
                                      "--results-out", str(tmp_path / f"run-{path}"),
                                      "-o", str(out), "--json"])
    return result, out


def test_the_fit_recovers_the_figures_and_marks_how_they_were_measured(tmp_path, no_gpu_needed):
    result, out = _calibrate(tmp_path, "peer")
    assert result.exit_code == 0, result.output
    system = load_system(str(out))
    truth = fake_ranks.TRUTH
    want = {"tma_write_per_sm_GBps": truth["tma write"] / 1e9,
            "tma_read_per_sm_GBps": truth["tma read"] / 1e9,
            "tma_reduce_per_sm_GBps": truth["tma reduce"] / 1e9,
            "ldst_write_per_sm_GBps": truth["register write"] / 1e9,
            "ldst_read_per_sm_GBps": truth["register read"] / 1e9,
            "copy_engine_setup_us": truth["ce setup"] * 1e6}
    remote = system.gpu.transfer_remote
    got = {"tma_write_per_sm_GBps": remote.tma_write_Bps_per_sm / 1e9,
           "tma_read_per_sm_GBps": remote.tma_read_Bps_per_sm / 1e9,
           "tma_reduce_per_sm_GBps": remote.tma_reduce_Bps_per_sm / 1e9,
           "ldst_write_per_sm_GBps": remote.ldst_write_Bps_per_sm / 1e9,
           "ldst_read_per_sm_GBps": remote.ldst_read_Bps_per_sm / 1e9,
           "copy_engine_setup_us": remote.copy_engine_setup_s * 1e6}
    for key, value in want.items():                   # the points carry a +-1 % ripple
        assert got[key] == pytest.approx(value, rel=0.03), key
    assert remote.tma_message_half_B == pytest.approx(truth["half"], rel=0.15)
    for key in ranks.WRITTEN:
        prov = system.provenance[REMOTE + key]
        assert prov.tag == "calibrated" and prov.source.startswith("pksim calibrate --ranks 4 on Fake GPU")
        assert "4 devices" in prov.source and "LOCAL" not in prov.source
    # not measured: inherited from the parent with its own provenance
    assert system.provenance[REMOTE + "multimem_per_sm_GBps"].tag == "estimate"
    report = json.loads(result.stdout)
    groups = {g["group"]: g for g in report["groups"]}
    assert groups["tma write, one direction"]["median_abs_error"] < 0.02
    # judged, not fitted: both directions and all pairs, with the fitted figures
    assert groups["tma, all pairs at once"]["fitted"] == [] and \
        groups["tma, all pairs at once"]["median_abs_error"] < 0.03
    assert report["path"] == "peer" and report["devices"] == 4


def test_one_device_says_the_path_was_local(tmp_path, no_gpu_needed):
    result, out = _calibrate(tmp_path, "local")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert 'path = "local"' in text and "check the machinery" in text
    system = load_system(str(out))
    for key in ranks.WRITTEN:
        prov = system.provenance[REMOTE + key]
        assert prov.tag == "assumed" and "LOCAL path" in prov.source and "not of NVLink" in prov.source
    assert system.calibration["ranks"] == {**system.calibration["ranks"], "ranks": 4,
                                           "devices": 1, "path": "local"}
    # judged with the fitted figures: all pairs at once, each rank timing its own work
    report = json.loads(result.stdout)
    judged = {g["group"]: g for g in report["groups"]}["register, all pairs at once"]
    assert judged["median_abs_error"] < 0.03


def test_refit_from_saved_results(tmp_path, no_gpu_needed):
    result, _ = _calibrate(tmp_path, "peer")
    assert result.exit_code == 0, result.output
    again = CliRunner().invoke(cli, ["calibrate", "--ranks", "4", "--from-json",
                                     str(tmp_path / "run-peer" / "peers.json"),
                                     "-o", str(tmp_path / "again.toml")])
    assert again.exit_code == 0, again.output
    first = load_system(str(tmp_path / "ranks-peer.toml")).gpu.transfer_remote
    assert load_system(str(tmp_path / "again.toml")).gpu.transfer_remote == first


def _one_line(result, *needles):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("pksim: error:"), result.output
    for needle in needles:
        assert needle in lines[-1], lines[-1]


def test_wrong_values_stop_it_and_nothing_is_written(tmp_path, no_gpu_needed):
    result, out = _calibrate(tmp_path, "peer", extra=("--bad-check",))
    _one_line(result, "moved values are wrong", "nothing fitted")
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--ranks", "1"], "--ranks 1: peers need at least 2 ranks"),
    (["--launcher", "x"], "--launcher only applies with --ranks"),
    (["--ranks", "2", "--partial"], "--partial"),
])
def test_bad_options(tmp_path, args, needle):
    _one_line(CliRunner().invoke(cli, ["calibrate", *args, "-o", str(tmp_path / "x.toml")]),
              needle)


def test_the_plan_covers_every_mechanism_pattern_and_sweep():
    points = ranks.plan(4, 132)
    kinds = {(p["mechanism"], p["op"], p["pattern"]) for p in points}
    for mech, ops in (("tma", ("write", "read", "reduce")),
                      ("register", ("write", "read", "reduce")), ("copy-engine", ("write", "read"))):
        for op in ops:
            for pattern in ("one", "both", "all"):
                assert (mech, op, pattern) in kinds, (mech, op, pattern)
    sms = {p["sms"] for p in points if p["mechanism"] == "tma" and p["pattern"] == "one"}
    assert {1, 132} <= sms and len(sms) >= 6
    messages = {p["msg_bytes"] for p in points if p["mechanism"] == "tma"}
    assert min(messages) <= 1024 and max(messages) >= 32768
    assert all(p["bytes"] % p.get("msg_bytes", 16) == 0 for p in points)


CITED = Path(__file__).resolve().parents[2] / "validation" / "data" / "cited"


def test_the_h200_run_refits_to_the_committed_file(tmp_path):
    """The `pksim calibrate --ranks 4` run on the H200 (docs/VALIDATION.md): its results
    refit to the file committed beside them, whose keys say the path was local."""
    results = CITED / "h200-peers-ranks4-2026-12-04.json"
    committed = load_system(str(CITED / "h200-single-ranks4-2026-12-04.toml"))
    doc = ranks.load(results)
    assert (doc["device"], doc["world"], doc["devices"], doc["path"]) == ("NVIDIA H200", 4, 1, "local")
    assert all(c["ok"] for c in doc["checks"]) and len(doc["checks"]) == 8
    fitted = ranks.fit(doc)
    for key, value in fitted.values.items():
        figure = committed.provenance[REMOTE + key]
        assert figure.tag == "assumed" and "LOCAL path" in figure.source
        assert float(CITED.joinpath("h200-single-ranks4-2026-12-04.toml").read_text()
                     .split(f"\n{key} = {{ value = ")[1].split(",")[0]) == \
            pytest.approx(value, rel=2e-3), key
