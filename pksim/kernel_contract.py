"""The generated kernels' contract: what our CUDA kernels (kernels/collectives, kernels/fused)
are, written once for the model (pksim), the code generator (codegen) and validation.

Structural constants of the kernels, not fitted figures. Where CUDA has the same number
(kernels/collectives/abi.h PKC_MAX_RANKS, kernels/fused/abi.h PKF_MAX_RANKS, the GEMM's
config::THREADS, the fused copy stages), tests/pksim/test_kernel_contract.py parses the
headers and checks them against these.
"""
from __future__ import annotations

# ---- generated collectives (kernels/collectives) -------------------------------------------
# World sizes are run-time arguments of every generated kernel, up to one NVLink domain: the
# largest the catalogue models (gb200-nvl576). Ranks of further domains are reached over the
# scale-out network, which the kernels leave to NCCL (codegen/manifest.py scale_out).
MAX_RANKS = 576                    # PKC_MAX_RANKS in kernels/collectives/abi.h
# Up to this world a kernel's per-rank pointers sit in its parameter; beyond, in the caller's
# device peer table (abi.h): a uniform parameter load against a load from memory.
INLINE_RANKS = 8                   # PKC_INLINE_RANKS
# Buffers a move holds in registers at once (compile-time slots); a move over more of them
# (a direct sum or fan-out past 8 ranks) takes them in batches of this many.
SET_SLOTS = 8                      # PKC_SET_SLOTS
# A TMA sum stages every source's chunk in one 32 KiB stage: at most this many sources; so do
# the copy-engine schedules' reduction kernels (their pointer sets). More: registers only.
TMA_MAX_SOURCES = 8                # PKC_TMA_MAX_SOURCES
# Flags per rank: [0, BARRIER_FLAGS) the dissemination barrier (2 + ceil(log2 world) used),
# then the point-to-point counters (ring: one per block; rhd: one per phase).
BARRIER_FLAGS = 32                 # PKC_BARRIER_FLAGS
TABLE_HEADER_BYTES = 16            # PKC_TABLE_HEADER_BYTES
# (op, algorithm) whose one move sums every rank's buffer (sources = world): the direct
# reduce-scatter, the one-shot and two-shot all-reduce; every other sum takes 2 (ring, rhd).
WORLD_SUMS = (("reduce-scatter", "direct"), ("all-reduce", "direct"), ("all-reduce", "two-shot"),
              ("reduce", "direct"), ("reduce", "two-shot"), ("reduce-scatter-v", "direct"))
# Algorithms that need a power-of-two world (recursive halving / doubling).
POWER_OF_TWO_ALGORITHMS = ("rhd",)
# Threads per block of the generated collectives, by mechanism (codegen/plan.py emits them):
# TMA: one issuing thread, the rest add (reductions); registers: 512 x 4 x 16 B = 32 KiB of
# loads in flight per block.
BLOCK_THREADS = {"tma": 256, "register": 512}
# The generated kernels' TMA stage: a copy's chunk, or all sources of a reduction's chunk.
TMA_STAGE_BYTES = 32 * 1024
TMA_STAGES = 4
# A rank's blocks cut an SM move into pieces of whole 128-byte lines, of whole 4 KiB once a
# piece holds 64 KiB (collective.cuh block_piece; validation/experiments/piece_align.cu at
# commit 7cc519e measured why: docs/decisions.md D23).
LINE_BYTES, PIECE_BYTES, PAGED_PIECE_BYTES = 128, 4096, 64 * 1024
# collective.cuh ce_reduce: a copy-engine schedule's reduction kernel gets a block per
# 512 threads (kCeReduceThreads) x 4 vectors of 16 B of its sum, at most the schedule's
# blocks per rank.
CE_REDUCE_THREADS = 512
CE_REDUCE_BLOCK_BYTES = CE_REDUCE_THREADS * 4 * 16
# collectives/in_network.cuh streams a rank's range in chunks: each of its blocks takes a
# piece of the chunk, 256 threads x 4 vectors of 16 B = 16 KiB a block by default, so that
# chunk i + 1's multimem.ld_reduce is in flight while chunk i's multimem.st drains. The
# schedule's chunk_bytes is the whole rank's chunk (0: blocks x this; pksim.collective and
# codegen.plan fill it in, so that the schedule names the chunk the kernel runs).
IN_NETWORK_BLOCK_CHUNK_BYTES = 256 * 4 * 16
IN_NETWORK_STREAMED_OPS = ("all-reduce", "reduce-scatter", "all-gather")
# Chunks a thread of the streamed kernel has in flight: chunk i + 1's loads (ld_reduce, or the
# source reads of a multicast store) are issued before chunk i's stores, so two chunks of a
# phase overlap (the model's pipeline_depth); a flow's latency is then paid once per pair,
# not once per chunk on top of the per-SM rate (which already holds a round trip).
IN_NETWORK_CHUNKS_IN_FLIGHT = 2


def in_network_chunk_bytes(comm_sms: int, chunk_bytes: int = 0) -> int:
    """A rank's chunk in the streamed in-network kernel: the schedule's, else a block's
    default chunk times its blocks (communication SMs)."""
    return chunk_bytes or max(1, comm_sms) * IN_NETWORK_BLOCK_CHUNK_BYTES

