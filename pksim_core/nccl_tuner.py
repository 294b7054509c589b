"""NCCL's tuner as NCCL runs it: the cost table per (algorithm, protocol) and its argmin.

Pure functions on a ``Graph`` (the searched graphs' figures, pksim_core.nccl_graph derives them
from a system's topology) and ``Constants`` (pksim_core.nccl_constants, per NCCL version). The
formulas are nccl-model.md sections 1.2-1.5 (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``,
``topoGetAlgoInfo``); channels and chunk are section 2. The table's latency and bandwidth
only RANK the candidates: they are not times (pksim_core.nccl simulates the pick for that).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from pksim_core.nccl_constants import PROTOS, Constants

TABLE_ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
# The collectives NCCL's tuner sees (others run as point-to-point sends, outside the table).
TUNED = {"all-reduce": "AllReduce", "all-gather": "AllGather",
         "reduce-scatter": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce"}
NVLS_MAX_ARITY = 32          # NCCL_MAX_NVLS_ARITY (src/include/device.h:213)
NCCL_STEPS = 8               # device.h:26
# treeCorrectionFactor[proto][log2(nBytes/64)] (tuning.cc:623-627)
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
           1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}


@dataclass(frozen=True)
class Graph:
    """What NCCL's topology search hands the tuner (nccl-model.md section 1.6)."""
    arch: str                    # "ampere" | "hopper" | "blackwell" (NCCL's arch row)
    n_ranks: int
    n_nodes: int                 # NVLink domains: an NVL72/NVL576 clique is one node (1.9)
    link: str                    # graph typeIntra: "NVLINK" or "PCI"
    ring_channels: int           # ring (and tree) graph nChannels
    bw_intra: float              # ring/tree graph bwIntra, GB/s per channel
    bw_inter: float              # ring/tree graph bwInter, GB/s per channel
    nvls_graph_channels: int     # NVLS graph nChannels (0: no NVLS)
    nvls_bw_intra: float
    nvls_bw_inter: float
    coll_channels: int           # execution channels: 2 x ring graph channels (connect.cc:460)
    nvls_channels: int           # nvlsChannels (nvls.cc:155-157)
    chain_tree: bool = False     # maxTreePattern == TREE (the 0.85 factor); not on H100/H200
    notes: tuple[str, ...] = field(default=())

    @property
    def ppn(self) -> int:
        return self.n_ranks // self.n_nodes

    @property
    def column(self) -> int:     # tuning.cc:267
        return min(self.n_nodes - 1, 2)


def nsteps(coll: str, n: int) -> int:
    """tuning.cc:289-291."""
    return 2 * (n - 1) if coll == "AllReduce" else (n - 1 if coll in ("AllGather",
                                                                     "ReduceScatter") else n)


def enabled(c: Constants, g: Graph, coll: str, algo: str, proto: str, nvls: bool = True) -> bool:
    """Section 1.4: which (algorithm, protocol) NCCL considers for this collective."""
    if algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain") and proto != "Simple":
        return False                                                    # tuning.cc:301
    if coll in ("Broadcast", "Reduce"):
        return algo == "ring"                                           # tuning.cc:294
    if coll in ("AllGather", "ReduceScatter"):
        if algo not in ("ring", "nvls", "collnet_direct", "pat"):       # tuning.cc:295-297
            return False
    if algo == "pat":            # 1 GPU per node only (ncclPatEnable, tuning.cc:215-223); its
        return False             # latency (tuning.cc:418-435) is not quoted: not modelled
    if algo.startswith("collnet"):   # needs SHARP-capable switches: never modelled
        return False
    if algo in ("nvls", "nvls_tree"):
        if not nvls or g.nvls_graph_channels < 2:                       # init.cc:1453
            return False
        if algo == "nvls_tree" and g.n_nodes == 1:                      # tuning.cc:502
            return False
        if algo == "nvls" and g.n_nodes > 1:     # needs CollNet (tuning.cc:504-506)
            return False
        if coll != "AllReduce" and g.ppn > NVLS_MAX_ARITY:             # enqueue.cc:2004-2007
            return False
        if algo == "nvls_tree" and coll != "AllReduce":
            return False
    if algo == "tree" and coll != "AllReduce":
        return False
    return True


