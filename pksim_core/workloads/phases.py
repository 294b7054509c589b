"""The generated collectives' phases as moves: what each rank's SMs or copy engines do.

``pksim_core.workloads.collectives`` says which data ends where (checked symbolically); this
module says how the kernels that ``pksim codegen`` emits (kernels/collectives/*.cuh) move
it, phase by phase, so that a prediction costs the kernel that will run: who issues each
move (the pusher or the puller), how many buffers it reads and writes, and the local
copies an out-of-place collective makes. One function per (op, algorithm), named by its row
(pksim_core.algorithms ``phases``); each mirrors the ``phase`` / ``ce_phase`` of its kernel (the
comments name them).

Sizes: ``shard`` is a rank's block (nbytes / world), ``n`` the whole buffer where the op
works on it. Every phase is a Step without transfers and with moves.

Offsets: a shard sits at r x count elements of a buffer (count: a rank's whole elements, as
the kernels take it), a -v block at its displacement; where one side of an SM move is off the
16-byte grid by another amount than the other, its sources are shifted (Move.shifts,
pksim_core.shifts; docs/decisions/D63.md) and a TMA copy moves pieces instead of dealing stage
chunks (collective.cuh copy_range deals only when every pointer is aligned). The ring phases
of one kind rotate the ranks over the shards: phase p puts rank r's shard at (r - p) x count,
so the ranks' offsets off the 16-byte grid repeat every 16 / gcd(shard bytes, 16) phases
(``ring_class``); phases of one class give every rank the same moves and share a key (on
every fabric), the others are costed each (a rank that crosses a tier boundary and reads
shifted in one phase and aligned in another costs differently in the two).
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace
from itertools import accumulate
from typing import Callable

from pksim_core import algorithms
from pksim_core.kernel_contract import SPLIT_OPS, epilogue_cost, epilogue_of, reduce_op_of
from pksim_core.program import Move, Step, digest
from pksim_core.schedule import DTYPES
from pksim_core.shifts import VECTOR_BYTES, aligned16, move_shifts
from pksim_core.workloads import varsize_ops

SM = "sm"   # engine of the copy-engine schedules' reduction kernels
# The two-shot all-reduce by registers in fp32 loads more than 4 sources 4 at a time
# (all_reduce.cuh: reduce_to<C, 4>): with 8, two rounds of loads (transfer.load_round_ns);
# in bf16 all 8 at once.
TWO_SHOT_LOADS = {"fp32": 4, "bf16": 8}


def two_shot_loads(dtype: str) -> int:
    """How many sources the register two-shot all-reduce loads at a time."""
    return TWO_SHOT_LOADS.get(dtype, 4)


def load_rounds(sources: int, batch: int) -> int:
    """Rounds in which a register sum (collective.cuh reg_reduce) loads its sources: up to 4
    sources in one, more ``batch`` at a time."""
    return math.ceil(sources / batch) if sources > 4 else 1


def ring_class(p: int, w: int, shard_bytes: int) -> int:
    """The key class of a ring's phase p, whose ranks' shards sit at (r - p) x shard_bytes:
    p modulo the period of those offsets on the 16-byte grid when the world is a multiple of
    it (then the phases of a class give each rank the same moves), else p itself."""
    period = VECTOR_BYTES // math.gcd(int(shard_bytes), VECTOR_BYTES)
    return p % period if w % period == 0 else p


def _phase(key, moves: Callable[[], list[Move]], joins: bool = True,
           queued: int | None = None) -> Step:
    """A phase of moves; ``queued``: the most copies one rank's copy engines queue in it
    (Step.queued), where a rank queues more than one."""
    return Step(key, lambda: [], moves, joins=joins, queued=queued)


def _all(w: int) -> tuple[int, ...]:
    return tuple(range(w))


def _shard_bytes(w: int, nbytes: float, dtype: str) -> int:
    """Bytes of a rank's shard as the kernels cut it: count = whole elements of nbytes / world
    (validation.runtime.reference.count_for_bytes); shard r starts at r x this."""
    e = DTYPES[dtype]
    return max(1, int(nbytes // e) // w) * int(e)


def _copy(issuer, payload, src, dests, src_at, dst_at, ce, **kw) -> Move:
    """An SM copy (copy_range) from byte ``src_at`` of its source into ``dst_at`` of every
    destination: shifted where the two sit differently off the grid, dealt only when both are
    on it (TMA); a copy engine's copy as it is."""
    if ce:
        return Move(issuer, payload, src, dests, **kw)
    return Move(issuer, payload, src, dests, dealt=aligned16(src_at, dst_at),
                shifts=move_shifts((src_at,), dst_at, payload), **kw)


