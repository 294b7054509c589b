"""Kernel profiles (hwmodels.profile): the split from the hardware, the exact conversion of a
fitted GPU's figures, the rule that picks a profile, the migration of old system-file keys."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner

from hwmodels import profile as kp
from hwmodels.catalog import list_systems, load_system
from hwmodels.errors import ConfigError
from hwmodels.system import ARCHITECTURES, TransferSpec
from pksim_cli.main import cli

KIB = 1024.0


def test_a_system_file_holds_no_kernel_figure():
    # the 33 figures of our kernels' routines are the profile's, not the machine's
    hardware = {f.metadata["key"] for f in dataclasses.fields(TransferSpec)}
    assert not hardware & set(kp.LOCAL_FIELDS)
    assert len(kp.FIELDS) == 33
    for name in list_systems():
        text = load_system(name).path
        with open(text) as handle:
            keys = set(re.findall(r"^([A-Za-z0-9_]+)\s*=", handle.read(), re.M))
        assert not keys & set(kp.LOCAL_FIELDS), name


def test_the_profile_converts_back_to_exactly_what_the_fit_wrote():
    # pk-hopper's figures are h200-calibrated's fit in cycles at 1980 MHz: each source names
    # the one-GPU value ("... : 2.745 ns per KiB on it"), and the H200 loads exactly it
    h200 = load_system("h200-calibrated")
    profile = kp.load_profile("pk-hopper")
    assert profile.fitted_on["clock_MHz"] == 1980 and h200.gpu.sm.clock_Hz == 1980e6
    for key, f in kp.FIELDS.items():
        if profile.provenance[key].tag != "calibrated":
            continue                  # not fitted: nvlink_buffer_latency_hops (estimate)
        written = float(re.search(r": ([0-9.e+-]+) [^:]* on it$",
                                  profile.provenance[key].source).group(1))
        assert getattr(h200.gpu.kernel, f.name) == written * f.metadata["factor"], key
    # closed form: 5.4351 cycles per KiB = 2.745 ns per KiB at 1.98 GHz, 2.92209 at 1.86 GHz
    assert profile.values["tma_move_base_cycles_per_KiB"] == 5.4351
    b200 = load_system("dgx-b200")
    assert b200.gpu.sm.clock_Hz == 1860e6
    assert b200.gpu.kernel.tma_move_base_s_per_B * KIB == pytest.approx(5.4351e-9 / 1.86,
                                                                        rel=1e-12)
    # L2 sectors per cycle: 10620 GB/s = 167.6 sectors of 32 B per cycle at 1.98 GHz
    assert profile.values["ldst_word_l2_sectors_per_cycle"] == pytest.approx(
        10620 / (32 * 1.98), rel=1e-11)
    assert b200.gpu.kernel.ldst_word_l2_Bps == pytest.approx(10620e9 * 1.86 / 1.98, rel=1e-11)
    # shares, knees and bytes carry as they are
    assert b200.gpu.kernel.move_knee == h200.gpu.kernel.move_knee == 2.163


@pytest.mark.parametrize("local", [89.75, 2.745, 0.01, 1422.0, 21.18, 10620.0, 3.317, 270.0])
def test_portable_values_round_trip(local):
    # on every catalog GPU (clocks 1410-2062 MHz, NVLink latencies as their files say) a
    # one-GPU figure converts to a portable one and back exactly
    gpus = {load_system(name).gpu for name in ("dgx-h100", "dgx-b200", "dgx-a100",
                                               "gb200-nvl72", "vr-nvl144")}
    for f in kp.FIELDS.values():
        for gpu in gpus:
            portable = kp.portable_value(f.metadata, local, gpu)
            assert kp.local_value(f.metadata, portable, gpu) == local, (f.name, gpu.model)


def test_the_rule_picks_the_nearest_measured_architecture():
    # only Hopper is measured: every architecture takes pk-hopper, Hopper's reference profile
    # (pk-hopper-h100, fitted on the H100, is its calibrated system's: rule P0); the earlier
    # of two equally near is taken (no case yet with one profile)
    assert sorted(kp.list_profiles()) == ["pk-hopper", "pk-hopper-h100"]
    assert [kp.nearest_profile(a) for a in ARCHITECTURES] == ["pk-hopper"] * 4
    with pytest.raises(ConfigError, match="architecture 'volta'"):
        kp.nearest_profile("volta")


@pytest.mark.parametrize("name", list_systems())
def test_every_catalog_system_names_the_profile_the_rule_gives_and_why(name):
    system = load_system(name)
    # a calibrated system names the profile fitted with it (P0): the H100's, pk-hopper-h100
    h100 = (system.calibrated or {}).get("device") == "NVIDIA H100 80GB HBM3"
    assert system.profile.name == ("pk-hopper-h100" if h100 else
                                   kp.nearest_profile(system.gpu.architecture))
    assert "rule P" in system.profile.why
    # carried: fitted on another GPU than this (calibrated) system's, so its figures count
    # as assumed; on the H200's calibrated systems they are the fit's own
    fitted_here = (system.calibrated or {}).get("device") in ("NVIDIA H200",
                                                              "NVIDIA H100 80GB HBM3")
    assert system.profile.carried is not fitted_here
    tag = system.provenance["profile.move_knee"].tag
    assert tag == ("calibrated" if fitted_here else "assumed")


def test_a_prediction_names_its_system_and_profile():
    args = ["predict", "--system", "dgx-h100", "--op", "all-gather", "--bytes", "1MiB"]
    res = CliRunner().invoke(cli, args + ["--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["system"], out["profile"]) == ("dgx-h100", "pk-hopper")
    res = CliRunner().invoke(cli, args)
    assert "on dgx-h100 (8 ranks, profile pk-hopper)" in res.output.splitlines()[0]


OLD_KEYS = """
name = "mine"
description = "a user's file from before the split"
inherits = "dgx-h100"

