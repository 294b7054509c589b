"""Loading the catalog: every shipped system, inheritance, overrides and bad files."""
from __future__ import annotations

import dataclasses

import pytest

from hwmodels.catalog import list_systems, load_system
from hwmodels.errors import ConfigError
from hwmodels.profile import FIELDS

SHIPPED = list_systems()


def _figure_keys(obj, prefix=""):
    """Dotted TOML keys of every numeric or boolean figure in a loaded system."""
    for f in dataclasses.fields(obj):
        if "key" not in f.metadata or f.metadata.get("derived"):
            continue
        key = prefix + f.metadata["key"]
        value = getattr(obj, f.name)
        if f.metadata.get("table"):
            items = value if f.metadata.get("many") else (value,)
            for i, item in enumerate(items):
                sub = f"{key}.{i}." if f.metadata.get("many") else key + "."
                yield from _figure_keys(item, sub)
        elif f.metadata["kind"] is not str:
            yield key


def test_the_catalog_has_the_systems_the_issue_asks_for():
    required = {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "hgx-b300", "gb200-nvl72",
                "gb300-nvl72", "gb200-nvl576", "vr-nvl144", "rubin-ultra-nvl576",
                "h100-nvl256", "h200-single", "h200-virtual"}
    assert required <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_system_loads_with_a_source_for_every_figure(name):
    system = load_system(name)
    assert system.name == name
    figures = [k for part in ('gpu', 'domain', 'scaleout')
               for k in _figure_keys(getattr(system, part), part + '.')]
    assert len(figures) >= 40                     # a GPU alone has 40 numeric figures
    missing = [key for key in figures if key not in system.provenance]
    assert missing == []
    for key in figures:
        assert system.provenance[key].source.strip(), key
    # and every figure of its kernel profile, under profile.KEY
    assert {f"profile.{k}" for k in FIELDS} <= set(system.provenance)
    assert system.gpu.sm.count > 0 and system.gpu.tensor.flops_bf16 > 0


def test_units_are_converted_to_si_once():
    h100 = load_system("dgx-h100")
    assert h100.gpu.nvlink.link_bandwidth_Bps == 25e9          # 25 GB/s per link
    assert h100.gpu.nvlink.bandwidth_Bps == 18 * 25e9          # 18 links = 450 GB/s
    assert h100.gpu.sm.clock_Hz == 1980e6
    assert h100.gpu.l2.capacity_B == 50 * 1024**2
    assert h100.gpu.nvlink.latency_s == pytest.approx(310e-9)     # latency_ns = 310
    assert h100.scaleout.nic_bandwidth_Bps == 400e9 / 8        # 400 Gb/s = 50 GB/s
    assert h100.gpu.tensor.flops_bf16 == pytest.approx(989.4e12)


def test_inheritance_states_only_what_differs():
    h100, h200 = load_system("dgx-h100"), load_system("hgx-h200")
    assert h200.inherits == "dgx-h100"
    assert h200.gpu.hbm.bandwidth_Bps == 4800e9
    assert h200.gpu.nvlink == h100.gpu.nvlink                  # inherited unchanged
    virtual = load_system("h200-virtual")
    assert virtual.domain.fabric == "shared-memory" and virtual.domain.switch_tiers == ()


def test_dies_and_devices_are_stated_for_rubin():
    vr = load_system("vr-nvl144")
    assert vr.domain.gpus_per_domain * vr.gpu.dies_per_gpu == 144   # 72 devices x 2 dies
    ru = load_system("rubin-ultra-nvl576")
    assert ru.domain.gpus_per_domain * ru.gpu.dies_per_gpu == 576   # 144 devices x 4 dies
    assert ru.assumed_keys()                                         # roadmap guesses flagged


def test_override_changes_the_figure_and_marks_it():
    s = load_system("dgx-h100", ["gpu.nvlink.link_bandwidth_GBps=50"])
    assert s.gpu.nvlink.bandwidth_Bps == 18 * 50e9
    assert s.provenance["gpu.nvlink.link_bandwidth_GBps"].tag == "override"
    # a figure the user set is a choice, not a guess: listed as overridden, never as assumed
    assert "gpu.nvlink.link_bandwidth_GBps" not in s.assumed_keys()
    assert s.overridden_keys() == ["gpu.nvlink.link_bandwidth_GBps"]


