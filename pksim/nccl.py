"""NCCL as it would run on the modelled hardware: the baseline users compare against.

NCCL picks an (algorithm, protocol) per call with its own alpha-beta cost model;
we reproduce that choice (``choose``; ``nccl_schedule`` is the schedule it makes) with NCCL's published tuning constants, then simulate the
chosen algorithm on our fluid model with NCCL's per-step latencies, protocol
efficiency and channel count.

Sources (NVIDIA/nccl, src/graph/tuning.cc, ncclTunerConstantsDefaults, and
src/graph/topo.h), as read in 2026-06:
- baseLatencies (us) [LL, LL128, Simple]: Tree 6.8/14.0/8.4, Ring 6.6/14.0/8.4, NVLS 0/0/0.
- hwLatencies NVLINK (us): Tree 0.6/1.25/4.0, Ring 0.6/1.9/3.4, NVLS Simple 25.
- hwLatencies NET (us): Tree 5.0/8.5/14, Ring 2.7/4.0/14.0, NVLS 18.
- nvlsEfficiency: Hopper 0.85, Blackwell 0.74. llMaxBws Hopper 141 GB/s.
- perChMaxRingLL128Bws: Hopper 36.7, Blackwell 40.0 GB/s per channel.
- NVLink bandwidth NCCL assumes per link: SM80 20.0, SM90 20.6, SM100 40.1 GB/s.
Protocol payload efficiency: LL carries 8 data bytes per 16 (0.5); LL128 120 of
every 128 bytes (0.9375); Simple 1.
"""
from __future__ import annotations

from hwmodels.errors import InfeasibleError
from hwmodels.system import System
from hwmodels.topology import Topology, resource
from pksim.schedule import Schedule
from pksim.workloads.collectives import busbw_factor

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
HW_LAT_NVLINK_US = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0)}
HW_LAT_NET_US = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0)}
PROTO_EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}
LINK_BW_GBPS = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1, "rubin": 40.1}
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74, "rubin": 0.74}
LL_MAX_GBPS = {"ampere": 141.0, "hopper": 141.0, "blackwell": 282.0, "rubin": 282.0}
LL128_PER_CHANNEL_GBPS = {"ampere": 20.0, "hopper": 36.7, "blackwell": 40.0, "rubin": 40.0}
# NCCL opens up to 32 channels (MAXCHANNELS); on an NVSwitch node it typically runs
# 16 for NVLS on SM90 and a similar count for rings. Assumed, not read off a log.
CHANNELS = 16
# The Simple protocol's per-channel rate is assumed to be the LL128 cap scaled by the
# ratio of their payload efficiencies (see issue_capacities).
NCCL_ALGORITHMS = ("ring", "tree", "nvls", "collnet")


def _proto_index(protocol: str) -> int:
    return PROTOCOLS.index(protocol)


def program_algorithm(schedule: Schedule) -> str:
    """The pksim program that executes NCCL's algorithm for this op."""
    if schedule.algorithm == "nvls":
        return "in-network"
    if schedule.op in ("all-to-all", "gather", "scatter"):
        return "direct"
    if schedule.algorithm == "tree":
        return "tree"
    return "ring"


def check(system: System, topo: Topology, schedule: Schedule) -> None:
    if topo.virtual:
        raise InfeasibleError("NCCL does not run several ranks on one GPU (virtual ranks)")
    if schedule.algorithm not in NCCL_ALGORITHMS:
        raise InfeasibleError(f"NCCL has no {schedule.algorithm!r} algorithm "
                              f"(it has {', '.join(NCCL_ALGORITHMS)})")
    if schedule.protocol not in PROTOCOLS:
        raise InfeasibleError(f"NCCL protocol must be one of {', '.join(PROTOCOLS)}")
    if schedule.algorithm == "collnet":
        raise InfeasibleError("NCCL CollNet needs SHARP-capable InfiniBand switches, "
                              "which pksim does not model")
    if schedule.algorithm == "tree" and schedule.op != "all-reduce":
        raise InfeasibleError(f"NCCL's tree algorithm is for all-reduce only, not {schedule.op}")
    if schedule.algorithm == "nvls":
        level = topo.span_level()
        tiers = system.domain.switch_tiers
        if (schedule.op not in ("all-reduce", "all-gather", "reduce-scatter") or level == 0
                or not tiers[level - 1].in_switch_reduction):
            raise InfeasibleError(f"NCCL NVLS needs in-switch reduction spanning the ranks "
                                  f"and all-reduce/all-gather/reduce-scatter ({system.name}, "
                                  f"{schedule.op})")
        if schedule.protocol != "Simple":
            raise InfeasibleError("NCCL NVLS runs the Simple protocol only")
    if schedule.algorithm != "nvls" and schedule.op in ("all-to-all", "gather", "scatter") \
            and schedule.algorithm != "ring":
        raise InfeasibleError(f"NCCL runs {schedule.op} as point-to-point sends (algorithm ring)")


