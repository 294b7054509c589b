"""`pksim calibrate` knows the GPU (issue #43): it reads the device, starts from the catalog
system of that GPU or refuses, writes the device's own figures, measures only the hardware's
primitives with --hardware-only, and fits no microbenchmark point that sits on a validation
suite's size and world. No GPU needed: the device comes from a committed results file."""
from __future__ import annotations

import gzip
import json
import tomllib

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.resources import data_dir
from pksim_cli import calibrate as calibrate_cli
from pksim_cli.main import cli
from validation.calibrate import disjoint
from validation.calibrate import fit as cal
from validation.calibrate.device import from_record, start_system

RESULTS = data_dir() / "calibration" / "h200-microbench-2026-12-02.json.gz"
DOC = json.loads(gzip.decompress(RESULTS.read_bytes()))
H200 = DOC["device"]
H100 = dict(H200, name="NVIDIA H100 80GB HBM3", l2_bytes=52428800,
            global_mem_bytes=85029158912)       # as an H100 reports itself (KINDS.md)


def test_the_device_is_matched_to_its_catalog_gpu():
    assert start_system(from_record(H200, "h200"), None) == "h200-single"
    assert start_system(from_record(H100, "h100"), None) == "h100-single"
    facts = from_record(H100, "h100")
    assert (facts.architecture, facts.product, facts.sm_count) == ("hopper", "H100", 132)


@pytest.mark.parametrize("device, system, message", [
    (dict(H200, name="NVIDIA B300", sm_count=160, cc="10.3"), None,
     "NVIDIA B300 (compute 10.3, 160 SMs, 60 MiB L2, 150.1 GB) matches no one-GPU system of "
     "the catalog (pksim systems list): give --system NAME|FILE"),
    (H100, "h200-single", "--system h200-single is not the GPU measured (NVIDIA H100 80GB "
                          "HBM3 (compute 9.0, 132 SMs, 50 MiB L2, 85.0 GB)): GPU H200 SXM "
                          "141GB, the device is an H100"),
])
def test_another_gpu_is_refused_naming_system(device, system, message):
    with pytest.raises(ConfigError) as err:
        start_system(from_record(device, "x"), system)
    assert str(err.value).startswith(message)


def test_an_h100_run_writes_an_h100_not_an_h200(tmp_path):
    # the first H200 run relabelled as an H100's: the file inherits h100-single and states the
    # device's SM count, L2 (50 MiB), memory and SM clock, whatever the parent says
    doc = dict(DOC, device=H100)
    run = tmp_path / "h100.json"
    run.write_text(json.dumps(doc))
    out = tmp_path / "h100.toml"
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(run), "-o", str(out),
                                   "--json"])
    assert res.exit_code == 0, res.output
    system = load_system(str(out))
    assert system.inherits == "h100-single" and system.calibrated["device"] == H100["name"]
    assert system.gpu.l2.capacity_B == 50 * 2**20 and system.gpu.hbm.capacity_B == 85.03e9
    assert system.gpu.sm.count == 132 and system.gpu.sm.clock_Hz == 1980e6
    assert system.provenance["gpu.l2.capacity_MiB"].source.startswith(
        "cudaGetDeviceProperties / nvidia-smi on NVIDIA H100 80GB HBM3")
    # the refusal names --system and writes nothing
    bad = tmp_path / "b300.json"
    bad.write_text(json.dumps(dict(DOC, device=dict(H200, name="NVIDIA B300", sm_count=160,
                                                    cc="10.3"))))
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(bad), "-o",
                                   str(tmp_path / "b.toml")])
    assert res.exit_code == 2 and "give --system NAME|FILE" in res.output
    assert not (tmp_path / "b.toml").exists()


def test_hardware_only_measures_and_fits_the_hardware_alone(tmp_path, monkeypatch):
    calls = {}

    def fake_run(out_dir, device, python, quick, echo, only=(), budget_s=None):
        calls.update(only=only, budget_s=budget_s)
        hardware = [r for r in DOC["results"] if r["bench"] in only]
        path = tmp_path / "mb.json"
        path.write_text(json.dumps(dict(DOC, device=H100, results=hardware, builds=[], runs=[])))
        return 0, path
    monkeypatch.setattr(calibrate_cli, "find_gpu", lambda device: "GPU 0: NVIDIA H200 (fake)")
    monkeypatch.setattr(calibrate_cli, "probe_device", lambda device, python: from_record(H100, "d"))
    monkeypatch.setattr(calibrate_cli, "require", lambda *a: None)
    monkeypatch.setattr(calibrate_cli, "run_microbenchmarks", fake_run)
    out = tmp_path / "hw.toml"
    res = CliRunner().invoke(cli, ["calibrate", "--hardware-only", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert calls == {"only": calibrate_cli.HARDWARE_BENCHES, "budget_s": 90.0}
    report = json.loads(res.stdout)
    assert report["profile"] is None                      # no kernel profile of its own
    assert report["figures"] and not any(k.startswith("gpu.kernel.") for k in report["figures"])
    system = load_system(str(out))          # an H100 on the H200's profile: carried (rule P1)
    assert system.inherits == "h100-single"
    assert system.profile.name == "pk-hopper" and system.profile.carried
    assert "--hardware-only" in system.calibration["command"]
    assert not any(any(p.key.startswith("gpu.kernel.") for p in s.params)
                   for s in cal.HARDWARE_STAGES)


def test_no_microbenchmark_point_on_a_suite_is_fitted(tmp_path):
    # the suites' (size, world): default, comm, quick and scale
    points = disjoint.suite_points()
    assert (4096, 8) in points and (1 << 30, 2) in points and (1179648, 72) in points
    on = {"bench": "block_moves", "check": "ok", "time_s": 5e-6, "bytes": 4096,
          "params": {"mechanism": "tma", "kind": "reduce", "sources": 8, "dests": 1,
                     "blocks": 4, "readers": 8}}
    off = dict(on, bytes=12288)
    assert disjoint.is_suite_point(on, points) and not disjoint.is_suite_point(off, points)
    # a copy has world 1, which no suite runs, at any size
    assert not disjoint.is_suite_point({"bench": "hbm_copy", "params": {"size_bytes": 4096}},
                                       points)
    # pksim calibrate leaves them out of the fit and says so in the file
    run = tmp_path / "run.json"
    run.write_text(json.dumps(dict(DOC, results=DOC["results"] + [on, off])))
    left = len(disjoint.suite_records(cal.load_results(run).records))
    assert left > 0
    out = tmp_path / "c.toml"
    res = CliRunner().invoke(cli, ["calibrate", "--from-json", str(run), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"left out of the fit: {left} points" in res.output
    method = tomllib.loads(out.read_text())["calibration"]["method"]
    assert f"{left} points on a validation suite's size and world left out" in method
    # the hardware-only benchmarks never sit on one (they have no world)
    hardware = [r for r in DOC["results"] if r["bench"] in calibrate_cli.HARDWARE_BENCHES]
    assert hardware and not disjoint.suite_records(hardware)
