"""The shifted moves' calibration (docs/decisions/D63.md): the input made from the committed
block_moves --shift rows, the stage that fits each point relative to its aligned twin, and its
residual on those records. No GPU; the stage's fit takes a few seconds."""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from hwmodels.catalog import load_system
from pksim_core.microbench_model import predict_time_s
from validation.calibrate import convert
from validation.calibrate import fit as cal
from validation.calibrate import manifest

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "validation" / "data" / "report"
ROWS = {run: REPORT / f"h200-block-moves-shift-2026-12-04-{run}.jsonl.gz" for run in "ab"}
SHIFT = ROOT / "validation" / "data" / "calibration" / "h200-block-moves-shift-2026-12-04.json.gz"
STAGE = next(s for s in cal.STAGES if s.name == "shifted moves")
KEYS = ("gpu.kernel.ldst_move_word_ns_per_KiB", "gpu.kernel.ldst_word_l2_GBps",
        "gpu.kernel.tma_move_realign_ns_per_KiB")


@pytest.fixture(scope="module")
def results():
    return cal.load_results(SHIFT)


def test_the_input_is_the_committed_rows_with_their_run_named():
    """The calibration input is byte for byte what validation.calibrate.convert makes of the
    two report files (as MANIFEST.toml's command says), so its sha256 names the measurement."""
    entry = next(i for i in manifest.inputs() if i.file == SHIFT.name)
    doc = convert.as_results([("a", ROWS["a"]), ("b", ROWS["b"])], entry.gpu, entry.date,
                             entry.command)
    assert convert.dumps(doc) == SHIFT.read_bytes()
    rows = [json.loads(line) for run in "ab" for line in gzip.open(ROWS[run]).read().splitlines()]
    assert len(doc["results"]) == len(rows) == 1120
    for rec, row in zip(doc["results"], rows):
        assert {k: v for k, v in rec.items() if k != "params"} == \
            {k: v for k, v in row.items() if k != "params"}
        assert rec["params"] == {**row["params"], "run": rec["params"]["run"]}


def test_shifted_block_moves_records_are_their_own_group(results):
    # block_moves with "shift" in its params goes to the shifted moves' stage, never to the
    # collective moves' (whose figures the aligned cases keep)
    assert {r["bench"] for r in results.records} == {"block_moves_shift"}
    assert "block_moves_shift" not in next(s for s in cal.STAGES
                                           if s.name == "collective moves").groups
    assert STAGE.groups == ("block_moves_shift",) and tuple(p.key for p in STAGE.params) == KEYS


def test_a_point_is_fitted_over_its_aligned_twin(results):
    by_key = {cal.measurement_key(r): r for r in results.records}
    shifted = [r for r in results.records if r["params"]["shift"]]
    aligned = [r for r in results.records if not r["params"]["shift"]]
    # 4 shifts (0, 8, 4, 2) of every point, on two GPUs
    assert len(shifted) == 840 and len(aligned) == 280
    for r in shifted:
        twin = by_key[cal.aligned_twin(r)]
        assert twin["params"] == {**r["params"], "shift": 0} and twin["bytes"] == r["bytes"]
    for r in aligned:                 # the twins themselves are not fitted
        assert by_key[cal.aligned_twin(r)] is r


def test_the_stage_fits_the_shift_alone_within_its_residual(results):
    """The stage on the committed records alone, from figures 4x off (the fit does not start
    at its answer): the shipped figures again, and the residual D63 reports: each point's time
    over its aligned twin's within 7.0 % median (66.9 % max: register copies into 2
    destinations on 132 blocks, whose aligned twin the aligned model predicts 37 % fast)."""
    shipped = load_system("h200-calibrated")
    start = cal.with_figures(shipped, {k: 4 * cal.get_figure(shipped, k) for k in KEYS})
    system, values, result = cal._fit_stage(start, STAGE, list(results.records))
    for key in KEYS:
        assert values[key] == pytest.approx(cal.get_figure(shipped, key), rel=5e-3), key
    assert result.relative and result.points == 840 and result.success
    assert result.median_abs_error == pytest.approx(0.070, abs=0.002)
    assert result.max_abs_error == pytest.approx(0.669, abs=0.005)
    # with the three figures at their ranges' ends (no word or realignment time, an L2 that
    # never binds; a shifted TMA copy still runs the staged sum): 18.0 % median
    flat = cal.with_figures(shipped, {KEYS[0]: 0.01, KEYS[1]: 1e6, KEYS[2]: 0.01})
    by_key = {cal.measurement_key(r): r for r in results.records}

    def ratio_error(s, r):
        twin = by_key[cal.aligned_twin(r)]
        return abs(predict_time_s(s, r) / predict_time_s(s, twin)
                   / (r["time_s"] / twin["time_s"]) - 1)
    shifted = [r for r in results.records if r["params"]["shift"]]
    before = statistics.median(ratio_error(flat, r) for r in shifted)
    after = statistics.median(ratio_error(system, r) for r in shifted)
    assert after == pytest.approx(result.median_abs_error, rel=1e-6)
    assert before == pytest.approx(0.180, abs=0.002) and before > 2.5 * after


def test_the_shipped_sources_say_what_the_residual_is_of():
    shipped = load_system("h200-calibrated")
    for key in map(cal.provenance_key, KEYS):      # the profile pk-hopper's figures
        prov = shipped.provenance[key]
        assert prov.tag == "calibrated"
        assert "over block_moves_shift (840 points, each as its time over its aligned "
        "twin's): " in prov.source, prov.source
    for name in ("dgx-h100", "dgx-a100", "dgx-b200", "vr-nvl144"):     # the H200's, assumed
        other = load_system(name)
        for key in map(cal.provenance_key, KEYS):
            assert other.provenance[key].tag == "assumed"
            assert other.provenance[key].source.startswith(
                "kernel profile pk-hopper (fitted on NVIDIA H200): ")
            assert "block_moves_shift" in other.provenance[key].source


def test_convert_refuses_bad_input_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"bench": "x", "params": {}}\nnot json\n')
    out = tmp_path / "out.json.gz"
    assert convert.main(["--run", f"a={bad}", "--device", "D", "--date", "2026-12-04",
                         "--command", "c", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {bad}: line 2 is not valid JSON (Expecting value)"]
    assert not out.exists()
    assert convert.main(["--run", "nofile", "--device", "D", "--date", "d", "--command", "c",
                         "-o", str(out)]) == 2
    assert "expected NAME=FILE" in capsys.readouterr().err
    out.write_text("mine")
    good = tmp_path / "good.jsonl"
    good.write_text('{"bench": "x", "params": {}}\n')
    assert convert.main(["--run", f"a={good}", "--device", "D", "--date", "d", "--command", "c",
                         "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "mine"