def bandwidth(c: Constants, g: Graph, coll: str, algo: str, proto: str) -> float:
    """Section 1.2 (tuning.cc:288-383): the algorithm bandwidth NCCL stores, GB/s."""
    col = g.column
    nvls_like = algo in ("nvls", "nvls_tree")
    n_ch = g.nvls_graph_channels if nvls_like else g.ring_channels
    bw = g.bw_intra if g.n_nodes <= 2 else g.bw_inter                   # tuning.cc:306
    if nvls_like:                                                       # tuning.cc:307-323
        if c.nvls_efficiency is None:    # v2.18-v2.27 (section 1.8)
            intra = g.nvls_bw_intra
            if coll in ("AllGather", "ReduceScatter"):
                bw = min(intra * (g.ppn - 1) / g.ppn, g.nvls_bw_inter * 0.9)
            else:
                bw = min(intra, g.nvls_bw_inter)
        else:
            intra = g.nvls_bw_intra * c.nvls_efficiency[g.arch] * (n_ch - 1) / n_ch
            intra *= 2 if coll == "AllReduce" else (g.ppn - 1) / g.ppn
            inter = g.nvls_bw_inter * (2 if g.n_nodes <= 2 and algo == "nvls_tree" else 1)
            cap = c.nvls_tree_bw[g.arch][col] if algo == "nvls_tree" else math.inf
            bw = min(intra, inter, cap)
    bus = n_ch * bw                                                     # tuning.cc:324
    if algo == "ring" and proto == "LL":                                # tuning.cc:327-337
        bus = min(c.ll_max_bw[g.arch][col], bus * 0.5)
    if algo == "ring" and proto == "LL128":
        bus = min(bus * 0.92, n_ch * c.ring_ll128_bw[g.arch][col])
    if algo == "tree" and coll == "AllReduce":
        bus = min(bus * 0.92, n_ch * c.tree_bw[g.arch][col])
    if algo == "tree" and proto == "LL":
        bus = min(bus / 3.8, c.ll_max_bw[g.arch][col])
    if algo == "tree" and proto == "LL128":
        bus = min(bus * (7 / 9 if g.n_nodes == 1 else 120 / 128),
                  n_ch * c.tree_ll128_bw[g.arch][col])
    if algo == "tree" and g.chain_tree:
        bus *= 0.85
    if algo == "pat":
        bus *= 0.75
    if algo.startswith("collnet") and proto != "Simple":
        bus = 0.0
    if coll in ("AllGather", "ReduceScatter") and algo != "ring":
        return bus                                                      # not converted
    if algo in ("ring", "nvls", "nvls_tree"):                           # tuning.cc:376-382
        if nvls_like and c.nvls_efficiency is None:
            return bus * 5 / 6 if coll == "AllReduce" else bus          # pre-2.28 ratio
        return bus * g.n_ranks / nsteps(coll, g.n_ranks)
    return bus * 0.5


def latency(c: Constants, g: Graph, coll: str, algo: str, proto: str) -> float:
    """Section 1.3 (tuning.cc:384-435), us. graph->latencyInter is taken as 0 (no PXN)."""
    p = PROTOS.index(proto)
    lat = c.base_lat[algo][p]
    intra = c.hw_lat[g.link][algo][p]
    inter = c.hw_lat["NET"]["tree" if g.ppn == 1 else algo][p]
    n = g.n_ranks
    if algo == "ring":
        inter_steps = 0 if g.n_nodes == 1 else (
            2 * (g.n_nodes - 1) if coll == "AllReduce" else g.n_nodes - 1)
        overhead = 0.0 if g.n_nodes == 1 else c.net_overhead_us * (3 if proto == "Simple" else 1)
        return lat + (nsteps(coll, n) - inter_steps) * max(intra, overhead) \
            + inter_steps * inter
    if algo == "tree":
        return lat + 2 * ((n // g.n_nodes - 1) * intra + _log2i(g.n_nodes) * inter)
    if algo == "nvls":
        return intra + (inter if g.n_nodes > 1 else 0.0)                 # base replaced
    if algo == "nvls_tree":
        return lat + intra + 2 * _log2i(g.n_nodes) * inter
    return lat + intra + (inter if g.n_nodes > 1 else 0.0)              # collnet / pat: unused


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def table(c: Constants, g: Graph, coll: str, nvls: bool = True) -> dict:
    """{(algo, proto): (latency us, algorithm bandwidth GB/s)}; bandwidth 0 = disabled."""
    out = {}
    for algo in TABLE_ALGOS:
        for proto in PROTOS:
            on = enabled(c, g, coll, algo, proto, nvls)
            out[(algo, proto)] = (latency(c, g, coll, algo, proto),
                                  bandwidth(c, g, coll, algo, proto) if on else 0.0)
    return out


def cost_us(g: Graph, coll: str, algo: str, proto: str, lat: float, bw: float,
            nbytes: int) -> float:
    """ncclTopoGetAlgoTime (tuning.cc:630-655), one pipelined op; -1: unusable. A rank."""
    if bw <= 0:
        return -1.0
    log_size = _log2i(nbytes >> 6) if nbytes >> 6 else -1
    if algo == "tree" and coll == "AllReduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[proto][log_size]
    if algo == "nvls_tree" and coll == "AllReduce" and 0 <= log_size < 24 \
            and g.arch == "blackwell":
        bw *= TREE_CORRECTION[proto][log_size]
    if algo == "ring" and proto == "Simple" and g.n_nodes > 1 and coll == "AllReduce" \
            and nbytes / (g.ring_channels * g.n_ranks) >= 64:
        lat *= 1.4               # compute capability >= 80 on every arch modelled (< 80: 1.9)
    return lat + nbytes / (1000 * bw)


def ranked(c: Constants, g: Graph, coll: str, nbytes: int, nvls: bool = True) -> list:
    """[(cost us, algo, proto, latency us, bandwidth GB/s)] of the usable entries, best first
    (ties keep NCCL's loop order: algorithm, then protocol; enqueue.cc:2028-2117)."""
    rows = []
    for (algo, proto), (lat, bw) in table(c, g, coll, nvls).items():
        t = cost_us(g, coll, algo, proto, lat, bw, nbytes)
        if t >= 0:
            rows.append((t, algo, proto, lat, bw))
    return sorted(rows, key=lambda r: r[0])