# ---- all-gather (all_gather.cuh) ---------------------------------------------------------
def _ag_direct(w, nbytes, root, ce, dtype):
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)
    if ce:   # ce_phase: one copy per destination, own slot included
        return [_phase(("kag", "direct-ce", w, shard), lambda: [
            Move(r, shard, (r,), (q,)) for r in range(w) for q in range(w)], queued=w)]
    # phase: one read of the shard (at 0), a store into slot r of every rank's output
    return [_phase(("kag", "direct", w, shard), lambda: [
        _copy(r, shard, (r,), _all(w), 0, r * cb, ce) for r in range(w)])]


def _ag_ring(w, nbytes, root, ce, dtype):
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)

    def first():     # the input (at 0) into slot r of the own and the next rank's output
        if ce:
            return [Move(r, shard, (r,), (q,)) for r in range(w) for q in (r, (r + 1) % w)]
        return [_copy(r, shard, (r,), (r, (r + 1) % w), 0, r * cb, ce) for r in range(w)]

    def forward(p):  # copy_range as in the first phase; copy engines: one copy. The shard
        # (slot r - p) is the one the previous phase wrote into this rank's output
        return [_copy(r, shard, (r,), ((r + 1) % w,), (r - p) % w * cb, (r - p) % w * cb, ce,
                      warm=1) for r in range(w)]
    return ([_phase(("kag", "ring0", w, shard, ce), first)]
            + [_phase(("kag", "ring", w, shard, ce, 0 if ce else ring_class(p, w, cb)),
                      lambda p=p: forward(p)) for p in range(1, w - 1)])


# ---- reduce-scatter (reduce_scatter.cuh) ---------------------------------------------------
def _rs_direct(w, nbytes, root, ce, dtype):
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)
    if ce:   # copy foreign shards to their owner's scratch, then sum locally
        return [_phase(("krs", "direct-ce0", w, shard), lambda: [
                    Move(r, shard, (r,), (q,)) for r in range(w) for q in range(w) if q != r],
                       queued=w - 1),
                _phase(("krs", "direct-ce1", w, shard), lambda: [
                    Move(r, shard, (r,) * w, (r,), True, SM) for r in range(w)])]
    # phase: rank r pulls shard r (at r x count) of every input, sums, writes its output (at 0)
    return [_phase(("krs", "direct", w, shard), lambda: [
        Move(r, shard, _all(w), (r,), True, shifts=move_shifts((r * cb,) * w, 0, shard),
             crossed=True)
        for r in range(w)])]


