"""Which of a move's sources sit off its destinations' 16-byte grid, as the generated kernels'
element loops find out (kernels/collectives/moves.cuh; docs/decisions/D58.md, D63.md).

Every move is cut the same way: a head element by element up to the destinations' 16-byte
boundary, a body of 16-byte vectors stored on that grid, a tail. A source at the destinations'
misalignment is read by 16-byte loads; one at another misalignment is *shifted* by
(its misalignment - the destinations') mod 16 bytes (``plan_head`` + ``plan_source``): by
registers every source of the move is then read in the widest word every shift allows
(``words``: 8, 4 or 2 bytes, ``load16<W>``), by TMA each shifted source is bulk-loaded one vector
longer and realigned in the stage (``staged``; a shifted copy runs the one-source staged sum,
``tma_copy_shifted``). From sm_100 on (``kLeanShiftedSums``) a shifted register sum loads one
source's words at a time.

Offsets are bytes from a 16-byte-aligned allocation (every rank's buffers are), so a shift is a
multiple of the element size and 2-byte words occur only for 2-byte elements, as
``PKC_WITH_WORD`` allows them.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from hwmodels.system import ARCHITECTURES

VECTOR_BYTES = 16
# kLeanShiftedSums: __CUDA_ARCH__ >= 1000, the architectures from Blackwell on
LEAN_SHIFTED_FROM = "blackwell"


def source_shift(src_offset: float, dst_offset: float, nbytes: float) -> int:
    """Bytes by which a source at byte ``src_offset`` of its buffer sits past the 16-byte grid
    of the vectors a move of ``nbytes`` stores at ``dst_offset`` (moves.cuh plan_head: the head
    runs to the destination's boundary; plan_source: the source's shift after it); 0 when the
    move has no whole vector after its head (all of it element by element)."""
    md = int(dst_offset) % VECTOR_BYTES
    head = (VECTOR_BYTES - md) % VECTOR_BYTES
    if nbytes - head < VECTOR_BYTES:
        return 0
    return (int(src_offset) + head) % VECTOR_BYTES


def move_shifts(src_offsets: Sequence[float], dst_offset: float, nbytes: float
                ) -> tuple[int, ...]:
    """Every source's shift (source_shift) against destinations at ``dst_offset``; () when
    none is shifted (the aligned move, as the model costed every move before D63)."""
    shifts = tuple(source_shift(s, dst_offset, nbytes) for s in src_offsets)
    return shifts if any(shifts) else ()


def word_bytes(shifts: Iterable[int]) -> int:
    """The word a register move reads all its sources in (moves.cuh words): the widest power of
    two that divides every shift, 16 (whole vectors) when none is shifted."""
    word = VECTOR_BYTES
    for s in shifts:
        if s:
            word = min(word, s & -s)
    return word


def shifted_sources(shifts: Iterable[int]) -> int:
    """How many sources a TMA move realigns in its stage (those with a shift)."""
    return sum(1 for s in shifts if s)


def aligned16(*offsets: float) -> bool:
    """Whether every buffer of a move starts on 16 bytes (collective.cuh copy_range: only then
    does a TMA copy deal its stage chunks over the blocks; else each block moves a piece)."""
    return all(int(o) % VECTOR_BYTES == 0 for o in offsets)


def lean_shifted_sums(architecture: str) -> bool:
    """Whether the kernels built for ``architecture`` load a shifted register sum's sources one
    at a time (moves.cuh kLeanShiftedSums: sm_100 and later; D58)."""
    return (architecture in ARCHITECTURES
            and ARCHITECTURES.index(architecture) >= ARCHITECTURES.index(LEAN_SHIFTED_FROM))
