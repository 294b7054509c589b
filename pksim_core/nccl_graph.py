"""What NCCL's topology search would hand its tuner on a pksim system, and NCCL's per-call
channels and chunk: the inputs and outputs around pksim_core.nccl_tuner's cost table.

Derivations (nccl-model.md section 1.6; "search.cc" is src/graph/search.cc at v2.30.7-1):
- NCCL's node is the NVLink domain: an MNNVL clique (NVL72, NVL576) is fused into one system
  and nNodes counts distinct ring partitions (section 1.9), so nNodes = the domains the ranks
  span, ppn = ranks per domain.
- GPU <-> NVSwitch bandwidth = NVLink links x the per-link figure NCCL assumes for the arch
  (topo.h:19-24; not the datasheet's): 18 x 20.6 = 370.8 GB/s on H100/H200.
- Ring graph: the search starts at the first speed of the arch's array not above that
  bandwidth (search.cc:1051-1067) and lowers the speed while the next is at least 0.49 of the
  first solution's; each speed s fits floor(bw / s) channels (<= MAXCHANNELS/2 = 32). Kept:
  the largest nChannels x s, ties going to the later (more channels). Approximates search.cc's
  loop; reproduces the logged 8x H100/H200 ring/tree graphs (12 channels x 30 GB/s).
  No duplication (ncclTopoDupChannels: cc > 80 and bw < 50 with > 4 channels keeps them).
  Tree graph = the ring's channels (init.cc:1173-1216). Single node bwInter = bwIntra.
  Across domains bwInter = min(bwIntra, the domain's NIC bandwidth / nChannels) (estimate:
  the inter-node speed array is not quoted).
- NVLS graph: nChannels = min(NCCL_MAX_NVLS_ARITY 32, ppn), minChannels = max on one node;
  a channel's head GPU carries 2x its speed, others 1x (search.cc:410-443), so the speed is the
  largest s of the array with (nCh + ceil(nCh / ppn)) x s <= bw; 8 GPUs: 9 s <= 370.8 -> 40.
  bwInter on one node stays at the first speed (no network lowers it): 60 (logged "40/60").
- Execution channels = 2 x ring graph channels (connect.cc:460); nvlsChannels: SM90 16, SM100
  24 on one node and 32 across nodes (nvls.cc:155-157).
- NVLS support: the switch tier spanning the ranks (per domain across domains) reduces in the
  switch and the arch has an nvlsEfficiency (NCCL_NVLS_ENABLE default 2, nvls.cc:262-279).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology
from pksim_core.nccl_constants import Constants
from pksim_core.nccl_tuner import NCCL_STEPS, NVLS_MAX_ARITY, TUNED, Graph, ranked

SPEEDS = {"hopper": (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),               # search.cc:1051-1067
          "blackwell": (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
          "ampere": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3)}
MAX_RING_CHANNELS = 32        # MAXCHANNELS / 2 (init.cc:1173-1216)
MAXCHANNELS = 64              # device.h:91
NVLS_CHANNELS = {"hopper": (16, 16), "blackwell": (24, 32), "ampere": (0, 0)}  # (1 node, more)
# Per-call threads and bytes-per-thread thresholds (tuning.cc:244-257, 588-595; comm.h:49-51)
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
# Per-channel chunk (section 2, init.cc:810-828, enqueue.cc:2226-2294)
LL_CHUNK = 32 << 10                     # 64 KiB LL step, half of it data
LL128_CHUNK = 614_400 * 15 // 16        # LL128 step, 15/16 payload
SIMPLE_RING_CHUNK = 4 * (512 << 10)     # CHUNKSTEPS 4 x 512 KiB step (collectives.h:19-26)
SIMPLE_TREE_CHUNK = 512 << 10           # one step: the tree chunk rule is not quoted (estimate)
NVLS_CHUNK = 128 << 10                  # NCCL_NVLS_CHUNKSIZE (nvls.cc:160)


def arch_row(system: System) -> str:
    """NCCL indexes by compute capability: Rubin (>= 100) takes the Blackwell row."""
    arch = system.gpu.architecture
    return "blackwell" if arch == "rubin" else arch


def _ring_search(total: float, speeds: tuple) -> tuple[int, float]:
    start = next((s for s in speeds if s <= total), speeds[-1])
    best = (0, 0.0)
    for s in speeds:
        if s > start or s < 0.49 * start:
            continue
        n = min(MAX_RING_CHANNELS, int(total // s))
        if n and n * s >= best[0] * best[1]:
            best = (n, float(s))
    return best


def nvls_supported(system: System, topo: Topology, c: Constants, arch: str) -> bool:
    tiers = system.domain.switch_tiers
    if not tiers or (c.nvls_efficiency or {}).get(arch, 1.0 if arch != "ampere" else 0) == 0:
        return False
    if topo.domains > 1 and len({loc.domain for loc in topo.locations}) > 1:
        return tiers[-1].in_switch_reduction and tiers[-1].multicast
    level = topo.span_level()
    return level > 0 and tiers[level - 1].in_switch_reduction and tiers[level - 1].multicast


def derive(system: System, topo: Topology, c: Constants) -> Graph:
    arch = arch_row(system)
    nodes = len({loc.domain for loc in topo.locations})
    ppn = math.ceil(topo.world / nodes)
    links = system.gpu.nvlink.links
    link = "NVLINK" if system.domain.fabric == "nvswitch" and links else "PCI"
    total = links * c.nvlink_bw[arch] if link == "NVLINK" else 12.0     # PCI_BW (topo.h)
    speeds = SPEEDS[arch]
    ring_ch, bw = _ring_search(total, speeds)
    bw_inter = bw
    nic_node = ppn * system.scaleout.nic_bandwidth_Bps / 1e9
    if nodes > 1:
        bw_inter = min(bw, nic_node / ring_ch)
    nvls_ch, nvls_bw, nvls_inter = 0, 0.0, 0.0
    if nvls_supported(system, topo, c, arch):
        nvls_ch = min(NVLS_MAX_ARITY, ppn)
        per_gpu = nvls_ch + math.ceil(nvls_ch / ppn)
        nvls_bw = float(next((s for s in speeds if per_gpu * s <= total), 0))
        start = next((s for s in speeds if s <= total), speeds[-1])
        nvls_inter = float(start) if nodes == 1 else min(float(start), nic_node / nvls_ch)
        nvls_ch = nvls_ch if nvls_bw else 0
    one, more = NVLS_CHANNELS[arch]
    return Graph(arch=arch, n_ranks=topo.world, n_nodes=nodes, link=link,
                 ring_channels=ring_ch, bw_intra=bw, bw_inter=bw_inter,
                 nvls_graph_channels=nvls_ch, nvls_bw_intra=nvls_bw, nvls_bw_inter=nvls_inter,
                 coll_channels=min(MAXCHANNELS, 2 * ring_ch),
                 nvls_channels=(one if nodes == 1 else more) if nvls_ch else 0)


def call_channels(g: Graph, algo: str, proto: str, nbytes: int) -> tuple[int, int]:
    """(channels, threads) NCCL runs this call with (enqueue.cc:2070-2116)."""
    if algo in ("nvls", "nvls_tree"):
        nc = g.nvls_channels if g.n_nodes == 1 else min(g.nvls_channels, g.coll_channels)
        return nc, 640
    nt = 640 if algo == "tree" else MAX_THREADS[proto] + (32 if proto == "Simple" else 0)
    thr = THREAD_THRESHOLD[proto] * (g.n_ranks if algo == "ring" and proto == "LL" else 1)
    nc = g.coll_channels
    while nbytes < nc * nt * thr and nc >= 2:
        nc -= 1
    while nbytes < nc * nt * thr and nt % 128 == 0 and nt > 128 and algo != "tree":
        nt //= 2
    return nc, nt


def chunk_bytes(g: Graph, algo: str, proto: str, nbytes: int, channels: int) -> int:
    """Per-channel chunk (section 2)."""
    if algo in ("nvls", "nvls_tree"):
        concurrent = channels * g.nvls_graph_channels * NVLS_CHUNK
        for factor, size in ((2, 16 << 10), (8, 32 << 10), (64, 64 << 10)):
            if nbytes < factor * concurrent:
                return size
        return NVLS_CHUNK
    if proto == "LL":
        return LL_CHUNK
    if proto == "LL128":
        return LL128_CHUNK
    return SIMPLE_RING_CHUNK if algo == "ring" else SIMPLE_TREE_CHUNK


@dataclass(frozen=True)
class NcclPick:
    coll: str
    algorithm: str               # NCCL's name: tree, ring, nvls, nvls_tree
    protocol: str
    channels: int
    threads: int
    chunk_bytes: int
    version: str
    graph: Graph
    table: tuple                 # ranked rows: (cost us, algo, proto, latency us, bw GB/s)

    def pipeline_depth(self) -> int:
        """Chunks in flight per channel: NCCL_STEPS buffer slots over the chunk's steps
        (ring Simple: CHUNKSTEPS 4 slots a chunk; NVLS and the line protocols: one slot;
        tree Simple: its chunk rule is not quoted, 2 kept)."""
        if self.protocol == "Simple" and self.algorithm == "ring":
            return NCCL_STEPS // 4
        if self.protocol != "Simple" or self.algorithm in ("nvls", "nvls_tree"):
            return NCCL_STEPS
        return 2


def pick(system: System, topo: Topology, c: Constants, op: str, nbytes: int,
         nvls: bool = True, algo: str | None = None, proto: str | None = None) -> NcclPick | None:
    """NCCL's choice for ``op`` (None: a point-to-point op, outside the tuner). ``algo`` /
    ``proto`` force them as NCCL_ALGO / NCCL_PROTO do: every other entry of the cost table
    is zeroed (tuning.cc:453-462, 537-538) and the argmin runs over the rest."""
    coll = TUNED.get(op)
    if coll is None:
        return None
    g = derive(system, topo, c)
    rows = [r for r in ranked(c, g, coll, nbytes, nvls)
            if (algo is None or r[1] == algo) and (proto is None or r[2] == proto)]
    if not rows:
        if algo is None and proto is None:
            return None
        raise InfeasibleError(f"NCCL has no usable {algo or 'algorithm'}/{proto or 'protocol'} "
                              f"for {op} here (NCCL_ALGO / NCCL_PROTO leave nothing)")
    _t, algo, proto, _lat, _bw = rows[0]
    nc, nt = call_channels(g, algo, proto, nbytes)
    return NcclPick(coll, algo, proto, nc, nt, chunk_bytes(g, algo, proto, nbytes, nc), c.version,
                g, tuple(rows))
