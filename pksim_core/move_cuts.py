"""How the generated kernels cut their moves, from their contract alone (``pksim.
kernel_contract``: TMA stages, piece and deal rules, the copy-engine reduction's blocks): how
many blocks work on a move, how many messages and source reads it makes. No figure of the
hardware or the kernel profile is read here: a move's cost is its mechanism's component's
(``pksim_core.mechanisms``)."""
from __future__ import annotations

import math

from pksim_core.kernel_contract import (CE_REDUCE_BLOCK_BYTES, LINE_BYTES, PAGED_PIECE_BYTES,
                                   PIECE_BYTES, SET_SLOTS, TMA_STAGE_BYTES)


def tma_messages_per_B(sources: int, dests: int, reduce: bool) -> float:
    """Bulk loads and stores per payload byte of a generated collective's TMA move
    (collective.cuh): a copy moves TMA_STAGE_BYTES chunks, one load and ``dests`` stores
    each; a sum of S sources cuts the stage into S + 1 slots (the sources and the result),
    S loads and ``dests`` stores per slot-sized chunk, so its messages per byte grow as
    (S + D)(S + 1) (block_moves without stacks, one block at 1 GiB: a sum of 2 / 4 / 8
    sources into one destination takes 65 / 121 / 254 ns per KiB, not linear in S;
    docs/decisions/D21.md)."""
    chunk = TMA_STAGE_BYTES / (sources + 1) if reduce else TMA_STAGE_BYTES
    return (sources + dests) / chunk


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


def source_reads(sources: int, dests: int, reduce: bool) -> int:
    """How many times a move reads its sources: a sum each once; a copy its one source once per
    SET_SLOTS destinations (copy_list's batches)."""
    return sources if reduce else sources * math.ceil(dests / SET_SLOTS)