def _rs_ring_phases(w, shard, ce, tag, shard_at=None, cb=0):
    """Phase 0 sends a shard to the next rank's scratch; phases 1 .. w-2 add the own shard to
    the received partial sum (the previous phase's write: warm) and send it on; the last adds
    and keeps it. ``shard_at(r, p)``: the byte offset of the own shard rank r reads in phase p
    (the scratch slots and the outputs start on 16 bytes); None: every shard on the grid.
    ``cb``: the shard's bytes, whose offsets class the phases' keys (ring_class; 0 with
    every shard on the grid: one class)."""
    nxt = [(r + 1) % w for r in range(w)]

    def shifts(r, p, *others):
        return () if ce or shard_at is None else move_shifts((shard_at(r, p),) + others, 0, shard)
    out = [_phase((tag, "ring0", w, shard), lambda: [
        Move(r, shard, (r,), (nxt[r],), shifts=shifts(r, 0)) for r in range(w)])]
    if ce:   # sum into a local staging slot (SM kernel), then a copy to the next rank
        # the same ce_phase goes on with the copy: no event waits in between
        add = _phase((tag, "ring-ce-sum", w, shard), lambda: [
            Move(r, shard, (r, r), (r,), True, SM, warm=1) for r in range(w)], joins=False)
        send = _phase((tag, "ring-ce-send", w, shard), lambda: [
            Move(r, shard, (r,), (nxt[r],), warm=1) for r in range(w)])
        out += [add, send] * (w - 2)
        out.append(_phase((tag, "ring-ce-last", w, shard), lambda: [
            Move(r, shard, (r, r), (r,), True, SM, warm=1) for r in range(w)]))
        return out
    for p in range(1, w - 1):
        out.append(_phase((tag, "ring-sum", w, shard, ring_class(p, w, cb)), lambda p=p: [
            Move(r, shard, (r, r), (nxt[r],), True, warm=1, shifts=shifts(r, p, 0))
            for r in range(w)]))
    out.append(_phase((tag, "ring-last", w, shard), lambda: [
        Move(r, shard, (r, r), (r,), True, warm=1, shifts=shifts(r, w - 1, 0)) for r in range(w)]))
    return out


def _rs_ring(w, nbytes, root, ce, dtype):
    # the own shard of phase p: (r - p - 1) mod w, the last phase's r (reduce_scatter_ring::shard)
    cb = _shard_bytes(w, nbytes, dtype)
    return _rs_ring_phases(w, nbytes / w, ce, "krs",
                           lambda r, p: (r if p == w - 1 else (r - p - 1) % w) * cb, cb)


# ---- all-reduce (all_reduce.cuh) -------------------------------------------------------------
def _ar_one_shot(w, nbytes, root, ce, dtype):
    if ce:   # every input copied into every peer's scratch, then a local sum
        return [_phase(("kar", "one-shot-ce0", w, nbytes), lambda: [
                    Move(r, nbytes, (r,), (q,)) for r in range(w) for q in range(w) if q != r],
                       queued=w - 1),
                _phase(("kar", "one-shot-ce1", w, nbytes), lambda: [
                    Move(r, nbytes, (r,) * w, (r,), True, SM) for r in range(w)])]
    # phase: rank r pulls the whole buffer of every rank, sums, writes its output
    return [_phase(("kar", "one-shot", w, nbytes), lambda: [
        Move(r, nbytes, _all(w), (r,), True, readers=w) for r in range(w)])]


def _ar_two_shot(w, nbytes, root, ce, dtype):
    chunk = nbytes / w
    if ce:   # foreign chunks to their owner's scratch; its SM kernel sums into every output
        return [_phase(("kar", "two-shot-ce0", w, chunk), lambda: [
                    Move(r, chunk, (r,), (q,)) for r in range(w) for q in range(w) if q != r],
                       queued=w - 1),
                _phase(("kar", "two-shot-ce1", w, chunk), lambda: [
                    Move(r, chunk, (r,) * w, _all(w), True, SM) for r in range(w)])]
    # one phase: rank r pulls chunk r of every input, stores the sum into every output; by
    # registers it loads more than two_shot_loads(dtype) sources that many at a time
    rounds = load_rounds(w, two_shot_loads(dtype))
    return [_phase(("kar", "two-shot", w, chunk), lambda: [
        Move(r, chunk, _all(w), _all(w), True, load_rounds=rounds) for r in range(w)])]


def _ar_ring(w, nbytes, root, ce, dtype):
    chunk = nbytes / w
    out = _rs_ring_phases(w, chunk, ce, "kar")
    # forward the reduced chunks (the previous phase's) onwards
    return out + [_phase(("kar", "ring-ag", w, chunk), lambda: [
        Move(r, chunk, (r,), ((r + 1) % w,), warm=1) for r in range(w)])] * (w - 1)


