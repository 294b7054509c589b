"""The random matrix's timed slice (validation/prepare/random_timed.py, report/random_timed.py):
drawn reproducibly, predicted with the measured GPU's own calibration (or said not to be),
every fused group with all its runnable variants and its "none", and the report flags each
case above 1.5x its prediction and each fused pick more than 10 % slower than its "none"."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from validation.prepare import random_matrix as rm
from validation.prepare import random_timed as rt
from validation.prepare.collectives import runnable
from validation.report import random_matrix as report
from validation.report import random_timed as timed_report
from validation.suites.comm_suite import LibraryVariant
from validation.suites.fused_kernels import BASELINE, VARIANTS, short

H100 = "NVIDIA H100 80GB HBM3"


def _libs():
    coll = {LibraryVariant(*k): f"lib/{'-'.join(k)}.so" for k in runnable()}
    fused = {short(op, ov, mech): f"lib/{short(op, ov, mech)}.so" for op, ov, _, mech in VARIANTS}
    fused["gemm"] = "lib/libpk_gemm.so"
    fused.update({"/".join(v): f"lib/{'-'.join(v)}.so" for v in BASELINE.values()})
    return coll, fused


@pytest.fixture(scope="module")
def slice_h100():
    coll, fused = _libs()
    return rt.draw(38, H100, coll, fused, rm.fused_shape, collectives=40, groups=9)


def test_own_calibration_by_device_name():
    s, own = rt.system_for(H100)
    assert (s.name, own) == ("h100-virtual-calibrated", True)
    s, own = rt.system_for("NVIDIA H200")
    assert (s.name, own) == ("h200-virtual-calibrated", True)
    s, own = rt.system_for("NVIDIA A100-SXM4-80GB")
    assert (s.name, own) == (rt.FALLBACK, False)


def test_reproducible_and_predicted(slice_h100):
    coll, fused = _libs()
    again = rt.draw(38, H100, coll, fused, rm.fused_shape, collectives=40, groups=9)
    assert again[0] == slice_h100[0] and again[1] == slice_h100[1]
    colls, fuseds, info = slice_h100
    assert (len(colls), info["system"], info["own_calibration"]) == (40, "h100-virtual-calibrated", True)
    assert info["calibration"]["calibrated"]["device"] == H100
    assert all(c["predicted_s"] > 0 and c["time"] and c["check"] and c["blocks_per_rank"] >= 1
               for c in colls)
    assert all(4 << 10 <= c["bytes"] <= 64 << 20 for c in colls)
    assert len({c["id"] for c in colls + fuseds}) == len(colls) + len(fuseds)
    # every collective kernel before any repeats
    assert len({(c["op"], c["algorithm"], c["mechanism"]) for c in colls[:33]}) == 33


def test_fused_groups_have_every_variant_and_none(slice_h100):
    _, fuseds, _ = slice_h100
    groups = defaultdict(list)
    for c in fuseds:
        groups[c["interleave"]].append(c)
    assert len(groups) == 9
    for tag, members in groups.items():
        op = members[0]["op"]
        runnable_variants = [v for v in VARIANTS if v[0] == op and v[3] != "multimem"]
        assert Counter(c["kind"] for c in members) == {"fused": len(runnable_variants), "none": 1}
        assert len({(c["world"], c["m"], c["n"], c["k"]) for c in members}) == 1
        w, m = members[0]["world"], members[0]["m"]
        assert m % w == 0 and m >= w
        assert all(c["predicted_s"] and c["idle"] == rt.FUSED_IDLE and c["time"] for c in members)
        assert all(c["lib"].startswith("../fused/lib/") for c in members if c["kind"] == "fused")


def _rows(colls, fuseds, slow: dict, device=H100):
    """Measured rows at each case's prediction, times ``slow[id]`` where given."""
    rows = []
    for c in colls + fuseds:
        row = {k: c[k] for k in ("id", "op", "world") if k in c}
        t = c["predicted_s"] * slow.get(c["id"], 1.0)
        row.update(ok=True, device=device, date="2026-12-07", median_s=t,
                   times_s=[t * 0.9, t, t * 1.1])
        rows.append(row)
    return rows


def test_cliffs_flagged(slice_h100):
    colls, fuseds, info = slice_h100
    groups = defaultdict(list)
    for c in fuseds:
        groups[c["interleave"]].append(c)
    picks = [(min(g, key=lambda c: c["predicted_s"]), next(c for c in g if c["kind"] == "none"))
             for g in groups.values()]
    pick, none = next((p, n) for p, n in picks if p is not n)
    # the pick measured at 1.2x its "none"'s prediction (none as predicted): 20 % behind none
    slow = {colls[0]["id"]: 1.51, colls[1]["id"]: 1.49,
            pick["id"]: 1.2 * none["predicted_s"] / pick["predicted_s"]}
    t = timed_report.build(colls, fuseds, _rows(colls, fuseds, slow), info)
    flagged = {c["id"] for c in t["cliffs"]["slow_vs_prediction"]}
    assert colls[0]["id"] in flagged and colls[1]["id"] not in flagged
    assert t["own_calibration"] is True
    assert [b["pick"] for b in t["cliffs"]["picks_slower_than_none"]] == [pick["id"]]
    text = timed_report.markdown(t)
    assert "its own calibration" in text and colls[0]["id"] in text
    assert f"`{colls[0]['id']}`: 1.51x over all calls, timed 1x" in text


def test_other_gpu_is_not_own_calibration(slice_h100):
    colls, fuseds, info = slice_h100
    t = timed_report.build(colls, fuseds, _rows(colls, fuseds, {}, device="NVIDIA H200"), info)
    assert t["own_calibration"] is False and t["slow_vs_prediction"] == 0
    assert "not its own calibration" in timed_report.markdown(t)


def test_prepare_writes_the_slice(tmp_path):
    info = rm.prepare(tmp_path, 38, rm.FAST_CASES, build=False, timed_device=H100)
    colls = json.loads((tmp_path / "coll" / "timed.json").read_text())
    fused = json.loads((tmp_path / "timed" / "cases.json").read_text())
    assert info["timed"]["collective_cases"] == len(colls) and info["timed"]["fused_cases"] == len(fused)
    assert json.loads((tmp_path / "matrix.json").read_text())["timed"]["system"] == "h100-virtual-calibrated"
    s = report.build(colls + fused, [], None, info)
    assert s["cases"] == len(colls) + len(fused) and s["not_run"] == s["cases"]
