"""The hardware description: frozen dataclasses, one per table of a system file.

Each field's metadata names the TOML key (with its unit) and the factor that turns
it into SI, so the key names, the units and the checks live in exactly one place.
Field names carry the SI unit: ``bandwidth_Bps``, ``latency_s``, ``capacity_B``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from hwmodels.errors import ConfigError

ARCHITECTURES = ("ampere", "hopper", "blackwell", "rubin")
FABRICS = ("nvswitch", "shared-memory", "none")
PROVENANCE_TAGS = (
    "datasheet",
    "roadmap",
    "paper",
    "microbenchmark",
    "estimate",
    "derived",
    "assumed",
    "calibrated",
    "override",
)
# Tags that make a prediction partly guesswork (reported as depends_on_assumed). A user's
# override is a choice, not a guess: System.overridden_keys lists those.
GUESS_TAGS = ("roadmap", "estimate", "assumed")


# The range a figure must lie in to be believed, by the unit its key names (a nonzero value:
# where 0 is allowed it means "none"): wide enough for every GPU and network built or announced
# and a what-if far beyond them either way, narrow enough that a slip of the keyboard (1e-30,
# 1e30) is refused rather than printed as a result (docs/decisions/D67.md). The first suffix
# that ends the key decides; figures without a unit give theirs in ``fig(plausible=...)``.
PLAUSIBLE_BY_UNIT = (
    ("_ns_per_KiB", (0.0, 1e6)), ("_ps_per_element", (0.0, 1e6)),
    ("_GBps", (1e-2, 1e7)), ("_Gbps", (1e-1, 1e8)), ("_MHz", (1.0, 1e5)),
    ("_GB", (1e-3, 1e6)), ("_MiB", (1e-3, 1e6)), ("_KiB", (1e-3, 1e6)),
    ("_bytes", (1.0, 1e9)), ("_ns", (0.0, 1e7)), ("_us", (0.0, 1e4)), ("_ps", (0.0, 1e10)),
)
PLAUSIBLE_TFLOPS = (1e-3, 1e7)       # tflops_*: a GFLOP/s to ten EFLOP/s per GPU
PLAUSIBLE_FRACTION = (1e-2, 1.0)     # efficiencies and shares (hi = 1)


def plausible_range(key: str, hi: float | None) -> tuple[float, float] | None:
    """The plausible range of a figure named ``key`` (None: it must give its own)."""
    if key.startswith("tflops_"):
        return PLAUSIBLE_TFLOPS
    for suffix, bounds in PLAUSIBLE_BY_UNIT:
        if key.endswith(suffix):
            return bounds
    return PLAUSIBLE_FRACTION if hi == 1.0 else None


def split_figure(where: str, dotted: str, item: Any, source: Any, tag: Any,
                 required: bool = True) -> tuple[Any, Any, Any]:
    """(value, source, tag) of a figure as a file gives it: a bare value (its table's
    ``source`` and ``provenance``), or ``{ value, source, provenance, note }`` whose own source
    and tag replace the table's. ``required``: a figure with neither is an error naming
    ``where`` and the key, as is an unknown tag."""
    if isinstance(item, dict):
        extra = set(item) - {"value", "source", "provenance", "note"}
        if extra or "value" not in item:
            raise ConfigError(f"{where}: {dotted}: a figure table takes value, source, "
                              f"provenance and note, got {sorted(item)}")
        source, tag = item.get("source", source), item.get("provenance", tag)
        if "provenance" in item and tag not in PROVENANCE_TAGS:
            raise ConfigError(f"{where}: {dotted}: provenance {tag!r} is not one of "
                              f"{', '.join(PROVENANCE_TAGS)}")
        item = item["value"]
    if required and (source is None or tag is None):
        raise ConfigError(f"{where}: {dotted} has no source/provenance (give them on the "
                          f"figure or its table)")
    return item, source, tag


def fig(key: str, factor: float = 1.0, *, lo: float = 0.0, lo_open: bool = True,
        hi: float | None = None, kind: type = float, doc: str = "",
        plausible: tuple[float, float] | None = None) -> Any:
    """A figure: TOML key (unit in its name), SI factor, the allowed range and the
    plausible one (``plausible_range`` by the key's unit unless given).

    ``lo_open`` means the value must be strictly above ``lo``."""
    return field(metadata={"key": key, "factor": factor, "lo": lo, "lo_open": lo_open,
                           "hi": hi, "kind": kind, "doc": doc,
                           "plausible": plausible or plausible_range(key, hi)})


def text(key: str, choices: tuple[str, ...] | None = None, doc: str = "") -> Any:
    return field(metadata={"key": key, "kind": str, "choices": choices, "doc": doc})


def flag(key: str, doc: str = "") -> Any:
    return field(metadata={"key": key, "kind": bool, "doc": doc})


def table(key: str, many: bool = False) -> Any:
    return field(metadata={"key": key, "table": True, "many": many})


@dataclass(frozen=True)
class SmSpec:
    count: int = fig("count", kind=int, plausible=(1, 10_000),
                     doc="streaming multiprocessors per GPU")
    clock_Hz: float = fig("clock_MHz", 1e6, doc="boost clock")
    registers_per_sm: int = fig("registers_per_sm", kind=int, plausible=(1024, 1 << 24),
                                 doc="32-bit registers")
    shared_memory_B: float = fig("shared_memory_per_sm_KiB", 1024.0, doc="max shared memory per SM")


@dataclass(frozen=True)
class TensorSpec:
    flops_fp32: float = fig("tflops_fp32", 1e12, doc="plain FP32 (non-tensor)")
    flops_tf32: float = fig("tflops_tf32", 1e12, lo_open=False, doc="dense; 0 = none")
    flops_bf16: float = fig("tflops_bf16", 1e12, lo_open=False, doc="dense; 0 = none")
    flops_fp16: float = fig("tflops_fp16", 1e12, lo_open=False, doc="dense; 0 = none")
    flops_fp8: float = fig("tflops_fp8", 1e12, lo_open=False, doc="dense; 0 = none")
    flops_fp4: float = fig("tflops_fp4", 1e12, lo_open=False, doc="dense; 0 = none")
    gemm_efficiency: float = fig("gemm_efficiency", hi=1.0, doc="library GEMM / peak, large shapes")
    gemm_k_overhead: float = fig("gemm_k_overhead", lo_open=False, plausible=(0.0, 1e6),
                                 doc="fixed work per GEMM tile (prologue, epilogue) in K-steps: "
                                     "a tile costs K + this")
    attention_efficiency: float = fig("attention_efficiency", hi=1.0,
                                      doc="fused attention / peak, long sequences")
    attention_causal_overhead: float = fig("attention_causal_overhead", lo_open=False,
                                           plausible=(0.0, 1e7),
                                           doc="extra key positions of fixed work per tile "
                                               "when causal (diagonal tiles, uneven rows)")
    sustained_fraction: float = fig("sustained_fraction", hi=1.0,
                                    doc="tensor rate a long kernel keeps once the power limit "
                                        "lowers the clock, / its short-run rate")
    sustained_after_s: float = fig("sustained_after_us", 1e-6,
                                   doc="tensor-kernel duration after which the power limit "
                                       "starts to lower the clock")
    sustained_sm_exponent: float = fig("sustained_sm_exponent", lo_open=False,
                                       plausible=(0.0, 10.0),
                                       doc="how the power-limited clock rises when fewer SMs "
                                           "compute: with n of the N SMs busy a long kernel "
                                           "keeps min(1, sustained_fraction x (N / n) ** this); "
                                           "0 = independent of n")
    epilogue_overlap: float = fig("epilogue_overlap", hi=1.0,
                                  doc="fraction of its own rate a GEMM epilogue's bulk stores "
                                      "into memory keep while the SMs' main loops run (the "
                                      "main loops' operand traffic holds the rest of the "
                                      "memory path); 1 = no contention")

    def flops(self, dtype: str) -> float:
        return float(getattr(self, "flops_" + dtype, 0.0))


@dataclass(frozen=True)
class L2Spec:
    capacity_B: float = fig("capacity_MiB", 1024.0**2)
    bandwidth_Bps: float = fig("bandwidth_GBps", 1e9, doc="aggregate read+write")
    latency_s: float = fig("latency_ns", 1e-9)


@dataclass(frozen=True)
class HbmSpec:
    capacity_B: float = fig("capacity_GB", 1e9)
    bandwidth_Bps: float = fig("bandwidth_GBps", 1e9, doc="peak, read+write")
    efficiency: float = fig("efficiency", hi=1.0, doc="achievable fraction of peak")
    latency_s: float = fig("latency_ns", 1e-9)
    reduce_efficiency: float = fig("reduce_efficiency", hi=1.0,
                                   doc="achievable fraction of peak for read-modify-write "
                                       "traffic (reductions into memory)")
    tile_reduce_efficiency: float = fig("tile_reduce_efficiency", hi=1.0,
                                        doc="the same for read-modify-writes issued as tensor "
                                            "tiles (a GEMM epilogue's TMA store-adds: 128-byte "
                                            "rows of a 2-D box, one output row apart)")

    @property
    def effective_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency


@dataclass(frozen=True)
class TransferSpec:
    """The SMs' own transfer primitives inside one GPU, measured by sm_copy, tma_copy and
    tma_reduce. What the generated kernels' routines add on top (per move, per source, per
    message, ...) is not the machine's: it is the kernel profile's (hwmodels.profile,
    ``GpuSpec.kernel``)."""
    tma: bool = flag("tma", doc="Tensor Memory Accelerator (bulk async copies) present")
    ldst_local_Bps_per_sm: float = fig("ldst_local_per_sm_GBps", 1e9,
                                       doc="payload one SM copies inside its GPU with 16-B ld/st")
    tma_local_Bps_per_sm: float = fig("tma_local_per_sm_GBps", 1e9, lo_open=False)
    tma_message_half_B: float = fig("tma_message_half_bytes",
                                    doc="message size at which a TMA copy inside the GPU "
                                        "reaches half its rate")
    tma_reduce_Bps_per_sm: float = fig("tma_reduce_per_sm_GBps", 1e9, lo_open=False,
                                       doc="payload one SM reduces into its GPU's memory with "
                                           "bulk reducing stores; 0 = no TMA")
    tma_reduce_issue_s: float = fig("tma_reduce_issue_ns", 1e-9, lo_open=False,
                                    doc="least time one SM spends per bulk reducing store")
    # A generated kernel's start (hwmodels.sm.grid_start_s), launch costs of the GPU measured
    # with the kernels' moves (block_moves and launch_latency behind a write).
    move_start_s: float = fig("move_start_ns", 1e-9, lo_open=False,
                              doc="what a kernel that moves data adds to its start, beyond an "
                                  "empty kernel's, before its first read (hwmodels.sm."
                                  "grid_start_s)")
    thread_start_s: float = fig("thread_start_ps", 1e-12, lo_open=False,
                                doc="what each thread of the blocks beyond one per SM adds "
                                    "to a kernel launched alone (hwmodels.sm.grid_start_s)")
    issue_knee: float = fig("issue_knee", plausible=(0.1, 100.0),
                            doc="sharpness of the bend where the SMs' combined issue rate meets "
                                "the memory's: soft-min exponent (large = hard min)")


@dataclass(frozen=True)
class RemoteTransferSpec:
    """Transfers between two GPUs over NVLink, per mechanism (docs/design/hardware.md, "Which
    parameter governs which path"): a move whose source or destination is another GPU
    takes its per-SM rates and message-size behaviour from here, never from
    ``gpu.transfer`` (fitted on one GPU, where a "peer" is the same HBM). Figures of the
    mechanism study (ParallelKittens sec. 3.1.2, Table 1, Figs. 2-3), or estimates."""
    tma_write_Bps_per_sm: float = fig("tma_write_per_sm_GBps", 1e9, lo_open=False,
                                      doc="payload one SM stores to a peer with TMA bulk "
                                          "stores; 0 = no TMA")
    tma_read_Bps_per_sm: float = fig("tma_read_per_sm_GBps", 1e9, lo_open=False,
                                     doc="payload one SM loads from a peer with TMA bulk "
                                         "loads; 0 = no TMA")
    tma_reduce_Bps_per_sm: float = fig("tma_reduce_per_sm_GBps", 1e9, lo_open=False,
                                       doc="payload one SM store-adds into a peer with TMA "
                                           "bulk reducing stores; 0 = no TMA")
    tma_message_half_B: float = fig("tma_message_half_bytes",
                                    doc="message size at which one SM's TMA transfer to a "
                                        "peer reaches half its rate (latency x per-SM rate)")
    ldst_write_Bps_per_sm: float = fig("ldst_write_per_sm_GBps", 1e9,
                                       doc="payload one SM stores to a peer with 16-B "
                                           "register stores")
    ldst_read_Bps_per_sm: float = fig("ldst_read_per_sm_GBps", 1e9,
                                      doc="payload one SM loads from a peer with 16-B "
                                          "register loads")
    multimem_Bps_per_sm: float = fig("multimem_per_sm_GBps", 1e9, lo_open=False,
                                     doc="payload one SM moves with multimem.ld_reduce / "
                                         "multimem.st through a multicast address; 0 = none")
    copy_engine_setup_s: float = fig("copy_engine_setup_us", 1e-6, lo_open=False,
                                     doc="what a copy-engine transfer to a peer waits before "
                                         "its bytes flow (its message-size behaviour)")

    def per_sm_Bps(self, mechanism: str, direction: str = "write") -> float:
        """One SM's payload rate to or from a peer: ``direction`` "read", "write" or
        "reduce" (a store-add into the peer; register sums reduce in the SM and write)."""
        if mechanism == "tma":
            return {"read": self.tma_read_Bps_per_sm, "write": self.tma_write_Bps_per_sm,
                    "reduce": self.tma_reduce_Bps_per_sm}[direction]
        if mechanism == "multimem":
            return self.multimem_Bps_per_sm
        return self.ldst_read_Bps_per_sm if direction == "read" else self.ldst_write_Bps_per_sm


@dataclass(frozen=True)
class CopyEngineSpec:
    count: int = fig("count", kind=int, plausible=(1, 1024))
    bandwidth_Bps: float = fig("bandwidth_GBps", 1e9, doc="payload of one engine, local copy")
    setup_s: float = fig("setup_latency_us", 1e-6, lo_open=False, doc="per transfer")
    command_s: float = fig("command_us", 1e-6, lo_open=False,
                           doc="GPU time each queued copy holds the GPU's copy commands: "
                               "small copies on any streams run one after another")
    stream_start_s: float = fig("stream_start_us", 1e-6, lo_open=False,
                                doc="what the first copy on each further stream of one GPU "
                                    "holds the copy commands beyond command_us")


@dataclass(frozen=True)
class NvlinkSpec:
    generation: int = fig("generation", kind=int, lo_open=False, plausible=(1, 100))
    links: int = fig("links", kind=int, lo_open=False, plausible=(1, 10_000))
    link_bandwidth_Bps: float = fig("link_bandwidth_GBps", 1e9, lo_open=False,
                                    doc="per link, per direction")
    latency_s: float = fig("latency_ns", 1e-9, lo_open=False, doc="one hop GPU -> switch -> GPU")
    efficiency_copy_engine: float = fig("efficiency_copy_engine", hi=1.0)
    efficiency_tma: float = fig("efficiency_tma", hi=1.0)
    efficiency_register: float = fig("efficiency_register", hi=1.0)
    efficiency_multimem: float = fig("efficiency_multimem", hi=1.0,
                                     doc="payload share of the wire for multimem (NVLS) "
                                         "reductions and multicasts through the switch")

    @property
    def bandwidth_Bps(self) -> float:
        """Per direction, all links."""
        return self.links * self.link_bandwidth_Bps

    def efficiency(self, mechanism: str) -> float:
        return {"copy-engine": self.efficiency_copy_engine, "tma": self.efficiency_tma,
                "register": self.efficiency_register, "multimem": self.efficiency_multimem,
                }[mechanism]


@dataclass(frozen=True)
class PcieSpec:
    generation: int = fig("generation", kind=int, plausible=(1, 100))
    bandwidth_Bps: float = fig("bandwidth_GBps", 1e9, doc="per direction")


@dataclass(frozen=True)
class SyncSpec:
    kernel_launch_s: float = fig("kernel_launch_us", 1e-6)
    stream_chain_s: float = fig("stream_chain_us", 1e-6, lo_open=False,
                                doc="GPU time a copy or kernel adds behind the previous "
                                    "operation of its stream (it starts once that one has "
                                    "finished), besides its own command or launch")
    event_wait_s: float = fig("event_wait_us", 1e-6, lo_open=False,
                              doc="GPU time one stream's wait on an event another stream "
                                  "recorded holds the GPU's command front-end; the waits of "
                                  "all of one GPU's streams pass it one after another")
    grid_sync_s: float = fig("grid_sync_us", 1e-6)
    flag_latency_s: float = fig("flag_latency_ns", 1e-9, doc="signal seen by another SM")
    flag_latency_sys_s: float = fig("flag_latency_sys_ns", 1e-9,
                                    doc="the same with .sys scope (what a flag across GPUs needs)")
    release_s: float = fig("release_ns", 1e-9, lo_open=False,
                           doc="what a block's hand-off to the next phase costs beyond its "
                               "writes' drain and a system-scope flag: the barrier of its "
                               "threads, the release waiting for their writes, the waiter's "
                               "acquire (hwmodels.sm.handoff_s; validation/microbench/"
                               "signal_chain.cu)")
    stream_launch_s: float = fig("stream_launch_us", 1e-6,
                                 doc="GPU time a kernel launched on a stream costs beyond its "
                                     "transfers, back to back (kernel_launch_us is in a graph)")
    copy_api_s: float = fig("copy_api_us", 1e-6,
                            doc="host time of one cudaMemcpyAsync call (device to device)")
    event_api_s: float = fig("event_api_us", 1e-6,
                             doc="host time of one event record + wait on another stream")
    launch_api_s: float = fig("launch_api_us", 1e-6,
                              doc="host time of one launch call: back-to-back small operations "
                                  "on a stream cannot go faster")
    host_sync_s: float = fig("host_sync_us", 1e-6,
                             doc="host time from the end of the GPU's work to the return of a "
                                 "synchronising call")


@dataclass(frozen=True)
class GpuSpec:
    model: str = text("model")
    architecture: str = text("architecture", ARCHITECTURES)
    sm_arch: str = text("sm_arch", doc="nvcc target for generated kernels, '' if none")
    dies_per_gpu: int = fig("dies_per_gpu", kind=int, plausible=(1, 64))
    sm: SmSpec = table("sm")
    tensor: TensorSpec = table("tensor")
    l2: L2Spec = table("l2")
    hbm: HbmSpec = table("hbm")
    transfer: TransferSpec = table("transfer")
    transfer_remote: RemoteTransferSpec = table("transfer_remote")
    copy_engine: CopyEngineSpec = table("copy_engine")
    nvlink: NvlinkSpec = table("nvlink")
    pcie: PcieSpec = table("pcie")
    sync: SyncSpec = table("sync")
    # our kernels' own routines on this GPU: the system's kernel profile converted with this
    # GPU's clock (hwmodels.profile; set by hwmodels.catalog, never a table of a system file)
    kernel: "KernelSpec" = field(default=None, metadata={"key": "kernel", "derived": True})


@dataclass(frozen=True)
class SwitchTierSpec:
    name: str = text("name")
    gpus_per_group: int = fig("gpus_per_group", kind=int, plausible=(1, 1 << 16),
                              doc="GPUs under one group of this tier's switches")
    chips_per_group: int = fig("chips_per_group", kind=int, plausible=(1, 1 << 16))
    ports_per_chip: int = fig("ports_per_chip", kind=int, plausible=(1, 1 << 16))
    port_bandwidth_Bps: float = fig("port_bandwidth_GBps", 1e9, doc="per direction")
    latency_s: float = fig("latency_ns", 1e-9, lo_open=False, doc="added per traversal")
    uplink_bandwidth_Bps: float = fig("uplink_bandwidth_GBps", 1e9, lo_open=False,
                                      doc="per group, per direction, to the next tier; 0 at the top")
    in_switch_reduction: bool = flag("in_switch_reduction")
    multicast: bool = flag("multicast")
    reduction_efficiency: float = fig("reduction_efficiency", hi=1.0,
                                      doc="in-switch reduction throughput / port rate")


@dataclass(frozen=True)
class DomainSpec:
    gpus_per_domain: int = fig("gpus_per_domain", kind=int, plausible=(1, 1 << 16),
                               doc="CUDA devices (ranks)")
    fabric: str = text("fabric", FABRICS)
    switch_tiers: tuple[SwitchTierSpec, ...] = table("switch_tier", many=True)


@dataclass(frozen=True)
class ScaleoutSpec:
    nic_bandwidth_Bps: float = fig("nic_bandwidth_Gbps", 1e9 / 8, lo_open=False, doc="per GPU")
    latency_s: float = fig("latency_ns", 1e-9, lo_open=False)
    efficiency: float = fig("efficiency", hi=1.0)


@dataclass(frozen=True)
class Provenance:
    source: str
    tag: str


@dataclass(frozen=True)
class System:
    name: str
    description: str
    path: str
    inherits: str | None
    gpu: GpuSpec
    domain: DomainSpec
    scaleout: ScaleoutSpec
    provenance: Mapping[str, Provenance] = field(default_factory=lambda: MappingProxyType({}))
    calibrated: Mapping[str, Any] | None = None      # device, date, driver of a calibrated file
    calibration: Mapping[str, Any] | None = None     # its [calibration] table: fit residuals
    profile: Any = None          # hwmodels.profile.ProfileUse: the kernel profile it uses, why

    def assumed_keys(self, prefixes: tuple[str, ...] = ("",)) -> list[str]:
        """Dotted keys under any of ``prefixes`` whose figure is a guess (roadmap,
        estimate, assumed); a figure the user set (``--set``, ``--vary``) is not one."""
        return sorted(key for key, prov in self.provenance.items()
                      if prov.tag in GUESS_TAGS and key.startswith(prefixes))

    def overridden_keys(self) -> list[str]:
        """Dotted keys the user set (``--set``, ``--vary``): provenance ``override``."""
        return sorted(key for key, prov in self.provenance.items() if prov.tag == "override")

    def figure_source(self, key: str) -> Provenance:
        return self.provenance[key]
