"""Topology: counts of GPUs, switches and links; paths on one- and two-tier systems."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.topology import Topology


@pytest.mark.parametrize("name, gpus, tier_chips, nvlink_ports", [
    ("dgx-a100", 8, [6], 8 * 12),            # 6 NVSwitch gen-2, 12 NVLink 3 links per GPU
    ("dgx-h100", 8, [4], 8 * 18),            # 4 NVSwitch gen-3, 18 NVLink 4 links per GPU
    ("dgx-b200", 8, [2], 8 * 18),            # 2 NVLink 5 switch chips
    ("gb200-nvl72", 72, [18], 72 * 18),      # 9 trays x 2 chips
    ("h100-nvl256", 256, [32 * 4, 36], 256 * 18),   # 32 nodes x 4 L1 chips; 36 L2 chips
    ("gb200-nvl576", 576, [8 * 36, 144], 576 * 18),  # 8 racks (36 chips assumed) + 144 spine
    ("h200-virtual", 1, [], 0),              # 8 virtual ranks on one GPU: no links
])
def test_counts(name, gpus, tier_chips, nvlink_ports):
    topo = Topology.build(load_system(name))
    counts = topo.counts()
    assert counts["gpus"] == gpus
    assert [counts[f"tier{i}_chips"] for i in range(1, len(tier_chips) + 1)] == tier_chips
    assert counts["nvlink_ports"] == nvlink_ports
    assert counts["ranks"] == load_system(name).domain.gpus_per_domain


def test_one_tier_path_is_egress_switch_ingress():
    topo = Topology.build(load_system("dgx-h100"))
    path = topo.gpu_path(0, 5)
    assert path.resources == ("nvl_out[0]", "sw1[0]", "nvl_in[5]")
    assert path.hops == ("gpu0", "sw1.0", "gpu5")
    assert path.one_way_s == pytest.approx(310e-9)   # gpu.nvlink.latency_ns = 310


def test_two_tier_path_climbs_only_when_it_must():
    system = load_system("h100-nvl256")
    topo = Topology.build(system)
    same_node = topo.gpu_path(0, 7)                  # GPUs 0..7 share node 0
    assert same_node.resources == ("nvl_out[0]", "sw1[0]", "nvl_in[7]")
    other_node = topo.gpu_path(0, 9)                 # GPU 9 is in node 1
    assert other_node.resources == ("nvl_out[0]", "sw1[0]", "up1[0]", "sw2[0]",
                                    "down1[1]", "sw1[1]", "nvl_in[9]")
    extra = system.domain.switch_tiers[1].latency_s
    assert other_node.one_way_s == pytest.approx(system.gpu.nvlink.latency_s + extra)
    # uplinks carry the derived 1800 GB/s per node per direction
    assert topo.resources["up1[3]"].capacity_Bps == 1800e9


def test_paths_across_domains_use_the_nics():
    system = load_system("dgx-h100")
    topo = Topology.build(system, domains=2)
    assert topo.world == 16
    path = topo.gpu_path(2, 10)                      # rank 10 is GPU 2 of domain 1
    assert path.resources == ("nic_out[2]", "nic_in[10]")
    assert path.one_way_s == system.scaleout.latency_s
    # 400 Gb/s NIC x efficiency 0.9 = 45 GB/s
    assert topo.resources["nic_out[2]"].capacity_Bps == pytest.approx(400e9 / 8 * 0.9)


def test_reduction_path_goes_to_the_tier_spanning_the_world():
    topo = Topology.build(load_system("gb200-nvl576"))
    assert topo.reduction_path(5).resources[-1] == "nvls2[0]"
    small = Topology.build(load_system("gb200-nvl576"), world=72)   # one rack
    assert small.reduction_path(5).resources == ("nvl_out[5]", "sw1[0]", "nvls1[0]")
    with pytest.raises(ConfigError, match="no in-switch reduction"):
        Topology.build(load_system("dgx-a100")).reduction_path(0)


def test_world_larger_than_the_cluster_is_an_error():
    with pytest.raises(ConfigError, match="--world 9 is larger than the cluster: dgx-h100 has "
                                          "8 GPUs per domain x 1 domain"):
        Topology.build(load_system("dgx-h100"), world=9)
    with pytest.raises(ConfigError, match="--domains must be at least 1"):
        Topology.build(load_system("dgx-h100"), domains=0)


def test_virtual_ranks_share_one_gpu_and_split_its_sms():
    topo = Topology.build(load_system("h200-virtual"), world=4)
    assert {loc.gpu for loc in topo.locations} == {0}
    assert topo.sms_per_rank() == 132 // 4
    assert topo.gpu_path(0, 3).resources == ()
