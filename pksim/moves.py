"""How the generated collectives move data, on the SM's component models: the move's time
per byte and rate on a group of blocks, its latency, and how many blocks work on it.

These follow from the kernels' contract (``pksim.kernel_contract``: TMA stages, piece and
deal rules, the copy-engine reduction's blocks) on top of the hardware's calibrated rates
(``hwmodels.sm``: per-SM rates, the knee, round trips). The simulator (``pksim.flows``) and
the microbenchmarks' model (``pksim.microbench_model``) both use them.
"""
from __future__ import annotations

import math

from hwmodels.sm import move_fixed_latency_s, sm_issue_Bps
from hwmodels.system import GpuSpec
from pksim.kernel_contract import (CE_REDUCE_BLOCK_BYTES, LINE_BYTES, PAGED_PIECE_BYTES,
                                   PIECE_BYTES, REG_TWO_VECTOR_SOURCES, SET_SLOTS,
                                   TMA_STAGE_BYTES)
from pksim.shifts import VECTOR_BYTES, lean_shifted_sums, shifted_sources, word_bytes


def tma_messages_per_B(sources: int, dests: int, reduce: bool) -> float:
    """Bulk loads and stores per payload byte of a generated collective's TMA move
    (collective.cuh): a copy moves TMA_STAGE_BYTES chunks, one load and ``dests`` stores
    each; a sum of S sources cuts the stage into S + 1 slots (the sources and the result),
    S loads and ``dests`` stores per slot-sized chunk, so its messages per byte grow as
    (S + D)(S + 1) (block_moves without stacks, one block at 1 GiB: a sum of 2 / 4 / 8
    sources into one destination takes 65 / 121 / 254 ns per KiB, not linear in S;
    docs/decisions.md D21)."""
    chunk = TMA_STAGE_BYTES / (sources + 1) if reduce else TMA_STAGE_BYTES
    return (sources + dests) / chunk


def tma_fill_s(gpu: GpuSpec, block_payload_B: float, sources: int,
               remote: bool = False) -> float:
    """What a TMA sum waits before its first bulk store, beyond the first read's latency:
    its first chunk of every source (a stage slot, or the block's whole payload if smaller)
    must have arrived at the SM's TMA rate before it adds, where a register sum stores each
    vector as soon as its loads are back (block_moves: a sum of 2 shared sources of 1 MiB
    on 66 blocks a group, 16 KiB a block, took 6.80 us by TMA and 6.24 us by registers; at
    4 KiB both 5.02 us; docs/decisions.md D14). TMA copies show no such wait (their chunks are
    dealt over the blocks and stream through the stages). ``remote``: the sources are on other
    GPUs, loaded at ``gpu.transfer_remote.tma_read_per_sm_GBps``."""
    rate = (gpu.transfer_remote.tma_read_Bps_per_sm if remote
            else gpu.transfer.tma_local_Bps_per_sm)
    if rate <= 0 or block_payload_B <= 0:
        return 0.0
    return sources * min(block_payload_B, TMA_STAGE_BYTES / (sources + 1)) / rate


def piece_blocks(blocks: float, payload_B: float) -> float:
    """Blocks' worth of work in a move of ``payload_B`` cut over ``blocks`` blocks as
    collective.cuh block_piece cuts it: payload / the largest piece, which sets the move's
    time; at least one, at most ``blocks`` (equal to it when every block's share is a whole
    number of lines, or of 4 KiB from 64 KiB on, as with every power-of-two payload)."""
    if blocks <= 0 or payload_B <= 0:
        return blocks
    share = payload_B / blocks
    align = PIECE_BYTES if share >= PAGED_PIECE_BYTES else LINE_BYTES
    step = math.ceil(share / align) * align
    return min(blocks, max(1.0, payload_B / step))


def dealt_blocks(blocks: int, payload_B: float) -> int:
    """Blocks that work on a TMA copy whose TMA_STAGE_BYTES chunks are dealt round-robin
    over ``blocks`` (collective.cuh copy_range): at most one per chunk."""
    return min(blocks, max(1, math.ceil(payload_B / TMA_STAGE_BYTES)))


def ce_reduce_blocks(blocks: int, payload_B: float) -> int:
    """Blocks of a copy-engine schedule's reduction kernel summing ``payload_B`` with at most
    ``blocks`` (collective.cuh ce_reduce: one per CE_REDUCE_BLOCK_BYTES): a 64 KiB all-reduce
    at w2 sums its 32 KiB chunk on one block whatever comm_sms says."""
    return min(blocks, max(1, math.ceil(payload_B / CE_REDUCE_BLOCK_BYTES)))


