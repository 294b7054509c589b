"""validation/report/compare_fused.py: re-predicting the fused kernels' measurements (no GPU)."""
from __future__ import annotations

import json

import pytest

from hwmodels.catalog import load_system
from pksim_core.schedule import Schedule
from pksim_core.simulate import predict
from validation.report.compare_fused import compare, main


def test_ratio_is_the_current_prediction_over_the_measured_time(tmp_path, capsys):
    recs = [
        {"id": "a", "kind": "fused", "op": "gemm-rs", "overlap": "inter-sm", "world": 2,
         "m": 2048, "n": 2048, "k": 1024, "comm_blocks": 8, "algorithm": "direct",
         "mechanism": "register", "ms": 0.5},
        {"id": "b", "kind": "none", "op": "gemm-rs", "world": 2, "m": 2048, "n": 2048,
         "k": 1024, "ms": 0.25},
        {"id": "c", "kind": "arg_check", "ok": True},          # not timed: skipped
    ]
    path = tmp_path / "fused.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    rows = compare(path, "h200-virtual-calibrated")
    assert [r["id"] for r in rows] == ["a", "b"]
    v = load_system("h200-virtual-calibrated")
    shape = (("k", 1024), ("m", 2048), ("n", 2048))
    fused = predict(v, Schedule(op="gemm-rs", shape=shape, world=2, overlap="inter-sm",
                                comm_sms=8, algorithm="direct", mechanism="register"))
    base = predict(v, Schedule(op="gemm-rs", shape=shape, world=2, overlap="none"))
    assert rows[0]["ratio"] == fused.time_s / 0.5e-3
    assert rows[1]["ratio"] == base.baseline_s / 0.25e-3
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| inter-sm | 1 |" in out and "max abs error" in out and "| all | 1 |" in out


def test_a_missing_file_is_a_one_line_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare_fused: error:") and err.count("\n") == 1


def test_ranking_picks_the_predicted_fastest_and_charges_its_measured_regret(capsys):
    rows = [  # one case, worked by hand: the model ranks b first, b measured 10 % slower
        {"id": "a", "op": "gemm-rs", "shape": "8x8x8", "world": 2, "overlap": "inter-sm",
         "measured_s": 1.0, "predicted_s": 1.2, "ratio": 1.2},
        {"id": "b", "op": "gemm-rs", "shape": "8x8x8", "world": 2, "overlap": "inter-sm",
         "measured_s": 1.1, "predicted_s": 1.0, "ratio": 1.0 / 1.1},
        {"id": "c", "op": "gemm-rs", "shape": "8x8x8", "world": 2, "overlap": "none",
         "measured_s": 2.0, "predicted_s": 0.9, "ratio": 0.45},
    ]
    from validation.report.compare_fused import rankings
    ranks = {r["overlap"]: r for r in rankings(rows)}
    assert set(ranks) == {"inter-sm", "all"}            # one intra-SM candidate: no ranking
    assert ranks["inter-sm"]["measured_best"] == "a" and ranks["inter-sm"]["predicted_best"] == "b"
    assert ranks["inter-sm"]["regret"] == pytest.approx(0.1)          # 1.1 / 1.0 - 1
    assert ranks["all"]["predicted_best"] == "c" and ranks["all"]["regret"] == pytest.approx(1.0)