def link_efficiency(system: System, schedule: Schedule) -> float:
    return system.gpu.nvlink.efficiency_register * PROTO_EFFICIENCY[schedule.protocol]


def issue_capacities(system: System, topo: Topology, schedule: Schedule) -> dict[str, float]:
    """NCCL's channels replace pk's communication SMs: per rank, channels x per-channel rate."""
    arch = system.gpu.architecture
    if schedule.protocol == "LL":
        rate = LL_MAX_GBPS[arch] * 1e9
    else:
        rate = CHANNELS * LL128_PER_CHANNEL_GBPS[arch] * 1e9
        if schedule.protocol == "Simple":
            rate /= PROTO_EFFICIENCY["LL128"]
    return {resource("issue", r): rate for r in range(topo.world)}


def step_latency(system: System, topo: Topology, schedule: Schedule) -> float:
    table = HW_LAT_NET_US if topo.domains > 1 else HW_LAT_NVLINK_US
    alg = schedule.algorithm if schedule.algorithm in table else "ring"
    return table[alg][_proto_index(schedule.protocol)] * 1e-6


def base_latency(schedule: Schedule) -> float:
    alg = schedule.algorithm if schedule.algorithm in BASE_LAT_US else "ring"
    return BASE_LAT_US[alg][_proto_index(schedule.protocol)] * 1e-6


def _nsteps(op: str, algorithm: str, n: int) -> int:
    if algorithm == "nvls":
        return 2 if op == "all-reduce" else 1
    if algorithm == "tree":
        return 2 * max(1, (n - 1).bit_length())
    return 2 * (n - 1) if op == "all-reduce" else n - 1


def estimate(system: System, topo: Topology, op: str, nbytes: int, algorithm: str,
             protocol: str) -> float:
    """NCCL's own time estimate (its alpha-beta formula), used only to choose."""
    arch = system.gpu.architecture
    n = topo.world
    links = system.gpu.nvlink.links
    bus = links * LINK_BW_GBPS[arch]
    if topo.domains > 1:
        bus = min(bus, system.scaleout.nic_bandwidth_Bps / 1e9)
    if protocol == "LL":
        bus = min(bus * 0.5, LL_MAX_GBPS[arch])
    elif protocol == "LL128":
        bus = min(bus * 0.92, CHANNELS * LL128_PER_CHANNEL_GBPS[arch])
    if algorithm == "nvls":
        bus *= NVLS_EFFICIENCY.get(arch, 0.74) * (2 if op == "all-reduce" else 1)
    if algorithm == "tree":
        bus *= 0.8
    factor = busbw_factor(op, n) or 1.0
    algbw = bus / factor
    hw = (HW_LAT_NET_US if topo.domains > 1 else HW_LAT_NVLINK_US)[algorithm]
    lat = BASE_LAT_US[algorithm][_proto_index(protocol)] \
        + _nsteps(op, algorithm, n) * hw[_proto_index(protocol)]
    return lat * 1e-6 + nbytes / (algbw * 1e9)


def choose(system: System, topo: Topology, op: str, nbytes: int) -> tuple[str, str]:
    """NCCL's own pick of (algorithm, protocol) for this call."""
    best = None
    for algorithm in ("ring", "tree", "nvls"):
        for protocol in PROTOCOLS:
            probe = Schedule(op=op, shape=(("bytes", nbytes),), world=topo.world,
                             domains=topo.domains, impl="nccl", algorithm=algorithm,
                             mechanism="register", protocol=protocol, comm_sms=CHANNELS)
            try:
                check(system, topo, probe)
            except InfeasibleError:
                continue
            t = estimate(system, topo, op, nbytes, algorithm, protocol)
            if best is None or t < best[0]:
                best = (t, algorithm, protocol)
    if best is None:
        raise InfeasibleError(f"NCCL cannot run {op} on {system.name} with {topo.world} ranks")
    return best[1], best[2]


def nccl_schedule(system: System, op: str, nbytes: int, world: int | None = None,
                  domains: int = 1) -> Schedule:
    """The schedule NCCL itself would pick for this call."""
    topo = Topology.build(system, world, domains)
    algorithm, protocol = choose(system, topo, op, nbytes)
    chunk = 512 << 10 if protocol == "Simple" else 0
    return Schedule(op=op, shape=(("bytes", nbytes),), world=topo.world, domains=domains,
                    impl="nccl", algorithm=algorithm, mechanism="register", protocol=protocol,
                    comm_sms=CHANNELS, chunk_bytes=chunk,
                    pipeline_depth=8 if chunk else 1)