# ---- recursive halving / doubling (rhd.cuh), power-of-two worlds -------------------------------
def _halving(w, unit, unit_at, dtype, tag):
    """rhd.cuh halving_phase k = 0 .. log2(w) - 1 on units of ``unit`` bytes (unit u at
    ``unit_at(u)`` of a buffer): rank r sums its partial and its partner's (r ^ size, size =
    w >> (k + 1)) over the ``size`` units it keeps, [lo, lo + size) with lo = r & ~(size - 1):
    phase 0 reads both inputs at unit lo, later phases both scratches at lo's place relative
    to the first unit r kept in phase 0 (r & (w / 2)), the partner's written by its previous
    phase (warm); the last phase writes r's output at 0, the others r's scratch."""
    L = w.bit_length() - 1

    def moves(k):
        size = w >> (k + 1)
        out = []
        for r in range(w):
            lo = r & ~(size - 1)
            rel = unit_at(lo) - unit_at(r & (w >> 1))
            src = unit_at(lo) if k == 0 else rel
            dst = 0 if k == L - 1 else rel
            out.append(Move(r, size * unit, (r, r ^ size), (r,), True, warm=2 if k else 0,
                            shifts=move_shifts((src, src), dst, size * unit)))
        return out
    return [_phase((tag, "rhd-halving", w, unit, k, dtype), lambda k=k: moves(k)) for k in range(L)]


def _rs_rhd(w, nbytes, root, ce, dtype):
    cb = _shard_bytes(w, nbytes, dtype)
    return _halving(w, nbytes / w, lambda u: u * cb, dtype, "krs")


def _ag_rhd(w, nbytes, root, ce, dtype):
    # rhd.cuh all_gather_rhd: phase 0 copies the own input into slot r and the partner's
    # (r ^ 1) into its slot, one copy after the other; phase j >= 1 pulls the partner's
    # (r ^ 2^j) 2^j shards, which it gathered by the previous phase, into the same place
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)
    L = w.bit_length() - 1

    def first():
        return [_copy(r, shard, (q,), (r,), 0, q * cb, ce, serial=2) for r in range(w)
                for q in (r, r ^ 1)]

    def pull(j):
        size = 1 << j
        return [_copy(r, size * shard, (r ^ size,), (r,), ((r ^ size) & ~(size - 1)) * cb,
                      ((r ^ size) & ~(size - 1)) * cb, ce, warm=1) for r in range(w)]
    return ([_phase(("kag", "rhd0", w, shard, dtype), first)] +
            [_phase(("kag", "rhd", w, shard, j, dtype), lambda j=j: pull(j)) for j in range(1, L)])


def _ar_rhd(w, nbytes, root, ce, dtype):
    # rhd.cuh all_reduce_rhd: halving over the buffer's w chunks (16-byte aligned: chunk_of),
    # the last phase writing the rank's reduced chunk into its output; then doubling: phase j
    # pulls the partner's 2^j reduced chunks (the previous phase's writes) into the output
    chunk = nbytes / w
    L = w.bit_length() - 1
    steps = _halving(w, chunk, lambda u: 0, dtype, "kar")

    def pull(j):
        size = 1 << j
        return [Move(r, size * chunk, (r ^ size,), (r,), warm=1, dealt=True) for r in range(w)]
    return steps + [_phase(("kar", "rhd-doubling", w, chunk, j), lambda j=j: pull(j))
                    for j in range(L)]


# ---- all-to-all and broadcast ----------------------------------------------------------------
def _a2a_direct(w, nbytes, root, ce, dtype):
    block = nbytes / w
    # rank r copies its block p (at p x count) into slot r of rank p's output, for every p
    # (itself included; the kernel calls the copy routine once per peer, one after another)
    cb = _shard_bytes(w, nbytes, dtype)
    return [_phase(("ka2a", "direct", w, block, ce), lambda: [
        _copy(r, block, (r,), (p,), p * cb, r * cb, ce, serial=1 if ce else w)
        for r in range(w) for p in range(w)], queued=w if ce else None)]


