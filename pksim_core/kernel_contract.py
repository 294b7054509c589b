"""The generated kernels' contract: what our CUDA kernels (kernels/collectives, kernels/fused)
are, written once for the model (pksim), the code generator (codegen) and validation.

Structural constants of the kernels, not fitted figures. Where CUDA has the same number
(kernels/collectives/abi.h PKC_MAX_RANKS, kernels/fused/abi.h PKF_MAX_RANKS, the GEMM's
config::THREADS, the fused copy stages), tests/pksim_core/test_kernel_contract.py parses the
headers and checks them against these.
"""
from __future__ import annotations

from hwmodels.system import ARCHITECTURES
from pksim_core import algorithms
from pksim_core.cache import topology

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
# Which kernel sums every rank's buffer in one move (sources = world; every other sum takes 2:
# ring, rhd) and which needs a power-of-two world: its row (pksim_core.algorithms world_sum,
# power_of_two).
# Threads per block of the generated collectives, by mechanism (codegen/plan.py emits them):
# TMA: one issuing thread, the rest add (reductions); registers: 512 x 4 x 16 B = 32 KiB of
# loads in flight per block.
BLOCK_THREADS = {"tma": 256, "register": 512}
# The generated kernels' TMA stage: a copy's chunk, or all sources of a reduction's chunk.
TMA_STAGE_BYTES = 32 * 1024
TMA_STAGES = 4
# A rank's blocks cut an SM move into pieces of whole 128-byte lines, of whole 4 KiB once a
# piece holds 64 KiB (collective.cuh block_piece; validation/experiments/piece_align.cu at
# commit 7cc519e measured why: docs/decisions/D23.md).
LINE_BYTES, PIECE_BYTES, PAGED_PIECE_BYTES = 128, 4096, 64 * 1024
# collective.cuh ce_reduce: a copy-engine schedule's reduction kernel gets a block per
# 512 threads (kCeReduceThreads) x 4 vectors of 16 B of its sum, at most the schedule's
# blocks per rank.
CE_REDUCE_THREADS = 512
CE_REDUCE_BLOCK_BYTES = CE_REDUCE_THREADS * 4 * 16
# collectives/in_network.cuh streams a rank's range in chunks: each of its blocks takes a
# piece of the chunk, 256 threads x 4 vectors of 16 B = 16 KiB a block by default, so that
# chunk i + 1's multimem.ld_reduce is in flight while chunk i's multimem.st drains. The
# schedule's chunk_bytes is the whole rank's chunk (0: blocks x this; pksim_core.collective_model and
# codegen.plan fill it in, so that the schedule names the chunk the kernel runs).
IN_NETWORK_BLOCK_CHUNK_BYTES = 256 * 4 * 16
IN_NETWORK_STREAMED_OPS = tuple(op for op, _ in algorithms.keys(streamed=True))
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
# epilogue.cuh) ------------------------------------------------------------------------------------
# Schedule.extra keys they read: "reduce_op" and "epilogue" (a reducing kernel's op and fused
# element-wise epilogue: config::reduce_op = pkc::op_<op>, config::epilogue = pkc::ep_<epilogue>;
# absent: sum, none), "splits" (the -v forms' split sizes, elements: pksim_core.workloads.varsize_ops),
# "peers" (send-recv's pairs).
REDUCE_OPS = ("sum", "avg", "min", "max")
EPILOGUES = ("none", "scale", "bias", "scale-bias")
# The plain register sum keeps two 16-byte vectors of each source in flight per thread up to this
# many sources, one beyond (collective.cuh reg_reduce); the epilogue routines keep one
# (epilogue.cuh reg_reduce_ep): what a reduce op costs a register sum (pksim_core.move_cuts).
REG_TWO_VECTOR_SOURCES = 4
# (op, algorithm) of the kernels that reduce and so take a reduce op and an epilogue.
EPILOGUE_KERNELS = algorithms.keys(reduces=True)
# Ops whose sizes come from split sizes (pkc_args::splits) rather than one count.
SPLIT_OPS = ("all-to-all-v", "all-gather-v", "reduce-scatter-v", "send-recv")