# ---- rooted, -v, send/recv and epilogue kernels (kernels/collectives/rooted.cuh, varsize.cuh,
# p2p.cuh, epilogue.cuh) -------------------------------------------------------------------------
# Schedule.extra keys they read: "reduce_op" and "epilogue" (a reducing kernel's op and fused
# element-wise epilogue: config::reduce_op = pkc::op_<op>, config::epilogue = pkc::ep_<epilogue>;
# absent: sum, none), "splits" (the -v forms' split sizes, elements: pksim.workloads.varsize),
# "peers" (send-recv's pairs).
REDUCE_OPS = ("sum", "avg", "min", "max")
EPILOGUES = ("none", "scale", "bias", "scale-bias")
# (op, algorithm) of the kernels that reduce and so take a reduce op and an epilogue.
EPILOGUE_KERNELS = (("all-reduce", "direct"), ("all-reduce", "two-shot"), ("reduce-scatter", "direct"),
                    ("reduce", "direct"), ("reduce", "two-shot"), ("reduce-scatter-v", "direct"))
# Ops whose sizes come from split sizes (pkc_args::splits) rather than one count.
SPLIT_OPS = ("all-to-all-v", "all-gather-v", "reduce-scatter-v", "send-recv")


def reduce_op_of(extra) -> str:
    """A schedule's reduce op (Schedule.extra "reduce_op"; sum when absent)."""
    return dict(extra).get("reduce_op", "sum")


def epilogue_of(extra) -> str:
    """A schedule's fused epilogue (Schedule.extra "epilogue"; none when absent)."""
    return dict(extra).get("epilogue", "none")

# ---- generated fused kernels (kernels/fused) -----------------------------------------------
FUSED_MAX_RANKS = 576              # PKF_MAX_RANKS in kernels/fused/abi.h (one NVLink domain)
FUSED_THREADS = 384                # pk::gemm::config::THREADS: producer + two consumer warpgroups
FUSED_COPY_STAGES = 4              # kernels/fused/comm.cuh copy_stages::kStages
FUSED_COPY_STAGE_BYTES = 32 * 1024  # kernels/fused/comm.cuh copy_stages::kStageBytes
# (op, overlap, algorithm) -> (C++ op template in kernels/fused/ops.cuh, mechanisms it
# implements)
FUSED_KERNELS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {
    ("gemm-rs", "intra-sm", "direct"): ("gemm_rs_intra", ("tma",)),
    ("gemm-rs", "inter-sm", "direct"): ("gemm_rs_inter", ("register",)),
    ("ag-gemm", "inter-sm", "direct"): ("ag_gemm_inter", ("tma", "register")),
    ("ag-gemm", "intra-sm", "direct"): ("ag_gemm_intra", ("tma",)),
    ("gemm-ar", "intra-sm", "direct"): ("gemm_ar_intra", ("tma",)),
    ("gemm-ar", "inter-sm", "two-shot"): ("gemm_ar_inter", ("register",)),
    ("gemm-ar", "inter-sm", "in-network"): ("gemm_ar_in_network", ("multimem",)),
}
FUSED_CODEGEN_OPS = tuple(dict.fromkeys(op for op, _, _ in FUSED_KERNELS))
# Mechanisms that run (NVLink multicast is compiled and simulated, never run here).
RUNNABLE_MECHANISMS = ("tma", "register", "copy-engine")


def implemented(op: str, overlap: str, algorithm: str, mechanism: str) -> bool:
    """Whether a generated fused kernel implements this variant."""
    entry = FUSED_KERNELS.get((op, overlap, algorithm))
    return entry is not None and mechanism in entry[1]


# (op, overlap, algorithm, mechanism) of every fused variant that codegen implements and
# that runs (validation's VARIANTS).
FUSED_VARIANTS: tuple[tuple[str, str, str, str], ...] = tuple(
    (op, overlap, algorithm, mechanism)
    for (op, overlap, algorithm), (_, mechanisms) in FUSED_KERNELS.items()
    for mechanism in mechanisms if mechanism in RUNNABLE_MECHANISMS)

# ---- the "none" baseline of each fused op ----------------------------------------------------
# The collective each op's "none" baseline runs with NCCL after (or before) the compute.
BASELINE_COLLECTIVE = {
    "gemm-rs": "reduce-scatter", "gemm-ar": "all-reduce", "ag-gemm": "all-gather",
    "ring-attention": "all-gather", "ulysses-attention": "all-to-all",
    "moe-dispatch-gemm": "all-to-all", "moe-combine": "all-to-all",
}
# NCCL cannot run virtual ranks (one GPU): there the baseline's collective is the generated
# pk collective that validation runs after the GEMMs ("none"), (algorithm, mechanism), on
# all of a rank's share of the SMs. These are the ones measured fastest on the H200
# (docs/VALIDATION.md).
VIRTUAL_COLLECTIVE = {"reduce-scatter": ("direct", "register"),
                      "all-gather": ("direct", "tma"),
                      "all-reduce": ("two-shot", "register"),
                      "all-to-all": ("direct", "register")}


def virtual_baseline(op: str) -> tuple[str, str, str]:
    """(collective, algorithm, mechanism) of fused op ``op``'s baseline on virtual ranks."""
    collective = BASELINE_COLLECTIVE[op]
    return (collective,) + VIRTUAL_COLLECTIVE[collective]


# Per fused op that codegen implements: its baseline collective (op, algorithm, mechanism)
# on virtual ranks (what validation runs for "none").
VIRTUAL_BASELINE = {op: virtual_baseline(op) for op in FUSED_CODEGEN_OPS}
