"""Datasheet means datasheet (issue #43): no catalog system but a calibrated one takes a figure
measured on its own GPU (the project's measurements: "our H200", "pksim calibrate on NVIDIA
H200", the h200-* files), and a figure carried from another GPU's measurement names the file it
comes from (docs/design/hardware.md, "System figures": rules C1-C3)."""
from __future__ import annotations

import re

import pytest

from hwmodels.catalog import list_systems, load_system
from hwmodels.system import Provenance
from validation.calibrate.device import product

FILE = re.compile(r"[\w./-]+\.(toml|md|json|jsonl|gz|cu)\b")
# What the H200's datasheet system (hgx-h200 and its virtual-rank child) still takes from the
# H200's own measurements, through dgx-h100, which carries them to the H100 (rule C3): no other
# Hopper GPU is measured yet (validation/device/portability.sh measures an H100); the list may
# only shrink.
AWAITING = {"H200": {f"gpu.{k}" for k in (
    "copy_engine.bandwidth_GBps copy_engine.command_us copy_engine.count "
    "copy_engine.stream_start_us hbm.efficiency hbm.reduce_efficiency hbm.tile_reduce_efficiency "
    "sync.copy_api_us sync.event_api_us sync.event_wait_us sync.flag_latency_sys_ns "
    "sync.host_sync_us sync.launch_api_us sync.release_ns sync.stream_chain_us "
    "sync.stream_launch_us tensor.attention_causal_overhead tensor.attention_efficiency "
    "tensor.epilogue_overlap tensor.gemm_efficiency tensor.gemm_k_overhead "
    "tensor.sustained_after_us tensor.sustained_fraction tensor.sustained_sm_exponent "
    "transfer.issue_knee transfer.ldst_local_per_sm_GBps transfer.move_start_ns "
    "transfer.thread_start_ps transfer.tma_reduce_issue_ns transfer.tma_reduce_per_sm_GBps"
).split()}}


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