[gpu.transfer]
tma_move_base_ns_per_KiB = 5.0
move_knee = { value = 3.0, source = "my own guess", provenance = "estimate" }
source = "my block_moves run"
provenance = "microbenchmark"
"""


def test_old_kernel_keys_of_a_users_file_still_load(tmp_path):
    # a file that inherits a catalog system and gives kernel figures under their old
    # [gpu.transfer] keys (one GPU's units): they override the profile's on that GPU, with
    # their sources, under the profile's keys
    path = tmp_path / "mine.toml"
    path.write_text(OLD_KEYS)
    mine, base = load_system(str(path)), load_system("dgx-h100")
    assert mine.gpu.kernel.tma_move_base_s_per_B == 5.0e-9 / KIB
    assert mine.gpu.kernel.move_knee == 3.0
    assert mine.gpu.kernel.ldst_move_base_s_per_B == base.gpu.kernel.ldst_move_base_s_per_B
    prov = mine.provenance["profile.tma_move_base_cycles_per_KiB"]
    assert prov.tag == "microbenchmark" and prov.source.startswith("my block_moves run")
    assert mine.provenance["profile.move_knee"].tag == "estimate"
    assert mine.profile.name == "pk-hopper"
    # and on the command line, by the old key or the profile's own
    old = load_system("dgx-h100", ["gpu.transfer.load_round_ns=1000"])
    new = load_system("dgx-h100", ["profile.load_round_cycles=1980"])
    assert old.gpu.kernel.load_round_s == pytest.approx(1e-6) == new.gpu.kernel.load_round_s
    assert old.provenance["profile.load_round_cycles"].tag == "override"


def test_a_bad_kernel_figure_names_the_file_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(OLD_KEYS.replace("5.0", "-1"))
    with pytest.raises(ConfigError, match=r"bad.toml: gpu.transfer.tma_move_base_ns_per_KiB = "
                                          r"-1 must be at least 0"):
        load_system(str(path))
    with pytest.raises(ConfigError, match="unknown kernel-profile figure 'move_kne'"):
        load_system("dgx-h100", ["profile.move_kne=3"])
    with pytest.raises(ConfigError, match=r"profile.tma_shared_read = 2 must be at most 1"):
        load_system("dgx-h100", ["profile.tma_shared_read=2"])


def test_a_system_may_name_its_own_profile_file(tmp_path):
    text = (kp.profile_path("pk-hopper").read_text()
            .replace('name = "pk-hopper"', 'name = "mine"')
            .replace("move_knee = { value = 2.163", "move_knee = { value = 4"))
    (tmp_path / "mine.profile.toml").write_text(text)
    (tmp_path / "sys.toml").write_text(
        'name = "sys"\ndescription = "d"\ninherits = "dgx-h100"\n'
        'profile = { name = "./mine.profile.toml", why = "my own fit" }\n')
    system = load_system(str(tmp_path / "sys.toml"))
    assert system.profile.name == "mine" and system.gpu.kernel.move_knee == 4.0


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("move_knee = ", "move_kne = "), "unknown key 'collective_moves.move_kne'"),
    (lambda t: re.sub(r"\nmove_knee = [^\n]*", "", t), "missing key collective_moves.'move_knee'"),
    (lambda t: t.replace('architecture = "hopper"', 'architecture = "pascal"'),
     "architecture = 'pascal' is not one of"),
    (lambda t: t.replace('provenance = "calibrated" }', 'provenance = "guess" }', 1),
     "provenance 'guess' is not one of"),
])
def test_a_bad_profile_file_is_one_clear_error(tmp_path, edit, message):
    (tmp_path / "p.toml").write_text(edit(kp.profile_path("pk-hopper").read_text()))
    with pytest.raises(ConfigError, match=re.escape(message)):
        kp.load_profile(str(tmp_path / "p.toml"))
    with pytest.raises(ConfigError, match="unknown kernel profile 'nope'"):
        kp.load_profile("nope")