def epilogue_cost(extra) -> str:
    """What a reducing kernel's moves pay beyond the plain sum (pksim_core.mechanisms.epilogue_time_per_B):
    "" for the plain sum (collective.cuh's routines), "op" for the epilogue routines with a
    reduce op or a scale, "bias" with a bias vector too (docs/decisions/D56.md)."""
    if plain_extra(extra):
        return ""
    return "bias" if "bias" in epilogue_of(extra) else "op"


def reduce_op_of(extra) -> str:
    """A schedule's reduce op (Schedule.extra "reduce_op"; sum when absent)."""
    return dict(extra).get("reduce_op", "sum")


def epilogue_of(extra) -> str:
    """A schedule's fused epilogue (Schedule.extra "epilogue"; none when absent)."""
    return dict(extra).get("epilogue", "none")


def plain_extra(extra) -> bool:
    """Whether a schedule's extra asks for the plain sum (no reduce op, no epilogue)."""
    return reduce_op_of(extra) == "sum" and epilogue_of(extra) == "none"

# ---- generated fused kernels (kernels/fused) -----------------------------------------------
FUSED_MAX_RANKS = 576              # PKF_MAX_RANKS in kernels/fused/abi.h (one NVLink domain)
FUSED_THREADS = 384                # pk::gemm::config::THREADS: producer + two consumer warpgroups
FUSED_COPY_STAGES = 4              # kernels/fused/comm.cuh copy_stages::kStages
FUSED_COPY_STAGE_BYTES = 32 * 1024  # kernels/fused/comm.cuh copy_stages::kStageBytes
# (op, overlap, algorithm) -> (C++ op template in kernels/fused/ops.cuh, mechanisms it
# implements)
FUSED_KERNELS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {
    ("gemm-rs", "intra-sm", "direct"): ("gemm_rs_intra", ("tma",)),
    ("gemm-rs", "inter-sm", "direct"): ("gemm_rs_inter", ("tma", "register")),
    ("ag-gemm", "inter-sm", "direct"): ("ag_gemm_inter", ("tma", "register")),
    ("ag-gemm", "intra-sm", "direct"): ("ag_gemm_intra", ("tma",)),
    ("gemm-ar", "intra-sm", "direct"): ("gemm_ar_intra", ("tma",)),
    ("gemm-ar", "inter-sm", "two-shot"): ("gemm_ar_inter", ("tma", "register")),
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


# ---- what codegen can emit -------------------------------------------------------------------
# The generated collectives and their mechanisms: pksim_core.algorithms (a row's mechanisms).
# Hierarchical schedules over several NVLink domains: the NVLink part is a generated ring over
# each domain's ranks, the scale-out part NCCL's collective among the ranks of one local index
# across domains (named in the manifest, never emitted: codegen/manifest.py scale_out):
# op -> (NVLink kernel op, scale-out op): the hierarchical rows' (pksim_core.algorithms scale_out).
HIERARCHICAL_PARTS = {r.op: (r.op, r.scale_out) for r in algorithms.ROWS if r.scale_out}
# nvcc targets on which every pk primitive exists (TMA bulk copies, mbarriers, multimem), oldest
# first. A system later than Blackwell with no public target gets the newest of them that nvcc
# offers (codegen.build.newest_target; the manifest names it). The fused kernels' GEMM uses
# Hopper's wgmma and setmaxnreg: sm_90a only.
TARGETS = ("sm_90a", "sm_100a", "sm_103a")
FUSED_TARGET = "sm_90a"
# Architectures in order (hwmodels.system.ARCHITECTURES); past Blackwell: the newest target.
LATER_THAN = "blackwell"
# (BM, BN, BK) -> (pipeline stages, epilogue buffers): the fused GEMM configs that fit 227 KiB
FUSED_TILES: dict[tuple[int, int, int], tuple[int, int]] = {
    (128, 256, 64): (4, 2), (128, 128, 64): (6, 2), (256, 128, 64): (4, 1)}


def target_for(system) -> str | None:
    """The nvcc target of ``system``'s generated collectives: its sm_arch when the primitives
    exist there; None for a system later than Blackwell without one (codegen takes the newest
    target nvcc offers); InfeasibleError-worthy otherwise (emit_reason says why)."""
    arch = system.gpu.sm_arch
    if arch in TARGETS:
        return arch
    later = (system.gpu.architecture in ARCHITECTURES and
             ARCHITECTURES.index(system.gpu.architecture) > ARCHITECTURES.index(LATER_THAN))
    if not arch and later:
        return None
    return ""


def _target_reason(system) -> str | None:
    if target_for(system) != "":
        return None
    arch = system.gpu.sm_arch
    if not arch:
        return (f"{system.name}: no nvcc target is known for {system.gpu.model} "
                f"({system.gpu.architecture}); generated kernels need one of {', '.join(TARGETS)}")
    return (f"{system.name}: the pk primitives (TMA bulk copies, mbarriers, system-scope "
            f"release/acquire) need {', '.join(TARGETS)}; {system.gpu.model} is {arch}")


def emit_reason(system, schedule) -> str | None:
    """Why ``pksim codegen`` cannot emit ``schedule`` on ``system`` (None: it can). The one
    place that says so: codegen's planners refuse with this reason, and the search, what-if
    rows and --json mark such schedules ``emittable: false``."""
    s = schedule
    if s.impl != "pk":
        return f"NCCL's own schedule ({s.impl}); pksim codegen emits pk kernels"
    if any(k == "bytes" for k, _ in s.shape):
        return _collective_reason(system, s)
    return _fused_reason(system, s)


def _collective_reason(system, s) -> str | None:
    if s.dtype not in ("bf16", "fp32"):
        return f"generated kernels handle bf16 and fp32, not {s.dtype}"
    if s.overlap != "none":
        return f"overlap {s.overlap!r} needs a fused kernel; codegen emits collectives only"
    world = s.world // max(1, s.domains)
    if s.domains > 1:
        if s.algorithm != "hierarchical" or s.op not in HIERARCHICAL_PARTS:
            return (f"a flat {s.algorithm} {s.op} across {s.domains} domains moves data over the "
                    f"scale-out network, which generated kernels leave to NCCL; the hierarchical "
                    f"schedule splits into an NVLink part (generated) and NCCL across domains")
        part = s.with_(op=HIERARCHICAL_PARTS[s.op][0], algorithm="ring", world=world, domains=1,
                       chunk_bytes=0, pipeline_depth=1)
        why = _collective_reason(system, part)
        return None if why is None else f"its NVLink part ({part.label()}): {why}"
    row = algorithms.find(s.op, s.algorithm)
    mechs = row.mechanisms if row else ()
    if not mechs:
        have = ", ".join(r.algorithm for r in algorithms.of_op(s.op) if r.mechanisms) or "none"
        return f"codegen has no {s.algorithm} {s.op} kernel (implemented for {s.op}: {have})"
    if s.mechanism not in mechs:
        return f"{s.algorithm} {s.op} runs on {', '.join(mechs)}, not {s.mechanism}"
    why = epilogue_reason(s)
    if why:
        return why
    why = _target_reason(system)
    if why:
        return why
    if s.mechanism == "tma" and not system.gpu.transfer.tma:
        return f"{system.name}: {system.gpu.model} has no TMA"
    why = world_reason(s.op, s.algorithm, s.mechanism, world)
    if why:
        return why
    streamed = row.streamed
    if s.chunk_bytes and not streamed:
        return ("pipelined chunks (chunk_bytes > 0) are implemented by the streamed in-network "
                "kernels only")
    if dict(s.extra).get("multimem") == "emulated" and not streamed:
        return (f"the multimem emulation exists for the in-network "
                f"{', '.join(IN_NETWORK_STREAMED_OPS)} only")
    if s.mechanism == "tma" and TMA_STAGES * TMA_STAGE_BYTES + 128 > system.gpu.sm.shared_memory_B:
        return f"{system.name}: {TMA_STAGES} x {TMA_STAGE_BYTES} B TMA stages exceed the SM's shared memory"
    return None


def epilogue_reason(s) -> str | None:
    """Why a schedule's reduce op or epilogue (Schedule.extra) has no kernel (None: it has,
    or it asks for neither)."""
    reduce_op, epilogue = reduce_op_of(s.extra), epilogue_of(s.extra)
    if reduce_op not in REDUCE_OPS or epilogue not in EPILOGUES:
        return (f"reduce op {reduce_op!r} / epilogue {epilogue!r}: the kernels take "
                f"{', '.join(REDUCE_OPS)} / {', '.join(EPILOGUES)}")
    if plain_extra(s.extra):
        return None
    if (s.op, s.algorithm) not in EPILOGUE_KERNELS:
        return (f"a reduce op or an epilogue needs a reducing kernel "
                f"({', '.join(f'{o} {a}' for o, a in EPILOGUE_KERNELS)}), not {s.algorithm} {s.op}")
    if s.mechanism == "copy-engine":
        return f"a copy engine cannot apply a reduce op or an epilogue: {s.algorithm} {s.op} runs on tma, register"
    return None


def world_reason(op: str, algorithm: str, mechanism: str, world: int) -> str | None:
    """Why a generated collective kernel cannot run at ``world`` ranks of one domain (None:
    it can); the same checks as the kernels' hosts (collectives/entry.cuh check_world)."""
    row = algorithms.find(op, algorithm)
    if not 2 <= world <= MAX_RANKS:
        return f"generated kernels address 2..{MAX_RANKS} ranks, not {world}"
    if row and row.power_of_two and world & (world - 1):
        return f"recursive halving / doubling needs a power-of-two world, not {world}"
    if (row and row.world_sum and mechanism in ("tma", "copy-engine")
            and world > TMA_MAX_SOURCES):
        what = "a TMA sum" if mechanism == "tma" else "a copy-engine reduction kernel"
        return (f"{what} takes at most {TMA_MAX_SOURCES} sources; the {algorithm} {op} "
                f"sums all {world} ranks' buffers (registers do)")
    return None


def _fused_reason(system, s) -> str | None:
    if s.op not in FUSED_CODEGEN_OPS:
        return f"codegen's fused kernels cover {', '.join(FUSED_CODEGEN_OPS)}, not {s.op}"
    if s.overlap == "none":
        return ("overlap none is a library GEMM and then the collective (two launches); codegen "
                "emits fused kernels")
    if system.gpu.sm_arch != FUSED_TARGET:
        return (f"{system.name}: no {system.gpu.sm_arch or system.gpu.architecture} fused kernel: "
                f"the fused kernels' GEMM uses Hopper's wgmma and setmaxnreg ({FUSED_TARGET})")
    entry = FUSED_KERNELS.get((s.op, s.overlap, s.algorithm))
    if entry is None:
        have = ", ".join(f"{ov}/{alg}" for (op, ov, alg) in FUSED_KERNELS if op == s.op)
        return f"codegen has no {s.overlap} {s.algorithm} {s.op} kernel (implemented for {s.op}: {have})"
    if s.mechanism not in entry[1]:
        return f"{s.overlap} {s.algorithm} {s.op} moves data with {', '.join(entry[1])}, not {s.mechanism}"
    if s.domains != 1:
        return "fused kernels run inside one NVLink domain (domains = 1)"
    if not 2 <= s.world <= FUSED_MAX_RANKS:
        return f"fused kernels address 2..{FUSED_MAX_RANKS} ranks, not {s.world}"
    if s.dtype != "bf16":
        return f"the Hopper GEMM is bf16 in, bf16 out; not {s.dtype}"
    if s.chunk_bytes:
        return ("fused kernels pipeline by tiles; pipelined chunks (chunk_bytes > 0) are not "
                "implemented")
    if tuple(s.tile) not in FUSED_TILES:
        return (f"no GEMM config for tile {tuple(s.tile)}; available: "
                f"{', '.join(str(t) for t in FUSED_TILES)}")
    sms = topology(system, s.world, 1).sms_per_rank()
    if s.overlap == "inter-sm" and s.comm_sms >= sms:
        return (f"{s.comm_sms} communication SMs per rank leave no GEMM SM ({sms} SMs per rank "
                f"on {system.name} at world {s.world})")
    return None


def emittable_fields(system, schedule) -> dict:
    """What a search row, a what-if row and --json say about emitting ``schedule``:
    ``emittable`` and, when it is not, ``not_emittable`` (the reason)."""
    why = emit_reason(system, schedule)
    return {"emittable": why is None, "not_emittable": why}