def test_override_of_a_switch_tier_by_index():
    s = load_system("h100-nvl256", ["domain.switch_tier.0.uplink_bandwidth_GBps=3600"])
    assert s.domain.switch_tiers[0].uplink_bandwidth_Bps == 3600e9


@pytest.mark.parametrize("setting, message", [
    ("gpu.nvlink.speed_GBps=5", "unknown key 'gpu.nvlink.speed_GBps'"),
    ("gpu.hbm.bandwidth_TBps=5", "unknown key 'gpu.hbm.bandwidth_TBps'"),
    ("gpu.nvlink.link_bandwidth_GBps=-5", "gpu.nvlink.link_bandwidth_GBps = -5 must be at least 0"),
    ("gpu.nvlink", "expected KEY=VALUE"),
    ("domain.switch_tier.7.latency_ns=1", "no entry '7'"),
])
def test_bad_overrides_name_the_key(setting, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_system("dgx-h100", [setting])


GOOD_CHILD = 'name = "what-if"\ndescription = "faster NVLink"\ninherits = "{parent}"\n' \
             '[gpu.nvlink]\nlink_bandwidth_GBps = {{ value = 50, source = "what-if", ' \
             'provenance = "assumed" }}\n'


def test_a_user_file_inherits_a_shipped_system(write_system):
    path = write_system(GOOD_CHILD.format(parent="dgx-h100"))
    s = load_system(str(path))
    assert s.name == "what-if" and s.gpu.nvlink.bandwidth_Bps == 900e9
    assert s.gpu.hbm.bandwidth_Bps == 3350e9


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("count = 132", "count = 132\nwarp_size = 32"), "unknown key 'gpu.sm.warp_size'"),
    (lambda t: t.replace("bandwidth_GBps = { value = 3350", "bandwidth_TBps = { value = 3.35"),
     "unknown key 'gpu.hbm.bandwidth_TBps' (this table takes bandwidth_GBps: check the unit)"),
    (lambda t: t.replace("clock_MHz = 1980\n", ""), "missing key 'gpu.sm.clock_MHz'"),
    (lambda t: t.replace("link_bandwidth_GBps = 25", "link_bandwidth_GBps = -25"),
     "gpu.nvlink.link_bandwidth_GBps = -25 must be at least 0"),
    (lambda t: t.replace('provenance = "datasheet"\n\n[gpu.sm]', 'provenance = "rumour"\n\n[gpu.sm]'),
     "provenance 'rumour' is not one of"),
    (lambda t: t.replace('count = 132', 'count = "many"'), "gpu.sm.count must be a number"),
    (lambda t: t.replace('architecture = "hopper"', 'architecture = "kepler"'),
     "gpu.architecture = 'kepler' is not one of"),
    (lambda t: t + "\n[gpu.extra]\nx = 1\n", "unknown key 'gpu.extra'"),
    (lambda t: t.replace("[gpu.pcie]\ngeneration = 5\nbandwidth_GBps = 64\nsource",
                         "[gpu.pcie]\ngeneration = 5\nbandwidth_GBps = 64\nnosource"),
     "unknown key 'gpu.pcie.nosource'"),
    (lambda t: t.replace("= [", "= [[") + "[[", "not valid TOML"),
])
def test_each_kind_of_bad_file_gives_its_error(shipped_copy, edit, message):
    path = shipped_copy("dgx-h100")
    path.write_text(edit(path.read_text()))
    with pytest.raises(ConfigError) as info:
        load_system(str(path))
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_a_figure_without_source_is_refused(shipped_copy):
    path = shipped_copy("dgx-h100")
    text = path.read_text().replace(
        'generation = 5\nbandwidth_GBps = 64\nsource = "NVIDIA H100 SXM datasheet: PCIe Gen5 x16, '
        '128 GB/s bidirectional"\nprovenance = "datasheet"', 'generation = 5\nbandwidth_GBps = 64')
    path.write_text(text)
    with pytest.raises(ConfigError, match="gpu.pcie.generation has no source/provenance"):
        load_system(str(path))


