"""NCCL's tuner (pksim_core.nccl_tuner / nccl_graph / nccl_constants) against NCCL's own logs
(shared/reference/nccl-model.md section 1.7: 8x H200, NCCL 2.30.4, NCCL_DEBUG_SUBSYS=TUNING),
and the NCCL baseline built on it (pksim_core.nccl)."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from hwmodels.topology import Topology
from hwmodels.errors import InfeasibleError
from pksim_core.nccl import nccl_schedule, report as nccl_report
from pksim_core.nccl_constants import constants
from pksim_core.nccl_graph import derive, pick
from pksim_core.nccl_tuner import table
from pksim_core.simulate import predict

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# Section 1.7's logged table: latency us / algBw GB/s as NCCL printed them.
LOGGED = {
    "AllReduce": {("tree", "LL"): (15.2, 43.6), ("tree", "LL128"): (31.5, 128.8),
                  ("tree", "Simple"): (64.4, 165.6), ("ring", "LL"): (15.0, 80.6),
                  ("ring", "LL128"): (40.6, 189.3), ("ring", "Simple"): (56.0, 205.7),
                  ("nvls", "Simple"): (25.0, 272.0), ("nvls_tree", "Simple"): (25.0, 0.0),
                  ("collnet_direct", "Simple"): (None, 0.0),
                  ("collnet_chain", "Simple"): (None, 0.0)},
    "AllGather": {("ring", "LL"): (10.8, 161.1), ("ring", "LL128"): (27.3, 378.5),
                  ("ring", "Simple"): (32.2, 411.4), ("nvls", "Simple"): (25.0, 208.2)},
    "ReduceScatter": {("ring", "LL"): (10.8, 161.1), ("ring", "LL128"): (27.3, 378.5),
                      ("ring", "Simple"): (32.2, 411.4), ("nvls", "Simple"): (25.0, 208.2)},
}


@pytest.fixture(scope="module")
def h200():
    system = load_system("hgx-h200")
    return system, Topology.build(system)


def test_graph_inputs_match_the_logged_graphs(h200):
    # NCCL 2.19.4 GRAPH lines on 8x H100 (section 1.6): ring/tree 12 channels x 30/30,
    # NVLS 8 channels x 40/60; init: 24 coll channels, 16 nvls channels (section 2)
    g = derive(*h200, constants("2.30.4"))
    assert (g.ring_channels, g.bw_intra, g.bw_inter) == (12, 30.0, 30.0)
    assert (g.nvls_graph_channels, g.nvls_bw_intra, g.nvls_bw_inter) == (8, 40.0, 60.0)
    assert (g.coll_channels, g.nvls_channels, g.n_nodes) == (24, 16, 1)


@pytest.mark.parametrize("coll", sorted(LOGGED))
def test_every_logged_cell_within_0_1(h200, coll):
    c = constants("2.30.4")
    got = table(c, derive(*h200, c), coll)
    for key, (lat, bw) in LOGGED[coll].items():
        glat, gbw = got[key]
        assert gbw == pytest.approx(bw, abs=0.1), (coll, key)
        if lat is not None:
            assert glat == pytest.approx(lat, abs=0.1), (coll, key)


@pytest.mark.parametrize("nbytes, algo, proto, channels", [
    (1 * KiB, "ring", "LL", 1), (4 * KiB, "ring", "LL", 1), (128 * KiB, "ring", "LL", 4),
    (1 * MiB, "ring", "LL", 24), (2 * MiB, "nvls", "Simple", 16),
    (4 * MiB, "nvls", "Simple", 16)])
def test_logged_picks(h200, nbytes, algo, proto, channels):
    # section 1.7's per-call lines: "<bytes> Bytes -> Algo <A> proto <P> channel{0..N-1}"
    p = pick(*h200, constants("2.30.4"), "all-reduce", nbytes)
    assert (p.algorithm, p.protocol, p.channels) == (algo, proto, channels)


def test_nvls_off_32mib_picks_ring_ll128(h200):
    p = pick(*h200, constants("2.30.4"), "all-reduce", 32 * MiB, nvls=False)
    assert (p.algorithm, p.protocol) == ("ring", "LL128")
    # and section 1.7's derived NVLS-off picks: LL up to 3 MiB, Simple at 1 GiB
    assert pick(*h200, constants(), "all-reduce", 3 * MiB, nvls=False).protocol == "LL"
    assert pick(*h200, constants(), "all-reduce", GiB, nvls=False).protocol == "Simple"


def test_dgx_h100_all_reduce_never_tree():
    system = load_system("dgx-h100")
    for nbytes in (64 * KiB, 1 * MiB):
        s = nccl_schedule(system, "all-reduce", nbytes)
        assert (s.algorithm, s.protocol) == ("ring", "LL")
    for nbytes in (8 * MiB, 32 * MiB, GiB):
        assert nccl_schedule(system, "all-reduce", nbytes).algorithm == "nvls"
    topo = Topology.build(system)
    assert all(pick(system, topo, constants(), "all-reduce", 1 << k).algorithm != "tree"
               for k in range(10, 31))


def test_versions_change_the_nvls_figures(h200):
    # section 1.8: NVLS 23 us and 8 x 40 x 5/6 = 266.7 GB/s up to 2.20; 25 us from 2.21
    c = constants("2.20.5")
    g = derive(*h200, c)
    lat, bw = table(c, g, "AllReduce")[("nvls", "Simple")]
    assert lat == pytest.approx(23.0)
    assert bw == pytest.approx(8 * 40 * 5 / 6, abs=0.1)
    assert table(constants("2.21.5"), g, "AllReduce")[("nvls", "Simple")][0] == 25.0
    assert table(constants("2.19.3"), g, "AllReduce")[("tree", "Simple")][0] == \
        pytest.approx(0 + 2 * 7 * 28.0)


# At NCCL's ring/LL -> NVLS crossover on dgx-h100 (1 -> 2 MiB; curve A measures 11.1 and
# 16.1 us in graph mode) the DES keeps the order: ring/LL at 1 MiB costs its LL line format on
# the wire and one NVLink latency (D41), NVLS at 2 MiB its lane's handshakes and its loads'
# round trip to every rank's memory (D41, D40).
@pytest.mark.parametrize("name, launch", [
    ("dgx-h100", "graph"), ("dgx-h100", "one-thread"), ("dgx-h100", "eager"),
    ("gb200-nvl72", "graph"), ("gb200-nvl72", "one-thread")])
def test_larger_message_never_faster(name, launch):
    system = load_system(name)
    times = [predict(system, nccl_schedule(system, "all-reduce", 4 * KiB << k,
                                           launch=launch)).time_s
             for k in range(0, 19)]                                  # 4 KiB .. 1 GiB
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:])), times


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb200-nvl576", "rubin-ultra-nvl576"])
def test_large_domain_rules(name):
    system = load_system(name)
    ranks = system.domain.gpus_per_domain                 # 72, 576, 144 (4-die packages)
    topo = Topology.build(system)
    c = constants()
    g = derive(system, topo, c)
    assert g.n_nodes == 1 and g.n_ranks == ranks          # one NVLink domain is one node
    ar = table(c, g, "AllReduce")
    # ring latency counts 2(n-1) steps: 6.6 + 2(n-1) x 0.6 for Ring/LL
    assert ar[("ring", "LL")][0] == pytest.approx(6.6 + 2 * (ranks - 1) * 0.6)
    assert ar[("nvls_tree", "Simple")][1] == 0.0          # NVLSTree only across domains
    assert all(ar[(a, "Simple")][1] == 0.0 for a in ("collnet_direct", "collnet_chain"))
    for coll in ("AllGather", "ReduceScatter"):           # no NVLS above 32 local ranks
        assert table(c, g, coll)[("nvls", "Simple")][1] == 0.0
    assert ar[("nvls", "Simple")][1] > 0                  # all-reduce keeps NVLS
    assert ar[("nvls", "Simple")][0] == 25.0


def test_nvls_tree_across_domains():
    system = load_system("dgx-h100")
    c = constants()
    one = table(c, derive(system, Topology.build(system), c), "AllReduce")
    two = table(c, derive(system, Topology.build(system, None, 2), c), "AllReduce")
    assert one[("nvls_tree", "Simple")][1] == 0.0
    assert two[("nvls_tree", "Simple")][1] > 0.0
    assert two[("nvls", "Simple")][1] == 0.0              # NVLS across nodes needs CollNet


def test_launch_modes_order_small_messages():
    system = load_system("hgx-h200")
    t = {m: predict(system, nccl_schedule(system, "all-reduce", 4 * KiB, launch=m)).time_s
         for m in ("graph", "eager", "one-thread")}
    # one thread issuing 8 launches cannot beat 8 x launch_api_us
    assert t["one-thread"] >= 8 * system.gpu.sync.launch_api_s
    assert t["graph"] <= t["eager"] <= t["one-thread"]


def test_forced_algorithm_and_protocol_pick_over_the_rest():
    # NCCL_ALGO / NCCL_PROTO zero every other entry of the cost table (tuning.cc:453-462,
    # 537-538): on dgx-h100 at 1 GiB the free pick is NVLS; forcing Ring gives ring/Simple,
    # forcing LL128 as well ring/LL128; NVLS with LL is no entry at all
    system = load_system("dgx-h100")
    topo = Topology.build(system)
    c = constants()
    assert pick(system, topo, c, "all-reduce", 1 << 30).algorithm == "nvls"
    ring = pick(system, topo, c, "all-reduce", 1 << 30, algo="ring")
    assert (ring.algorithm, ring.protocol) == ("ring", "Simple")
    ll128 = pick(system, topo, c, "all-reduce", 1 << 30, algo="ring", proto="LL128")
    assert (ll128.algorithm, ll128.protocol) == ("ring", "LL128")
    with pytest.raises(InfeasibleError, match="NCCL_ALGO"):
        pick(system, topo, c, "all-reduce", 1 << 30, algo="nvls", proto="LL")
    s = nccl_schedule(system, "all-reduce", 1 << 30, algo="ring", proto="LL128")
    assert (s.algorithm, s.protocol) == ("ring", "LL128")
    assert nccl_report(system, s)["pick"]["forced"] == {"algo": "ring", "proto": "LL128"}


def test_ring_ll_cuts_through_and_nvls_copies_only_unregistered():
    # ring/LL at 128 B on dgx-h100 in a CUDA graph: 14 steps of one NVLink crossing each
    # (0.31 us, the flag rides in the line; D40, D41) behind a graph node's launch (1.3 us):
    # 1.3 + 14 x 0.31 = 5.64 us, the data itself a few ns
    system = load_system("dgx-h100")
    s = nccl_schedule(system, "all-reduce", 128, launch="graph")
    assert (s.algorithm, s.protocol) == ("ring", "LL")
    t = predict(system, s).time_s
    assert t == pytest.approx(system.gpu.sync.kernel_launch_s + 14 * system.gpu.nvlink.latency_s,
                              rel=1e-3)
    assert t == pytest.approx(5.64e-6, rel=1e-3)
    # at 1 MiB the 14 steps' data share the links at once: the time is the links' work (LL
    # carries 8 B in 16 at the register efficiency: 2 x 7/8 MiB / (450 GB/s x 0.76 / 2)) and
    # one crossing, not the sum of 14 crossings and the work
    s = nccl_schedule(system, "all-reduce", 1 << 20, launch="graph")
    link = 2 * 7 / 8 * (1 << 20) / (450e9 * 0.76 / 2)
    p = predict(system, s)
    assert p.time_s < system.gpu.sync.kernel_launch_s + link + 2 * system.gpu.nvlink.latency_s
    assert p.time_s > system.gpu.sync.kernel_launch_s + link
    # NVLS at 1 GiB: an eager call copies through NCCL's buffers (2 x 1 GiB on the copy
    # warps per rank), a captured one does not (D42); both are bound by the NVLink ports
    eager = predict(system, nccl_schedule(system, "all-reduce", 1 << 30, launch="eager"))
    graph = predict(system, nccl_schedule(system, "all-reduce", 1 << 30, launch="graph"))
    assert "copy" in eager.breakdown and "copy" not in graph.breakdown
    assert eager.bound_resource == graph.bound_resource == "nvl_in"
    assert graph.time_s < eager.time_s < 1.1 * graph.time_s


def _nccl_json(*args):
    import json
    from click.testing import CliRunner
    from pksim_cli.main import cli
    res = CliRunner().invoke(cli, ["predict", "--system", "dgx-h100", "--impl", "nccl",
                                   "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_nvls_off_on_the_command_line_takes_nvls_out_of_the_tuners_choices():
    # NCCL_NVLS_ENABLE=0: ncclNvlsInit leaves nvlsSupport 0, so NVLS and NVLSTree are skipped
    # in the cost table (src/transport/nvls.cc, enqueue.cc); 1 GiB on dgx-h100 picks NVLS
    # with it on and ring/Simple, NCCL's next entry, with it off
    system = load_system("dgx-h100")
    on = _nccl_json("--op", "all-reduce", "--bytes", "1GiB")
    off = _nccl_json("--op", "all-reduce", "--bytes", "1GiB", "--nvls", "off")
    assert on["schedule"]["algorithm"] == "nvls" and on["nccl"]["pick"]["algorithm"] == "nvls"
    assert (off["schedule"]["algorithm"], off["schedule"]["protocol"]) == ("ring", "Simple")
    assert not {r["algorithm"] for r in off["nccl"]["tuner_ranked"]} & {"nvls", "nvls_tree"}
    want = predict(system, nccl_schedule(system, "all-reduce", GiB, nvls=False)).time_s
    assert off["time_s"] == pytest.approx(want) and off["time_s"] > on["time_s"]
    assert _nccl_json("--op", "all-reduce", "--bytes", "1GiB", "--nvls", "on") == on
    # across two domains NVLSTree goes too
    two = ["--op", "all-reduce", "--bytes", "1GiB", "--domains", "2"]
    assert _nccl_json(*two)["nccl"]["pick"]["algorithm"] == "nvls_tree"
    assert _nccl_json(*two, "--nvls", "off")["nccl"]["pick"]["algorithm"] != "nvls_tree"


def test_algorithm_with_impl_nccl_forces_ncclalgo():
    # before, --algorithm ring was ignored: the 8-rank 1 GiB all-reduce came back NVLS
    ring = _nccl_json("--op", "all-reduce", "--bytes", "1GiB", "--algorithm", "ring")
    assert ring["schedule"]["algorithm"] == "ring"
    assert ring["nccl"]["pick"]["forced"]["algo"] == "ring"
    tree = _nccl_json("--op", "all-reduce", "--bytes", "1GiB", "--algorithm", "tree")
    assert tree["schedule"]["algorithm"] == "tree"
    nvls_tree = _nccl_json("--op", "all-reduce", "--bytes", "1GiB", "--domains", "2",
                           "--algorithm", "hierarchical")
    assert nvls_tree["nccl"]["pick"]["algorithm"] == "nvls_tree"
    from click.testing import CliRunner
    from pksim_cli.main import cli
    res = CliRunner().invoke(cli, ["predict", "--system", "dgx-h100", "--impl", "nccl", "--op",
                                   "all-gather", "--bytes", "1GiB", "--algorithm", "tree"])
    assert res.exit_code == 2 and "NCCL has no usable tree" in res.stderr
