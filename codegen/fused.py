"""Codegen for the fused GEMM + communication ops (gemm-rs, ag-gemm, gemm-ar).

The same named stages as the collectives (STYLE.md 9): ``make_plan`` (Schedule -> FusedPlan,
frozen and dumpable), ``render`` (FusedPlan -> CUDA source: config, globals, kernel, host entry
point), ``emit`` (source + manifest), and the content-hash build of ``codegen.build``. The
kernel bodies live in ``kernels/fused`` (ops.cuh names them) on top of the Hopper GEMM of
``kernels/gemm``; a generated file only specialises them.

What each schedule becomes (the schedule's algorithm and mechanism name the communication):

=========  ========  ==========  =========  ===============================================
op         overlap   algorithm   mechanism  kernel (kernels/fused/ops.cuh)
=========  ========  ==========  =========  ===============================================
gemm-rs    intra-sm  direct      tma        gemm_rs_intra: epilogue TMA store-adds each
                                            sub-tile into the owner of its rows
gemm-rs    inter-sm  direct      tma, reg   gemm_rs_inter: local store + per-tile flag; the
                                            owner's comm blocks pull and sum, arrival order
                                            (TMA: tensor copies of 32-row boxes into shared
                                            memory, tensor stores of the sums; reg: 16-byte
                                            loads and stores; docs/decisions/D54.md)
gemm-ar    intra-sm  direct      tma        gemm_ar_intra: store-add into every rank
gemm-ar    inter-sm  two-shot    tma, reg   gemm_ar_inter: as gemm-rs inter-SM, the sum
                                            stored into every rank's output
gemm-ar    inter-sm  in-network  multimem   gemm_ar_in_network: compile-only (NVLink
                                            multicast is never enabled here)
ag-gemm    inter-sm  direct      tma, reg   ag_gemm_inter: comm blocks gather A bands, the
                                            GEMM producer waits for each band's flag
ag-gemm    intra-sm  direct      tma        ag_gemm_intra: the GEMM producer loads each A
                                            tile from the owning rank's shard (a tensor
                                            map per rank), own shard first, then the peers
=========  ========  ==========  =========  ===============================================

``overlap = none`` is a library GEMM followed by the collective (validation/run/fused.py runs
it from kernels/gemm and a generated collective); it raises InfeasibleError, as do systems
without the sm_90a GEMM (wgmma, setmaxnreg), dtypes other than bf16, pipelined chunks and
tiles without a GEMM config.
"""
from __future__ import annotations

import hashlib
import json
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codegen.build import BuildOptions, write_unit
from codegen.manifest import Emitted, unit_manifest
from hwmodels.errors import InfeasibleError
from hwmodels.resources import kernels_dir
from hwmodels.system import System
from hwmodels.units import format_time
from pksim_core.kernel_contract import (FUSED_CODEGEN_OPS, FUSED_KERNELS, FUSED_MAX_RANKS,
                                   FUSED_TARGET, FUSED_THREADS, FUSED_TILES, emit_reason)
from pksim_core.schedule import Schedule

OPS = FUSED_CODEGEN_OPS
KERNELS = FUSED_KERNELS
ARCH = FUSED_TARGET             # the GEMM needs wgmma and setmaxnreg
MAX_RANKS = FUSED_MAX_RANKS
TILES = FUSED_TILES             # (BM, BN, BK) -> (pipeline stages, epilogue buffers)


