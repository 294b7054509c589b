"""Issue #38's cliffs in `pksim validate --report` (validation/report/data.py cliffs, the
markdown's "Cliffs (defects)"): every case measured more than 1.5x its prediction and every
fused pick measured more than 10 % slower than its group's "none", each with the resource the
model thought bound it, and whether the predictions were the measured GPU's own calibration."""
from validation.report import data
from validation.report.markdown import _cliffs


def _row(id_, predicted, measured, bound="hbm", **kw):
    r = {"id": id_, "predicted_s": predicted, "measured_s": measured, "bound_resource": bound,
         "error": (predicted - measured) / measured, "blocks_per_rank": kw.pop("blocks", 0),
         "label": id_, "tile_order": 0}
    return r | kw


def _fused(id_, overlap, predicted, measured, bound, m=3000, blocks=0):
    return _row(id_, predicted, measured, bound, op="ag-gemm", m=m, n=5120, k=2560, world=8,
                overlap=overlap, blocks=blocks, comm_blocks=blocks)


def test_slow_cases_are_those_over_one_and_a_half_times_their_prediction():
    rows = [_row("a", 1.0, 1.49, "nvlink"), _row("b", 1.0, 1.51, "l2"), _row("c", 2.0, 4.0, "sm"),
            _row("d", 1.0, 0.5)]
    rows.append({**_row("e", 1.0, 9.0), "error": None})      # not compared: never a cliff
    slow = data.cliffs(rows, [])["slow_vs_prediction"]
    assert [(c["id"], c["measured_over_predicted"], c["bound_resource"]) for c in slow] == \
        [("c", 2.0, "sm"), ("b", 1.51, "l2")]


def test_a_fused_pick_more_than_ten_percent_behind_none_is_flagged_with_its_bound():
    frows = [  # group m=3000: the model picks intra (predicted fastest), it runs 3x none
        _fused("none", "none", 3.0, 1.0, "tensor"),
        _fused("intra", "intra-sm", 1.0, 3.0, "hbm", blocks=8),
        _fused("inter", "inter-sm", 2.0, 0.9, "nvlink", blocks=16),
        # group m=4000: its pick is 9 % behind none, inside the margin
        _fused("none4", "none", 3.0, 1.0, "tensor", m=4000),
        _fused("intra4", "intra-sm", 1.0, 1.09, "hbm", m=4000, blocks=8)]
    c = data.cliffs([], frows)
    behind = c["picks_slower_than_none"]
    assert len(behind) == 1
    b = behind[0]
    assert (b["group"], b["pick"], b["bound_resource"]) == ("ag-gemm 3000x5120x2560 w8", "intra",
                                                            "hbm")
    assert abs(b["slower_than_none"] - 2.0) < 1e-12
    # the intra pick is also 3x its prediction: a slow case as well
    assert [s["id"] for s in c["slow_vs_prediction"]] == ["intra"]
    md = "\n".join(_cliffs({"cliffs": c}))
    assert "| ag-gemm 3000x5120x2560 w8 | intra |" in md and "| +200.0% | hbm |" in md
    assert "| intra |" in md and "| 3.00 | hbm |" in md


def test_predictions_of_another_gpus_calibration_are_called_out():
    meta = {"system": "h200-virtual-calibrated",
            "calibration": {"calibrated": {"device": "NVIDIA H200", "date": "2026-12-04"}}}
    own = data.own_calibration(meta, "NVIDIA H200")
    other = data.own_calibration(meta, "NVIDIA H100 80GB HBM3")
    none = data.own_calibration({"system": "h100-virtual", "calibration": {}},
                                "NVIDIA H100 80GB HBM3")
    assert own["own"] and not other["own"] and not none["own"]
    assert "own calibration" not in "\n".join(_cliffs({"cliffs": data.cliffs([], [], own)}))
    md = "\n".join(_cliffs({"cliffs": data.cliffs([], [], other)}))
    assert ("**Not this GPU's own calibration**: predicted with `h200-virtual-calibrated` "
            "(calibrated on NVIDIA H200), measured on NVIDIA H100 80GB HBM3") in md
    md = "\n".join(_cliffs({"cliffs": data.cliffs([], [], none)}))
    assert "`h100-virtual` (not calibrated)" in md
