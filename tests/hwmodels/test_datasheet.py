"""Datasheet means datasheet (issue #43): no catalog system but a calibrated one takes a figure
measured on its own GPU (the project's measurements: "our H200", "pksim calibrate on NVIDIA
H200", the h200-* files), and a figure carried from another GPU's measurement names the file it
comes from (docs/design/hardware.md, "System figures": rules C1-C3)."""
from __future__ import annotations

import re

import pytest

from hwmodels.catalog import list_systems, load_system
from hwmodels.system import Provenance
from validation.calibrate import fit as cal
from validation.calibrate.device import product

FILE = re.compile(r"[\w./-]+\.(toml|md|json|jsonl|gz|cu)\b")
# What the H200's datasheet system (hgx-h200 and its virtual-rank child) still takes from the
# H200's own measurements, through dgx-h100, which carries them to the H100 (rule C3): the
# figures the H100's calibration (h100-calibrated) does not measure: the tensor cores' fit, the
# epilogue's tile store-adds (no GEMM in its runs) and the copy-engine count (not in its device
# record), and the two host calls kept as the first H200 fit's host estimates (D71: a host
# call is the host's, not carried). Every other figure hgx-h200 carries comes from
# h100-calibrated (rule C2); the list may only shrink.
HOST = {"gpu.sync.launch_api_us", "gpu.sync.host_sync_us"}
AWAITING = {"H200": HOST | {f"gpu.{k}" for k in (
    "copy_engine.count hbm.tile_reduce_efficiency tensor.attention_causal_overhead "
    "tensor.attention_efficiency tensor.epilogue_overlap tensor.gemm_efficiency "
    "tensor.gemm_k_overhead tensor.sustained_after_us tensor.sustained_fraction "
    "tensor.sustained_sm_exponent"
).split()}}
# A figure carried by rule C2: "carried from NVIDIA GPU (rule C2 ...): hwmodels/systems/F.toml",
# the value F holds, or, as a share of the HBM bandwidth (D74), F's figure / F's HBM bandwidth x
# this system's; the figures F names as the quotient's terms
CARRIED = re.compile(r"^carried from NVIDIA \w+ \(rule C2.*?hwmodels/systems/([\w-]+)\.toml")
SHARE = re.compile(r"as a share of the HBM bandwidth")


def measured_on(gpu: str) -> re.Pattern:
    """A source that names one of the project's own measurements of ``gpu`` (H100, H200, ...)."""
    low = gpu.lower()
    return re.compile(rf"our {gpu}\b|on NVIDIA {gpu}\b|NVIDIA {gpu} value|{gpu} calibration "
                      rf"value|{gpu} value carried|pksim calibrate on NVIDIA {gpu}|\b{low}-"
                      rf"(single|calibrated|measured|microbench|block|gemm|epilogue|fused|launch)")


def own_measurements(name: str) -> set[str]:
    system = load_system(name)
    if product(system.gpu.model) is None:      # Rubin: no product of ours was measured
        return set()
    mine = measured_on(product(system.gpu.model))
    return {k for k, p in system.provenance.items()
            if not k.startswith("profile.") and mine.search(p.source)}


@pytest.mark.parametrize("name", list_systems())
def test_no_catalog_system_takes_a_measurement_of_its_own_gpu(name):
    system = load_system(name)
    if system.calibrated:          # a calibrated (measured) system holds them: h200-*
        return
    assert own_measurements(name) == AWAITING.get(product(system.gpu.model), set())


@pytest.mark.parametrize("name", list_systems())
def test_a_figure_carried_from_another_gpu_names_its_file(name):
    system = load_system(name)
    if system.calibrated:
        return
    me = product(system.gpu.model)
    others = [measured_on(gpu) for gpu in ("H100", "H200", "B200") if gpu != me]
    unnamed = [k for k, p in system.provenance.items() if not k.startswith("profile.")
               and any(o.search(p.source) for o in others) and not FILE.search(p.source)]
    assert unnamed == []


def test_the_check_catches_a_measurement_of_the_same_gpu(tmp_path):
    # dgx-h100 with a figure measured on "our H100": its own GPU; an H200's is carried
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ndescription = "d"\ninherits = "dgx-h100"\n[gpu.l2]\n'
                    'latency_ns = { value = 140, source = "pointer chase on our H100", '
                    'provenance = "microbenchmark" }\n')
    system = load_system(str(path))
    mine = measured_on(product(system.gpu.model))
    assert mine.search(system.provenance["gpu.l2.latency_ns"].source)
    assert not mine.search(Provenance("copy on our H200 (shared/reference/h200-measured.md)",
                                      "microbenchmark").source)
    # the H200's datasheet system states the vendor's L2, not the device's 60 MiB
    assert load_system("hgx-h200").gpu.l2.capacity_B == 50 * 2**20
    assert load_system("h200-single").gpu.l2.capacity_B == 60 * 2**20


def carried(name: str) -> dict[str, str]:
    """The figures of ``name`` carried by rule C2 (key -> the system file they come from)."""
    system = load_system(name)
    found = {k: CARRIED.match(p.source) for k, p in system.provenance.items()}
    return {k: m.group(1) for k, m in found.items() if m}


@pytest.mark.parametrize("name", [n for n in list_systems() if carried(n)])
def test_a_carried_figure_is_the_named_files_figure(name):
    """Rule C2: a carried figure holds what its named file holds now (a refit of that GPU that
    moves a figure fails here until the figure is carried again, with the golden predictions),
    the copy engines' bandwidth as that file's share of its HBM bandwidth (D74)."""
    system = load_system(name)
    for key, donor_name in carried(name).items():
        donor = load_system(donor_name)
        want = cal.get_figure(donor, key)
        if SHARE.search(system.provenance[key].source):
            want *= (cal.get_figure(system, "gpu.hbm.bandwidth_GBps")
                     / cal.get_figure(donor, "gpu.hbm.bandwidth_GBps"))
            assert cal.get_figure(system, key) == pytest.approx(want, rel=5e-4), key
        else:
            assert cal.get_figure(system, key) == pytest.approx(want, rel=1e-9), key
        assert donor.calibrated, key        # carried from a measurement, never from a guess


def test_both_hopper_gpus_carry_from_the_other():
    """C2 both ways: the H100's datasheet system carries from the H200's calibration, the
    H200's from the H100's; the stale figures of an early H200 fit are gone (D71)."""
    assert set(carried("dgx-h100").values()) <= {"h200-calibrated", "h200-single"}
    assert len(carried("dgx-h100")) == 30      # the 4 host calls are not carried (D71)
    from_h100 = {k for k, f in carried("hgx-h200").items() if f == "h100-calibrated"}
    assert len(from_h100) == 20
    # the rest it inherits from dgx-h100, carried from the H200 itself: AWAITING
    assert set(carried("hgx-h200")) - from_h100 == AWAITING["H200"] - HOST
    for key in HOST:                    # kept, not carried, in both
        assert load_system("hgx-h200").provenance[key].tag == "estimate"
    h100 = load_system("dgx-h100")
    assert cal.get_figure(h100, "gpu.sync.stream_launch_us") == 3.423
    assert cal.get_figure(h100, "gpu.sync.stream_chain_us") == pytest.approx(1.82)