def test_unknown_parent_and_cycles(write_system):
    path = write_system(GOOD_CHILD.format(parent="no-such-system"))
    with pytest.raises(ConfigError, match="inherits unknown system 'no-such-system'"):
        load_system(str(path))
    write_system(GOOD_CHILD.format(parent="b.toml").replace("what-if", "a"), "a.toml")
    b = write_system(GOOD_CHILD.format(parent="a.toml").replace("what-if", "b"), "b.toml")
    with pytest.raises(ConfigError, match="inheritance cycle b -> a -> b"):
        load_system(str(b))


def test_missing_file_and_unknown_name():
    with pytest.raises(ConfigError, match="no such file"):
        load_system("/nonexistent/system.toml")
    with pytest.raises(ConfigError, match="unknown system 'dgx-h900'"):
        load_system("dgx-h900")


def test_cross_field_checks(shipped_copy):
    path = shipped_copy("dgx-h100")
    path.write_text(path.read_text().replace("gpus_per_domain = 8", "gpus_per_domain = 16"))
    with pytest.raises(ConfigError, match="top switch tier .* must span the domain"):
        load_system(str(path))
    path = shipped_copy("dgx-h100")
    path.write_text(path.read_text().replace("ports_per_chip = 64", "ports_per_chip = 16"))
    with pytest.raises(ConfigError, match="8 GPUs x 18 NVLink links = 144 ports, but 4 chips x 16 = 64"):
        load_system(str(path))


def _figures(spec, prefix: str):
    """(dotted key, field metadata, value in the file's units) of every number of ``spec``."""
    for f in dataclasses.fields(spec):
        meta, value = f.metadata, getattr(spec, f.name)
        if meta.get("derived"):        # gpu.kernel: the profile's figures, checked there
            continue
        if meta.get("table"):
            for i, sub in enumerate(value if meta.get("many") else (value,)):
                yield from _figures(sub, f"{prefix}{meta['key']}." + (f"{i}." if meta.get("many")
                                                                     else ""))
        elif meta["kind"] in (int, float):
            yield prefix + meta["key"], meta, value / meta["factor"]


@pytest.mark.parametrize("name", list_systems())
def test_every_shipped_figure_is_well_inside_its_plausible_range(name):
    """docs/decisions/D67.md: the ranges catch slips, never a real figure (10x below the top
    but for fractions, which may reach 1; 10x above a nonzero bottom but for counts, which
    start at 1; or 0 where 0 means none)."""
    system = load_system(name)
    checked = 0
    for part in ("gpu", "domain", "scaleout"):
        for key, meta, value in _figures(getattr(system, part), part + "."):
            least, most = meta["plausible"]
            floor = least if meta["kind"] is int else least * 10
            top = most if meta["hi"] is not None else most / 10
            assert value == 0 or floor <= value <= top, (key, value, meta["plausible"])
            checked += 1
    assert checked > 60          # the kernel figures are the profile's (hwmodels.profile ranges)


@pytest.mark.parametrize("setting, shown", [
    ("gpu.sm.count=1000000", "gpu.sm.count = 1000000 is outside the plausible range (1 to 10000)"),
    ("gpu.nvlink.link_bandwidth_GBps=1e-30", "(0.01 to 1e+07, or 0: none)"),
    ("gpu.nvlink.link_bandwidth_GBps=1e30", "= 1e+30 is outside"),
    ("gpu.nvlink.latency_ns=1e30", "(at most 1e+07)"),
    ("gpu.tensor.tflops_bf16=1e-9", "(0.001 to 1e+07"),
    ("gpu.hbm.efficiency=1e-9", "(0.01 to 1)"),
    ("domain.switch_tier.0.port_bandwidth_GBps=1e9", "(0.01 to 1e+07)"),
])
def test_implausible_overrides_name_key_value_and_range(setting, shown):
    with pytest.raises(ConfigError) as info:
        load_system("dgx-h100", [setting])
    assert str(info.value).startswith(f"--set {setting}: ") and shown in str(info.value)