def _bcast_direct(w, nbytes, root, ce, dtype):
    # every rank pulls the root's input into its own output (the root copies locally); the
    # SMs of all ranks read it at once (from memory once), copy engines one copy after another
    return [_phase(("kbc", "direct", w, nbytes, root, ce), lambda: [
        Move(q, nbytes, (root,), (q,), readers=1 if ce else w, dealt=not ce) for q in range(w)])]


# ---- rooted collectives (rooted.cuh) ----------------------------------------------------------
def _reduce_direct(w, nbytes, root, ce, dtype):
    # phase: the root's blocks pull the whole buffer of every rank and write the result; the
    # other ranks' blocks do nothing (on one GPU the root's SMs meet the memory alone)
    return [_phase(("kred", "direct", w, nbytes, root), lambda: [
        Move(root, nbytes, _all(w), (root,), True, active=1)])]


def _reduce_two_shot(w, nbytes, root, ce, dtype):
    # phase: rank r reduces chunk r of every input into chunk r of the root's output
    chunk = nbytes / w
    return [_phase(("kred", "two-shot", w, chunk, root), lambda: [
        Move(r, chunk, _all(w), (root,), True, crossed=True) for r in range(w)])]


def _gather_direct(w, nbytes, root, ce, dtype):
    # phase / ce_phase: rank r stores its shard into slot r of the root's output
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)
    return [_phase(("kga", "direct", w, shard, root, ce), lambda: [
        _copy(r, shard, (r,), (root,), 0, r * cb, ce) for r in range(w)])]


def _scatter_direct(w, nbytes, root, ce, dtype):
    # phase / ce_phase: rank r copies shard r of the root's input into its output
    shard, cb = nbytes / w, _shard_bytes(w, nbytes, dtype)
    return [_phase(("ksc", "direct", w, shard, root, ce), lambda: [
        _copy(r, shard, (root,), (r,), r * cb, 0, ce) for r in range(w)])]