def working_blocks(blocks: float, payload_B: float, dealt: bool) -> float:
    """Blocks' worth of work in a move of the generated collectives on ``blocks`` blocks:
    a TMA copy through copy_range deals its stage chunks (``dealt``, dealt_blocks), every
    other move cuts the payload into pieces (piece_blocks)."""
    return dealt_blocks(blocks, payload_B) if dealt else piece_blocks(blocks, payload_B)


def epilogue_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, epilogue: str,
                        elem_bytes: float = 2.0) -> float:
    """SM time per payload byte that a reduce op or a fused epilogue adds to a sum of
    ``sources`` inside one GPU (``epilogue``: "" the plain sum, "op" a reduce op or a scale,
    "bias" with a bias vector: pksim.kernel_contract.epilogue_cost), as the kernels do it
    (kernels/collectives/epilogue.cuh; docs/decisions.md D56):

    * TMA: the op and the scale run on the stage in shared memory as the sum does (no term);
      a bias is read by 16-byte vectors and waited for in every stage chunk, S + 1 chunks a
      stage: gpu.kernel.tma_move_bias_ns x (S + 1) / stage bytes;
    * registers: the epilogue routines keep one vector a source in flight where the plain sum
      keeps two (up to REG_TWO_VECTOR_SOURCES sources): ldst_move_epilogue_ns_per_KiB / S
      there; a bias is read per element: ldst_move_bias_ps_per_element / element bytes.

    Measured by validation/microbench/epilogue_moves.cu against the plain sum."""
    if not epilogue or sources <= 0:
        return 0.0
    t = gpu.kernel
    if mechanism == "tma":
        return t.tma_move_bias_s * (sources + 1) / TMA_STAGE_BYTES if epilogue == "bias" else 0.0
    out = t.ldst_move_epilogue_s_per_B / sources if sources <= REG_TWO_VECTOR_SOURCES else 0.0
    if epilogue == "bias" and elem_bytes > 0:
        out += t.ldst_move_bias_s_per_elem / elem_bytes
    return out


def staged(mechanism: str, reduce: bool, shifts: tuple[int, ...] = ()) -> bool:
    """Whether a move runs TMA's staged path, its threads summing or realigning every stage
    before the bulk stores: a TMA sum, or a TMA copy of a shifted source, which runs the
    one-source staged sum (moves.cuh tma_copy_shifted) and is costed as one (D63)."""
    return mechanism == "tma" and (reduce or any(shifts))


def source_reads(sources: int, dests: int, reduce: bool) -> int:
    """How many times a move reads its sources: a sum each once; a copy its one source once per
    SET_SLOTS destinations (copy_list's batches)."""
    return sources if reduce else sources * math.ceil(dests / SET_SLOTS)