def sources_digest() -> str:
    """Digest of the headers a fused source includes beyond pk/ and collectives/ (which
    codegen.build hashes itself): kernels/fused and kernels/gemm. Folded into the build
    options, so a header edit never reuses a stale binary."""
    h = hashlib.sha256()
    for d in (kernels_dir() / "fused", kernels_dir() / "gemm"):
        for p in sorted(d.glob("*")):
            if p.suffix in (".cuh", ".h"):
                h.update(p.name.encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class FusedPlan:
    """What the renderer emits: one op of kernels/fused/ops.cuh specialised by constants."""
    op: str
    overlap: str
    algorithm: str
    mechanism: str
    op_template: str            # pkf::<op_template><config>
    kernel: str                 # the __global__ name, <op>_<overlap>
    entry: str                  # pk_<kernel>, the extern "C" entry point
    bm: int
    bn: int
    bk: int
    stages: int
    epi_bufs: int
    comm_blocks: int            # per rank; 0 for intra-SM
    staggered: bool
    copy_tma: bool              # the comm blocks' mechanism: TMA (else registers)
    threads: int
    arch: str
    defines: tuple[tuple[str, str], ...]
    world: int                  # the schedule's (a run-time argument of the kernel)
    shape: tuple[tuple[str, int], ...]
    schedule_key: str
    system: str

    @property
    def name(self) -> str:
        return f"{self.op}-{self.schedule_key}"

    @property
    def compile_only(self) -> bool:
        return self.mechanism == "multimem"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["defines"] = {k: v for k, v in self.defines}
        out["shape"] = {k: v for k, v in self.shape}
        out["compile_only"] = self.compile_only
        return out


def make_plan(system: System, schedule: Schedule) -> FusedPlan:
    """Schedule -> FusedPlan, or InfeasibleError naming what is missing
    (pksim_core.kernel_contract.emit_reason: the search marks the same schedules)."""
    s = schedule
    why = emit_reason(system, s)
    if why:
        raise InfeasibleError(why)
    template, _ = KERNELS[(s.op, s.overlap, s.algorithm)]
    tile = tuple(s.tile)
    comm = s.comm_sms if s.overlap == "inter-sm" else 0
    stages, epi = TILES[tile]
    kernel = f"{s.op.replace('-', '_')}_{s.overlap.replace('-', '_')}"
    if s.algorithm == "in-network":
        kernel += "_in_network"
    defines = (("PK_ENABLE_MULTIMEM", "1"),) if s.mechanism == "multimem" else ()
    return FusedPlan(op=s.op, overlap=s.overlap, algorithm=s.algorithm, mechanism=s.mechanism,
                     op_template=template, kernel=kernel, entry=f"pk_{kernel}", bm=tile[0],
                     bn=tile[1], bk=tile[2], stages=stages, epi_bufs=epi, comm_blocks=comm,
                     staggered=s.peer_order != "sequential", copy_tma=s.mechanism == "tma",
                     threads=FUSED_THREADS, arch=ARCH, defines=defines, world=s.world,
                     shape=tuple(s.shape), schedule_key=s.key(), system=system.name)


def build_options(plan: FusedPlan) -> BuildOptions:
    return BuildOptions(arch=plan.arch,
                        defines=tuple(sorted(plan.defines + (("PK_FUSED_SOURCES",
                                                               sources_digest()),))))


# ---- render --------------------------------------------------------------------------------------

_WHAT = {
    "gemm_rs_intra": "each finished 64-column sub-tile is TMA store-added (bf16) into the output "
                     "of the rank owning its rows; outputs must be zero first (zero_output)",
    "gemm_rs_inter": "GEMM blocks store tiles into their rank's partial buffer and flag them; the "
                     "owner's communication blocks sum every rank's tile in arrival order "
                     "(kCopyTma: through TMA tensor copies and stores, else registers)",
    "gemm_ar_intra": "each finished sub-tile is TMA store-added into every rank's output; outputs "
                     "must be zero first (zero_output)",
    "gemm_ar_inter": "as gemm-rs inter-SM, with the owner's sum stored into every rank's output "
                     "(two-shot in one pass)",
    "gemm_ar_in_network": "as gemm-ar inter-SM, summed by multimem.ld_reduce and stored by "
                          "multimem.st through multicast addresses (compile-only)",
    "ag_gemm_inter": "communication blocks gather every rank's shard of A into a local copy, one "
                     "BM-row band at a time; the GEMM producer waits for each band's flag",
    "ag_gemm_intra": "no all-gather: the GEMM producer loads each A tile straight from the rank "
                     "owning its rows, through a tensor map of that rank's shard (tiles laid out "
                     "per shard), starting with the rank's own shard and then walking its peers",
}


def _prediction_line(prediction: Any) -> str:
    if prediction is None:
        return "no prediction attached"
    return (f"predicted {format_time(prediction.time_s)} on {prediction.system} "
            f"(baseline {format_time(prediction.baseline_s)}, speed-up {prediction.speedup:.2f}x)")


def render(plan: FusedPlan, prediction: Any = None, command: str = "") -> str:
    """The CUDA translation unit for ``plan``."""
    p = plan
    shape = " ".join(f"{k}={v}" for k, v in p.shape)
    head = [
        f"// {p.op}, {p.overlap}, {p.algorithm}, {p.mechanism}: generated by `pksim codegen` "
        f"from schedule {p.schedule_key}.",
        f"// Schedule: {p.world} ranks, {shape} bf16 on {p.system}; {_prediction_line(prediction)}.",
        *textwrap.wrap(_WHAT[p.op_template][0].upper() + _WHAT[p.op_template][1:] + ".",
                       width=96, initial_indent="// ", subsequent_indent="// "),
        "// World size and M, N, K are run-time arguments (pkf_args, fused/abi.h). The nvcc "
        "command is in",
        "// the manifest next to this file.",
    ]
    if command:
        head.append(f"// Regenerate: {command}")
    guard = ""
    if p.compile_only:
        guard = ("#if !defined(PK_ENABLE_MULTIMEM) || !PK_ENABLE_MULTIMEM\n"
                 "#error \"in-network kernels need NVLink multicast: build with "
                 "-DPK_ENABLE_MULTIMEM=1 (compile-only here)\"\n#endif\n")
    includes = '#include "fused/entry.cuh"\n'
    order = ("staggered: each rank starts at its own band (ag-gemm) or the next rank's (others)"
             if p.staggered else "sequential: every rank starts at row 0 "
             "(schedule.peer_order = sequential)")
    config = f"""// ---- config: launch constants --------------------------------------------------------------
struct config {{
  using gemm = pk::gemm::config<{p.bm}, {p.bn}, {p.bk}, {p.stages}, {p.epi_bufs}>;  // schedule.tile
  static constexpr int kCommBlocks = {p.comm_blocks};  // per rank (schedule.comm_sms); pkf_args::comm_blocks overrides
  static constexpr bool kStaggered = {"true" if p.staggered else "false"};  // tile order, {order}
  static constexpr bool kCopyTma = {"true" if p.copy_tma else "false"};  // comm blocks move by TMA, else registers
}};
using op = pkf::{p.op_template}<config>;
"""
    globals_ = """// ---- globals: layouts, problem size, grid ---------------------------------------------------
// op::globals (fused/ops.cuh): where the ranks' pk::gemm::params lie in the device table (A, B
// and epilogue tensor maps, the rank's tile order; pkf_table writes it), the communication
// parameters (every rank's buffers, flag counters, the row partition: arrays in the table), and
// the grid split: world x (gemm_blocks + comm_blocks) blocks.
using globals = op::globals;
"""
    kernel = f"""// ---- kernel ---------------------------------------------------------------------------------
// kWide: the instance for worlds above 8 (the communication blocks sum their sources 8 at a time).
template <bool kWide>
__global__ void __launch_bounds__(config::gemm::THREADS, 1) {p.kernel}(const __grid_constant__ globals g) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  pkf::run<op, kWide>(g, smem);
}}
"""
    manifest = json.dumps({"op": p.op, "overlap": p.overlap, "algorithm": p.algorithm,
                           "mechanism": p.mechanism, "entry": p.entry,
                           "tile": [p.bm, p.bn, p.bk], "comm_blocks": p.comm_blocks,
                           "staggered": p.staggered, "schedule_key": p.schedule_key},
                          sort_keys=True)
    entry = f"""// ---- host entry point -------------------------------------------------------------------------
// Checks every argument (world, shape and alignment, every rank's buffers, flags, the grid
// split: pkf::check_args) and enqueues the call on a->stream. Returns a pkc_status; on failure
// `msg` holds one line saying what is wrong.
extern "C" int {p.entry}(const pkf_args* a, char* msg, size_t msg_len) {{
  pkf::reporter rep(msg, msg_len);
  if (!pkf::check_args<op, config>(a, rep)) return rep.code;
  return pkf::launch<op, config>({p.kernel}<false>, {p.kernel}<true>, a, rep);
}}

// Scratch sizes, flags and launch figures for these arguments (pointers are not read).
extern "C" int pkf_requirements(const pkf_args* a, pkf_reqs* out, char* msg, size_t msg_len) {{
  pkf::reporter rep(msg, msg_len);
  return pkf::requirements<op, config>({p.kernel}<false>, {p.kernel}<true>, a, out, rep);
}}

// The device table's bytes for these arguments and a->table (fused/abi.h): copy them there.
extern "C" int pkf_table(const pkf_args* a, void* host, size_t bytes, char* msg, size_t msg_len) {{
  pkf::reporter rep(msg, msg_len);
  return pkf::table<op, config>(a, host, bytes, rep);
}}

extern "C" const char* pkf_manifest(void) {{
  return {json.dumps(manifest)};
}}
"""
    parts = ["\n".join(head) + "\n", guard, includes, config, globals_, kernel, entry]
    return "\n".join(x for x in parts if x)


# ---- emit ----------------------------------------------------------------------------------------

def emit(system: System, schedule: Schedule, prediction: Any = None, out_dir: str | Path = ".",
         command: str = "") -> Emitted:
    """Write ``<op>-<key>.cu`` and its manifest (schedule, prediction, plan, build options,
    the nvcc command) for a fused schedule."""
    plan = make_plan(system, schedule)
    source, manifest = write_unit(out_dir, plan.name, render(plan, prediction, command),
                                  build_options(plan), unit_manifest(system, schedule, prediction,
                                                                     plan))
    return Emitted(source, manifest, plan)