# ---- split sizes (varsize.cuh) -------------------------------------------------------------------------
def _matrix_push(op, w, nbytes, ce, dtype, extra):
    # push_matrix: rank r copies its block for every rank p with S[r][p] > 0, one after another
    # (copy_range: all of its blocks on one block of data, then the next), itself included
    # (block r -> p at its send displacement in r's input, its receive displacement in p's
    # output: varsize.cuh split_matrix)
    e = DTYPES[dtype]
    s = varsize_ops.matrix(op, extra, w, int(nbytes // e))
    sends = [[p for p in range(w) if s[r][p]] for r in range(w)]
    # displacements as running sums (elements, whole numbers), along a row and down a column
    sdisp = [[n * e for n in accumulate(s[r][:-1], initial=0)] for r in range(w)]
    received = [list(accumulate(column[:-1], initial=0)) for column in zip(*s)]
    rdisp = [[received[p][r] * e for p in range(w)] for r in range(w)]

    def moves():
        return [_copy(r, s[r][p] * e, (r,), (p,), sdisp[r][p], rdisp[r][p], ce,
                      serial=1 if ce else len(sends[r]))
                for r in range(w) for p in sends[r]]
    return [_phase(("kv", op, w, digest(s), ce), moves)]


def _a2av_direct(w, nbytes, root, ce, dtype, extra):
    return _matrix_push("all-to-all-v", w, nbytes, ce, dtype, extra)


def _send_recv_direct(w, nbytes, root, ce, dtype, extra):
    return _matrix_push("send-recv", w, nbytes, ce, dtype, extra)


def _agv_direct(w, nbytes, root, ce, dtype, extra):
    # rank r stores its share into its slot of every rank's output: one read, world stores
    # (copy engines: a copy per destination)
    e = DTYPES[dtype]
    c = varsize_ops.shares(extra, w, int(nbytes // e))
    disp = [sum(c[:r]) * e for r in range(w)]    # share r's place in every output
    if ce:
        return [_phase(("kv", "agv-ce", w, tuple(c)), lambda: [
            Move(r, c[r] * e, (r,), (q,)) for r in range(w) if c[r] for q in range(w)],
                       queued=w if any(c) else None)]
    return [_phase(("kv", "agv", w, tuple(c)), lambda: [
        _copy(r, c[r] * e, (r,), _all(w), 0, disp[r], ce) for r in range(w) if c[r]])]


def _rsv_direct(w, nbytes, root, ce, dtype, extra):
    # rank r pulls share r of every rank's input, reduces, writes its output
    # (share r at its displacement in every input, into the start of r's output)
    e = DTYPES[dtype]
    c = varsize_ops.shares(extra, w, int(nbytes // e))
    disp = [sum(c[:r]) * e for r in range(w)]
    return [_phase(("kv", "rsv", w, tuple(c)), lambda: [
        Move(r, c[r] * e, _all(w), (r,), True, shifts=move_shifts((disp[r],) * w, 0, c[r] * e))
        for r in range(w) if c[r]])]


def plain(extra) -> bool:
    """Whether a schedule's extra asks for the plain sum (no reduce op, no epilogue)."""
    return reduce_op_of(extra) == "sum" and epilogue_of(extra) == "none"


def kernel_phases(op: str, algorithm: str, mechanism: str, world: int, nbytes: float,
                  root: int = 0, dtype: str = "bf16", extra=()) -> list[Step] | None:
    """The generated kernel's phases, or None where codegen has no such kernel (then the
    algorithm's transfers are costed as they are). A reduce op or a fused epilogue
    (``extra``) moves what the plain sum moves (collectives/epilogue.cuh;
    docs/decisions/D53.md), its sums through the epilogue routines (Move.epilogue: their extra SM time, D56)."""
    if mechanism == "multimem" or world < 2:
        return None
    return _phases(op, algorithm, mechanism == "copy-engine", world, nbytes, root, dtype, extra)


@functools.lru_cache(maxsize=4)
def _phases(op: str, algorithm: str, ce: bool, world: int, nbytes: float, root: int,
            dtype: str, extra) -> list[Step] | None:
    """kernel_phases, kept for the next call: a search builds the same kernel once per
    candidate (SM counts, peer orders, TMA or registers), and its phases build their moves
    once (576 ranks, every rank to every rank: 331 k of them). A phase repeated in a kernel
    is one Step."""
    row = algorithms.find(op, algorithm)
    if row is None or not row.phases:
        return None     # no such kernel: the algorithm's transfers are costed
    if ce and ("copy-engine" not in row.mechanisms or not plain(extra)):
        return None     # no copy-engine form, or a reduce op no copy engine applies
    build = algorithms.resolve(globals(), row.phases, row, "phase")
    if op in SPLIT_OPS:
        steps = build(world, nbytes, root, ce, dtype, extra)
    else:
        steps = build(world, nbytes, root, ce, dtype)
    cost = epilogue_cost(extra)
    if not cost:
        return steps
    through = {id(s): _through_epilogue(s, cost, DTYPES[dtype]) for s in steps}
    return [through[id(s)] for s in steps]      # a repeated phase stays one Step


def _through_epilogue(step: Step, cost: str, elem_bytes: float) -> Step:
    """``step`` with its sums made by the epilogue routines (pksim_core.mechanisms.epilogue_time_per_B)."""
    def moves():
        return [replace(m, epilogue=cost, elem_bytes=elem_bytes) if m.reduce else m
                for m in step.moves() or ()]
    return Step(step.key + ("epilogue", cost, elem_bytes), step.build, moves, joins=step.joins,
                queued=step.queued)


def bytes_moved(steps: list[Step]) -> tuple[float, float]:
    """(bytes read, bytes written) by every move of ``steps``: the memory traffic."""
    reads = writes = 0.0
    for step in steps:
        for m in step.moves() or ():
            reads += m.payload * len(m.sources)
            writes += m.payload * len(m.dests)
    return reads, writes