def shift_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                     shifts: tuple[int, ...] = ()) -> float:
    """SM time per payload byte that sources off the destinations' 16-byte grid (``shifts``,
    pksim.shifts) add to a move inside one GPU (docs/decisions.md D63), as moves.cuh reads them:

    * registers: every source of the move in words of W bytes (the widest every shift allows),
      16 / W loads a vector where an aligned one takes 1: gpu.kernel (ldst_move_word_ns_per_KiB)
      per further load, per source read (a sum reads each source once; a copy its one source
      once per SET_SLOTS destinations, copy_list's batches);
    * TMA: each shifted source loaded one vector longer and realigned by the threads in the
      stage: gpu.kernel (tma_move_realign_ns_per_KiB) per shifted source and read (the staged
      path itself is the sum's: move_time_per_B costs a shifted copy as a one-source sum).

    Fitted to block_moves --shift alone (the moves' own routines from sources 2, 4 or 8 bytes
    off the grid into aligned destinations)."""
    if not any(shifts):
        return 0.0
    t = gpu.kernel
    if mechanism == "tma":
        return t.tma_move_realign_s_per_B * source_reads(shifted_sources(shifts), dests, reduce)
    return (t.ldst_move_word_s_per_B * source_reads(sources, dests, reduce)
            * (VECTOR_BYTES // word_bytes(shifts) - 1))


def word_l2_Bps(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                shifts: tuple[int, ...] = ()) -> float:
    """The payload rate the L2 allows a register move whose sources are read in W-byte words
    (``shifts``): each of a warp's word loads fetches every 32-byte sector of its lanes' 16-byte
    vectors (ld.global.cg: no L1), so a source read moves 16 / W times its bytes out of the L2,
    besides a byte per destination, at the profile's ldst_word_l2 rate (fitted to block_moves
    --shift on 132 blocks, where it binds; docs/decisions.md D63). Unbounded for TMA and for
    aligned moves (16-byte loads use every sector byte they fetch)."""
    if mechanism == "tma" or not any(shifts):
        return math.inf
    sectors = source_reads(sources, dests, reduce) * VECTOR_BYTES / word_bytes(shifts) + dests
    return gpu.kernel.ldst_word_l2_Bps / sectors


def register_load_rounds(gpu: GpuSpec, reduce: bool, sources: int, shifts: tuple[int, ...] = (),
                         rounds: int = 1) -> int:
    """Rounds in which a register sum loads its sources: ``rounds`` (Move.load_rounds), or, for
    a shifted sum on sm_100 and later, one source a round (moves.cuh kLeanShiftedSums: one
    source's words at a time), each further round waiting the profile's load_round (D24). Not
    measured: no such GPU here (docs/decisions.md D63)."""
    if reduce and any(shifts) and lean_shifted_sums(gpu.architecture):
        return max(rounds, sources)
    return rounds


def move_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                    far_sources: int = 0, far_dests: int = 0, readers: int = 1,
                    routine: str = "", epilogue: str = "", elem_bytes: float = 2.0,
                    shifts: tuple[int, ...] = ()) -> float:
    """SM time per payload byte of one of the generated collectives' moves on one SM:
    read ``sources`` buffers (summed when ``reduce``), write the result to ``dests``, of
    which ``far_sources`` and ``far_dests`` lie on other GPUs (over NVLink).

    Inside the GPU: linear in S and D (gpu.transfer.*_move_*), as measured by
    validation/microbench/block_moves.cu from cold memory. Sources that ``readers`` moves of
    one GPU read at the same time come from memory once and from L2 for the other readers,
    which spend only the calibrated share (gpu.transfer.*_shared_read) of the per-source
    time on them. ``routine`` "pull": the inter-SM fused kernels' pull-reduce instead of the
    collectives' routines, in its TMA form when ``mechanism`` is "tma"
    (gpu.kernel.pull_tma_move_*), else its register form (gpu.kernel.pull_move_*), each
    measured by validation/microbench/fused_pull.cu (docs/decisions.md D54).

    A move with a buffer on another GPU is an NVLink move (docs/decisions.md D38): each far
    buffer costs a payload byte at the mechanism's NVLink per-SM rate (gpu.transfer_remote,
    the mechanism study: read for a source, write for a destination; a pull-reduce moves by
    TMA or by registers as its form does); its near buffers and its sum ride in the shadow of
    the far round trips and none of the one-GPU fit's figures applies. ``epilogue`` (with
    ``elem_bytes``): a sum through the epilogue routines (epilogue_time_per_B), inside one
    GPU; over NVLink it rides in the shadow of the far round trips as the near buffers do.
    ``shifts``: sources off the destinations' 16-byte grid (shift_time_per_B; a shifted TMA
    copy costs the one-source staged sum), inside one GPU only: block_moves --shift measured
    them there (docs/decisions.md D63). A copy to more than SET_SLOTS destinations runs as
    copy_list does, one whole move per SET_SLOTS of them, each reading the source again (D64)."""
    t = gpu.kernel
    if routine == "pull":
        mechanism = "tma" if mechanism == "tma" else "register"
    if far_sources > 0 or far_dests > 0:
        return far_time_per_B(gpu, mechanism, far_sources, far_dests)
    if routine == "pull" and mechanism == "tma":
        return (t.pull_tma_move_base_s_per_B + t.pull_tma_move_source_s_per_B * sources
                + t.pull_tma_move_dest_s_per_B * dests)
    if routine == "pull":
        return (t.pull_move_base_s_per_B + t.pull_move_source_s_per_B * sources
                + t.pull_move_dest_s_per_B * dests)
    if not reduce and dests > SET_SLOTS:   # copy_list: a whole move per batch of destinations
        full, rest = divmod(dests, SET_SLOTS)
        return sum(n * move_time_per_B(gpu, mechanism, sources, d, False, readers=readers,
                                       shifts=shifts)
                   for n, d in ((full, SET_SLOTS), (1, rest)) if n and d)
    reduce = reduce or staged(mechanism, reduce, shifts)    # a shifted TMA copy: S = 1
    if mechanism == "tma":
        base, dest, red, src = (t.tma_move_base_s_per_B, t.tma_move_dest_s_per_B,
                                t.tma_move_reduce_s_per_B, t.tma_move_source_s_per_B)
    else:
        base, dest, red, src = (t.ldst_move_base_s_per_B, t.ldst_move_dest_s_per_B,
                                t.ldst_move_reduce_s_per_B, t.ldst_move_source_s_per_B)
    if readers > 1:
        share = t.tma_shared_read if mechanism == "tma" else t.ldst_shared_read
        src *= (1 + (readers - 1) * share) / readers
    tau = base + dest * dests + ((red + src * sources) if reduce else 0.0)
    if mechanism == "tma":
        tau += t.tma_message_s * tma_messages_per_B(sources if reduce else 1, dests, reduce)
    if reduce:
        tau += epilogue_time_per_B(gpu, mechanism, sources, epilogue, elem_bytes)
    return tau + shift_time_per_B(gpu, mechanism, sources, dests, reduce, shifts)


def far_time_per_B(gpu: GpuSpec, mechanism: str, far_sources: int, far_dests: int) -> float:
    """SM time per payload byte of a move's buffers on other GPUs: each far source at the
    mechanism's NVLink read rate per SM, each far destination at its write rate
    (gpu.transfer_remote, the mechanism study); 0 without far buffers."""
    if far_sources <= 0 and far_dests <= 0:
        return 0.0
    r = gpu.transfer_remote
    read, write = r.per_sm_Bps(mechanism, "read"), r.per_sm_Bps(mechanism, "write")
    if (far_sources and read <= 0) or (far_dests and write <= 0):
        return float("inf")
    return (far_sources / read if far_sources else 0.0) + (far_dests / write if far_dests else 0.0)


def move_Bps(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool, n_sms: float,
             shared_Bps: float | None, far_sources: int = 0, far_dests: int = 0,
             readers: int = 1, routine: str = "", epilogue: str = "",
             elem_bytes: float = 2.0, shifts: tuple[int, ...] = ()) -> float:
    """Combined payload rate of ``n_sms`` SMs doing such moves, meeting the memory they all
    use (payload capacity ``shared_Bps``) through the calibrated knee: one for TMA sums,
    which stay bound by the blocks closer to the memory's limit, one for the rest (a shifted
    TMA copy too: its SM time is the staged sum's, its traffic a copy's; D63)."""
    tau = move_time_per_B(gpu, mechanism, sources, dests, reduce, far_sources, far_dests,
                          readers, routine, epilogue, elem_bytes, shifts)
    if far_sources <= 0 and far_dests <= 0 and shared_Bps is not None:
        shared_Bps = min(shared_Bps, word_l2_Bps(gpu, mechanism, sources, dests, reduce, shifts))
    if tau <= 0:
        return float("inf") if shared_Bps is None else shared_Bps
    t = gpu.kernel
    knee = t.tma_move_reduce_knee if reduce and mechanism == "tma" else t.move_knee
    return sm_issue_Bps(1.0 / tau, n_sms, knee, shared_Bps)


def move_latency_s(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                   block_payload_B: float, routine: str = "", remote: bool = False,
                   far_stores: bool = False, shifts: tuple[int, ...] = ()) -> float:
    """What a move of the generated collectives waits beyond its first read, for a block
    moving ``block_payload_B``: its buffers (move_fixed_latency_s) and, for a TMA sum of the
    collectives' routines, its first chunk's loads (tma_fill_s; ``remote``: from another
    GPU). The fused kernels' pull-reduce (``routine`` "pull") waits for no first chunk
    beyond what its own fit (gpu.kernel.pull_*) carries.
    ``far_stores``: the sum reads near sources only and stores to another GPU (a ring's
    step): an NVLink move, whose near loads ride in the shadow of its far stores' round
    trips (docs/decisions.md D38), so it waits for no first chunk at the local rate. A
    shifted TMA copy (``shifts``) runs the staged path and waits as a one-source sum (D63)."""
    latency = move_fixed_latency_s(gpu, sources, dests, nvlink=remote or far_stores)
    if staged(mechanism, reduce, shifts) and routine != "pull" and not far_stores:
        latency += tma_fill_s(gpu, block_payload_B, sources, remote)
    return latency
