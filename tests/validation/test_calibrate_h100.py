"""The H100's calibration (issue #43): h100-calibrated and its kernel profile pk-hopper-h100
refitted from the two committed H100 runs MANIFEST-h100.toml lists (points on a suite's size and
world left out, as the shipped file's command did). No GPU needed; about a minute."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from validation.calibrate import fit as cal
from validation.calibrate import manifest
from validation.calibrate.disjoint import suite_records

H100_INPUTS = tuple(i.path for i in manifest.inputs(manifest.MANIFESTS["h100-calibrated"]))


@pytest.fixture(scope="module")
def fitted():
    results = cal.merge_results([cal.load_results(p) for p in H100_INPUTS])
    return cal.fit(load_system("h100-single"), results, exclude=suite_records(results.records))


def test_the_fit_on_the_h100_runs_reproduces_the_shipped_files(fitted):
    shipped = load_system("h100-calibrated")
    assert shipped.calibrated["device"] == "NVIDIA H100 80GB HBM3"
    assert shipped.profile.name == "pk-hopper-h100" and not shipped.profile.carried
    # no GEMM, attention, store-add or shifted-move run on the H100: those stages fit nothing
    assert len(fitted.values) == 56      # the H200's 68 less 9 tensor-core and epilogue, 3 shifted
    for key, value in fitted.values.items():
        assert cal.get_figure(shipped, key) == pytest.approx(value, rel=3e-3), key
        prov = shipped.provenance[cal.provenance_key(key)]
        assert prov.tag == "calibrated", key
        assert "pksim calibrate on NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-12-07" in \
            prov.source, key
    # the device's own L2, memory and SM count, not the H200's 60 MiB and 150 GB
    assert shipped.gpu.l2.capacity_B == 50 * 2**20
    assert shipped.gpu.hbm.capacity_B == pytest.approx(85.02e9)
    # the copy engines' bandwidth: 1659 GB/s, 0.495 of the datasheet's 3350 (D74)
    assert cal.get_figure(shipped, "gpu.copy_engine.bandwidth_GBps") == pytest.approx(
        0.495 * 3350, rel=2e-3)
    assert load_system("h100-virtual-calibrated").gpu.kernel == shipped.gpu.kernel
