"""Collectives: size conventions (as nccl-tests), semantics, and their algorithms.

``nbytes`` follows nccl-tests: the per-rank buffer for all-reduce, broadcast and
reduce; the total received per rank for all-gather and gather; the total sent per
rank for reduce-scatter, scatter and all-to-all. Blocks are the per-rank shards
(``nbytes / world``) unless the op works on the whole buffer. The ops with split sizes
(all-to-all-v, all-gather-v, reduce-scatter-v, send-recv) take theirs from the schedule's
extra (pksim_core.workloads.varsize_ops); their ``nbytes`` is every rank's buffer (send-recv: one
message).
"""
from __future__ import annotations

import functools
from typing import Callable, Hashable

from hwmodels.errors import InfeasibleError
from pksim_core import algorithms
from pksim_core.kernel_contract import SPLIT_OPS
from pksim_core.program import StepProgram, Step, Transfer
from pksim_core.schedule import DTYPES
from pksim_core.workloads import varsize_ops
from pksim_core.workloads.phases import kernel_phases

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "broadcast", "reduce", "gather", "scatter") + SPLIT_OPS
REDUCING = ("all-reduce", "reduce-scatter", "reduce", "reduce-scatter-v")


def busbw_factor(op: str, world: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw x factor."""
    n = world
    if op == "all-reduce":
        return 2 * (n - 1) / n
    if op in ("all-gather", "reduce-scatter", "all-to-all", "gather", "scatter") \
            or op in varsize_ops.PLAIN:
        return (n - 1) / n
    return 1.0


# ---- semantics: initial placement and the expected result ------------------------
# The reduce's buffer is cut into world chunks ("x", b): the two-shot reduces chunk b on rank b.
def _chunks(n: int) -> tuple:
    return tuple(("x", b) for b in range(n))


def initial_state(op: str, n: int, root: int = 0, extra=(), elems: int | None = None
                  ) -> dict[tuple[int, Hashable], frozenset]:
    """``extra``, ``elems`` (the schedule's bytes in elements): the ops with split sizes
    (default: even, non-empty)."""
    if op in SPLIT_OPS:
        return varsize_ops.initial_state(op, extra, n, n * n if elems is None else elems)
    if op == "all-to-all":
        return {(q, (q, r)): frozenset({q}) for q in range(n) for r in range(n)}
    if op in ("all-gather", "gather"):
        return {(r, r): frozenset({r}) for r in range(n)}
    if op == "scatter":
        return {(root, b): frozenset({root}) for b in range(n)}
    if op == "broadcast":
        return {(root, "x"): frozenset({root})}
    if op == "reduce":
        return {(r, x): frozenset({r}) for r in range(n) for x in _chunks(n)}
    return {(r, b): frozenset({r}) for r in range(n) for b in range(n)}  # AR, RS


def expected_state(op: str, n: int, root: int = 0, extra=(), elems: int | None = None
                   ) -> dict[tuple[int, Hashable], frozenset]:
    """The (rank, block) entries the op must produce; other entries are scratch."""
    if op in SPLIT_OPS:
        return varsize_ops.expected_state(op, extra, n, n * n if elems is None else elems)
    everyone = frozenset(range(n))
    if op == "all-reduce":
        return {(r, b): everyone for r in range(n) for b in range(n)}
    if op == "reduce-scatter":
        return {(r, r): everyone for r in range(n)}
    if op == "all-gather":
        return {(r, b): frozenset({b}) for r in range(n) for b in range(n)}
    if op == "gather":
        return {(root, b): frozenset({b}) for b in range(n)}
    if op == "scatter":
        return {(r, r): frozenset({root}) for r in range(n)}
    if op == "all-to-all":
        return {(r, (q, r)): frozenset({q}) for r in range(n) for q in range(n)}
    if op == "broadcast":
        return {(r, "x"): frozenset({root}) for r in range(n)}
    if op == "reduce":
        return {(root, x): everyone for x in _chunks(n)}
    raise KeyError(op)


# ---- building blocks ---------------------------------------------------------------
def _ring(n: int, steps: int, shard: float, kind: str, block_of: Callable[[int, int], Hashable],
          tag: str, ranks: list[int] | None = None) -> list[Step]:
    """``steps`` ring steps over ``ranks`` (default all): position i sends to i+1."""
    ranks = ranks if ranks is not None else list(range(n))
    m = len(ranks)
    out = []
    for s in range(steps):
        def build(s: int = s) -> list[Transfer]:
            return [Transfer(ranks[i], ranks[(i + 1) % m], shard, kind, (block_of(i, s),))
                    for i in range(m)]
        out.append(Step((tag, "shift1", m, shard, kind), build, kinds=(kind,)))
    return out


def _direct(n: int, shard: float, kind: str, block_of: Callable[[int, int], Hashable],
            tag: str, sequential: bool = False) -> list[Step]:
    """Every rank r sends ``block_of(r, q)`` to every other rank q: one step, or
    ``n - 1`` steps of one peer each (r sends to r + s + 1) when sequential."""
    if sequential:
        out = []
        for s in range(n - 1):
            def build(s: int = s) -> list[Transfer]:
                return [Transfer(r, (r + s + 1) % n, shard, kind, (block_of(r, (r + s + 1) % n),))
                        for r in range(n)]
            out.append(Step((tag, "shift", s + 1, n, shard, kind), build, kinds=(kind,)))
        return out

    def build_all() -> list[Transfer]:
        return [Transfer(r, (r + d) % n, shard, kind, (block_of(r, (r + d) % n),))
                for r in range(n) for d in range(1, n)]
    return [Step((tag, "all-pairs", n, shard, kind), build_all, kinds=(kind,))]


def _halving(n: int, shard: float, tag: str) -> list[Step]:
    """Recursive halving reduce-scatter over blocks 0..n-1: rank r ends with block r."""
    steps = []
    d = n // 2
    while d >= 1:
        def build(d: int = d) -> list[Transfer]:
            out = []
            for r in range(n):
                p = r ^ d
                # r still holds blocks whose bits above d's position match r's; it sends p's
                # half: those whose bit d is p's, d blocks in a row (a range: 4,096 ranks
                # would otherwise list 16.7 M blocks per step)
                first = (r & ~(2 * d - 1)) | (p & d)
                out.append(Transfer(r, p, shard * d, "reduce", range(first, first + d)))
            return out
        steps.append(Step((tag, "xor", d, n, shard), build, kinds=("reduce",)))
        d //= 2
    return steps


def _doubling(n: int, shard: float, tag: str) -> list[Step]:
    """Recursive doubling all-gather: rank r starts with block r, ends with all."""
    steps = []
    d = 1
    while d < n:
        def build(d: int = d) -> list[Transfer]:
            out = []
            for r in range(n):
                first = r & ~(d - 1)    # the d blocks whose bits above d's match r's
                out.append(Transfer(r, r ^ d, shard * d, "copy", range(first, first + d)))
            return out
        steps.append(Step((tag, "xor", d, n, shard), build, kinds=("copy",)))
        d *= 2
    return steps


def _switch(n: int, shard: float, kind: str, tag: str, ranks: list[int] | None = None,
            block_of: Callable[[int], Hashable] = lambda r: r) -> list[Step]:
    ranks = ranks if ranks is not None else list(range(n))

    def build() -> list[Transfer]:
        return [Transfer(r, r, shard, kind, (block_of(r),)) for r in ranks]
    return [Step((tag, kind, len(ranks), shard), build, kinds=(kind,))]


# ---- algorithms per op -------------------------------------------------------------
def build_program(op: str, algorithm: str, n: int, nbytes: float, root: int = 0,
                  sequential: bool = False, domains: int = 1,
                  mechanism: str | None = None, dtype: str = "bf16", extra=()) -> StepProgram:
    """The steps of ``algorithm`` for ``op`` on ``n`` ranks (``domains`` equal NVLink
    domains of consecutive ranks); with the ``mechanism`` of a generated kernel, also its
    phases (pksim_core.workloads.phases). ``extra``: the schedule's extra (split sizes, send-recv's
    peers). Raises InfeasibleError for combinations that do not exist, with the reason."""
    program = StepProgram(_semantic_steps(op, algorithm, n, nbytes, root, sequential, domains,
                                      dtype, extra), n)
    if mechanism is not None and domains == 1:
        program.phases = kernel_phases(op, algorithm, mechanism, n, nbytes, root, dtype, extra)
    return program


@functools.lru_cache(maxsize=4)
def _semantic_steps(op: str, algorithm: str, n: int, nbytes: float, root: int,
                    sequential: bool, domains: int, dtype: str = "bf16", extra=()) -> list[Step]:
    """The steps of build_program, kept for the next call (a search builds the same
    program once per candidate); their transfers are built when first asked for."""
    return _semantic_program(op, algorithm, n, nbytes, root, sequential, domains, dtype,
                             extra).steps


def _semantic_program(op: str, algorithm: str, n: int, nbytes: float, root: int,
                      sequential: bool, domains: int, dtype: str = "bf16", extra=()) -> StepProgram:
    if op not in COLLECTIVES:
        raise InfeasibleError(f"unknown collective {op!r} (known: {', '.join(COLLECTIVES)})")
    if n == 1:
        return StepProgram([], 1)
    row = algorithms.find(op, algorithm)
    if row is None:
        raise _no_such_algorithm(op, algorithm)
    build = algorithms.resolve(globals(), row.transfers, row, "transfer")
    if op in SPLIT_OPS:
        return StepProgram(build(op, algorithm, n, nbytes, dtype, extra), n)
    shard = nbytes / n
    if row.scale_out:
        if domains < 2 or n % domains:
            raise InfeasibleError(f"hierarchical {op} needs ranks spread evenly over 2 or more "
                                  f"domains (world {n}, domains {domains})")
        return StepProgram(build(n, domains, shard), n)
    if row.power_of_two and n & (n - 1):
        raise InfeasibleError(f"recursive halving/doubling needs a power-of-two world, got {n}")
    return StepProgram(build(n, nbytes, shard, root, sequential), n)


def _no_such_algorithm(op: str, algorithm: str) -> InfeasibleError:
    if op in SPLIT_OPS or algorithm != "hierarchical":
        have = sorted(r.algorithm for r in algorithms.of_op(op) if not r.scale_out)
        return InfeasibleError(f"{op} has no {algorithm!r} algorithm "
                               f"(available: {', '.join(have)})")
    have = [r.op for r in algorithms.ROWS if r.scale_out]
    return InfeasibleError(f"{op} has no hierarchical algorithm (available for {', '.join(have)})")


def _sized_direct(op, algorithm, n, nbytes, dtype, extra):
    elem = DTYPES[dtype]
    return varsize_ops.semantic_steps(op, algorithm, n, extra, int(nbytes // elem), elem)


def _ar_ring(n, nbytes, shard, root, seq):
    return (_ring(n, n - 1, shard, "reduce", lambda i, s: (i - s) % n, "rs")
            + _ring(n, n - 1, shard, "copy", lambda i, s: (i + 1 - s) % n, "ag"))


def _ar_direct(n, nbytes, shard, root, seq):
    # one-shot: every rank store-adds all its blocks into every peer
    def build() -> list[Transfer]:
        return [Transfer(r, (r + d) % n, nbytes, "reduce", tuple(range(n)))
                for r in range(n) for d in range(1, n)]
    if seq:
        return [Step(("ar1", "shift", d, n, nbytes), lambda d=d: [
            Transfer(r, (r + d) % n, nbytes, "reduce", tuple(range(n))) for r in range(n)],
            kinds=("reduce",)) for d in range(1, n)]
    return [Step(("ar1", "all-pairs", n, nbytes), build, kinds=("reduce",))]


def _ar_two_shot(n, nbytes, shard, root, seq):
    return (_direct(n, shard, "reduce", lambda r, q: q, "rs", seq)
            + _direct(n, shard, "copy", lambda r, q: r, "ag", seq))


def _ar_rhd(n, nbytes, shard, root, seq):
    return _halving(n, shard, "rs") + _doubling(n, shard, "ag")


def _ar_in_network(n, nbytes, shard, root, seq):
    return _switch(n, shard, "switch-reduce", "rs") + _switch(n, shard, "multicast", "ag")


def _ar_tree(n, nbytes, shard, root, seq):
    # a chain reduce into the root, then a chain broadcast back (NCCL's tree inside a node)
    blocks = tuple(range(n))
    return (_chain(n, nbytes, root, "reduce", True, blocks)
            + _chain(n, nbytes, root, "copy", False, blocks))


def _ag_ring(n, nbytes, shard, root, seq):
    return _ring(n, n - 1, shard, "copy", lambda i, s: (i - s) % n, "ag")


def _ag_direct(n, nbytes, shard, root, seq):
    return _direct(n, shard, "copy", lambda r, q: r, "ag", seq)


def _rs_ring(n, nbytes, shard, root, seq):
    return _ring(n, n - 1, shard, "reduce", lambda i, s: (i - s - 1) % n, "rs")


def _rs_direct(n, nbytes, shard, root, seq):
    return _direct(n, shard, "reduce", lambda r, q: q, "rs", seq)


def _a2a_direct(n, nbytes, shard, root, seq):
    return _direct(n, shard, "copy", lambda r, q: (r, q), "a2a", seq)


def _a2a_pairwise(n, nbytes, shard, root, seq):
    return _direct(n, shard, "copy", lambda r, q: (r, q), "a2a", True)


def _chain(n, nbytes, root, kind, towards_root, blocks=("x",)):
    """A chain through all ranks starting (broadcast) or ending (reduce) at the root."""
    order = [(root + i) % n for i in range(n)]
    if towards_root:
        order = order[::-1]
    steps = []
    for s in range(n - 1):
        src, dst = order[s], order[s + 1]
        steps.append(Step(("chain", kind, src, dst, nbytes), lambda src=src, dst=dst: [
            Transfer(src, dst, nbytes, kind, blocks)], kinds=(kind,)))
    return steps


def _bcast_direct(n, nbytes, shard, root, seq):
    def build() -> list[Transfer]:
        return [Transfer(root, q, nbytes, "copy", ("x",)) for q in range(n) if q != root]
    return [Step(("bcast", "fan-out", n, nbytes), build, kinds=("copy",))]


def _bcast_ring(n, nbytes, shard, root, seq):
    return _chain(n, nbytes, root, "copy", towards_root=False)


def _bcast_in_network(n, nbytes, shard, root, seq):
    return _switch(n, nbytes, "multicast", "bcast", [root], lambda r: "x")


def _reduce_direct(n, nbytes, shard, root, seq):
    def build() -> list[Transfer]:
        return [Transfer(q, root, nbytes, "reduce", _chunks(n)) for q in range(n) if q != root]
    return [Step(("reduce", "fan-in", n, nbytes), build, kinds=("reduce",))]


def _reduce_two_shot(n, nbytes, shard, root, seq):
    # rank b reduces chunk b of every rank's input (a reduce-scatter), then stores it into the
    # root's output (a gather; the root's own chunk stays)
    def gather() -> list[Transfer]:
        return [Transfer(b, root, shard, "copy", (("x", b),)) for b in range(n) if b != root]
    return (_direct(n, shard, "reduce", lambda r, q: ("x", q), "rs", seq)
            + [Step(("reduce", "gather", n, shard), gather, kinds=("copy",))])


def _reduce_ring(n, nbytes, shard, root, seq):
    return _chain(n, nbytes, root, "reduce", True, _chunks(n))


def _reduce_in_network(n, nbytes, shard, root, seq):
    return [Step(("reduce", "switch-reduce", 1, nbytes), lambda: [
        Transfer(root, root, nbytes, "switch-reduce", _chunks(n))], kinds=("switch-reduce",))]


def _gather_direct(n, nbytes, shard, root, seq):
    def build() -> list[Transfer]:
        return [Transfer(q, root, shard, "copy", (q,)) for q in range(n) if q != root]
    return [Step(("gather", "fan-in", n, shard), build, kinds=("copy",))]


def _scatter_direct(n, nbytes, shard, root, seq):
    def build() -> list[Transfer]:
        return [Transfer(root, q, shard, "copy", (q,)) for q in range(n) if q != root]
    return [Step(("scatter", "fan-out", n, shard), build, kinds=("copy",))]


def _hier_ar(n: int, D: int, shard: float) -> list[Step]:
    """Reduce-scatter inside each domain (ring), all-reduce across domains between
    ranks of the same local index (ring), all-gather inside each domain (ring).
    Block b = j * D + k: super-block j (local index) split into D sub-blocks."""
    m = n // D
    sup = lambda j: range(j * D, j * D + D)   # (a range: 512 domains, 512 blocks each)
    steps = []
    for s in range(m - 1):
        steps.append(Step(("h-rs-in", m, D, shard), lambda s=s: [
            Transfer(d * m + i, d * m + (i + 1) % m, shard * D, "reduce", sup((i - s) % m))
            for d in range(D) for i in range(m)]))
    for phase, kind, off in (("h-rs-x", "reduce", 0), ("h-ag-x", "copy", 1)):
        for s in range(D - 1):
            steps.append(Step((phase, m, D, shard), lambda s=s, kind=kind, off=off: [
                Transfer(d * m + i, ((d + 1) % D) * m + i, shard, kind,
                         (((i + 1) % m) * D + (d + off - s) % D,))
                for d in range(D) for i in range(m)]))
    for s in range(m - 1):
        steps.append(Step(("h-ag-in", m, D, shard), lambda s=s: [
            Transfer(d * m + i, d * m + (i + 1) % m, shard * D, "copy", sup((i + 1 - s) % m))
            for d in range(D) for i in range(m)]))
    return steps


def _hier_ag(n: int, D: int, shard: float) -> list[Step]:
    """All-gather across domains (ring among equal local indices), then inside."""
    m = n // D
    steps = []
    for s in range(D - 1):
        steps.append(Step(("h-ag-x", m, D, shard), lambda s=s: [
            Transfer(d * m + i, ((d + 1) % D) * m + i, shard, "copy", (((d - s) % D) * m + i,))
            for d in range(D) for i in range(m)]))
    for s in range(m - 1):
        steps.append(Step(("h-ag-in", m, D, shard), lambda s=s: [
            Transfer(d * m + i, d * m + (i + 1) % m, shard * D, "copy",
                     range((i - s) % m, n, m))          # block e * m + (i - s) % m of each e
            for d in range(D) for i in range(m)]))
    return steps


def _hier_rs(n: int, D: int, shard: float) -> list[Step]:
    """Reduce-scatter inside each domain on super-blocks, then across domains."""
    m = n // D
    steps = []
    for s in range(m - 1):
        steps.append(Step(("h-rs-in", m, D, shard), lambda s=s: [
            Transfer(d * m + i, d * m + (i + 1) % m, shard * D, "reduce",
                     range((i - s - 1) % m, n, m))      # block e * m + (i - s - 1) % m of each e
            for d in range(D) for i in range(m)]))
    for s in range(D - 1):
        steps.append(Step(("h-rs-x", m, D, shard), lambda s=s: [
            Transfer(d * m + i, ((d + 1) % D) * m + i, shard, "reduce",
                     (((d - s - 1) % D) * m + i,))
            for d in range(D) for i in range(m)]))
    return steps


def _ag_rhd(n, nbytes, shard, root, seq):
    return _doubling(n, shard, "ag")


def _ag_in_network(n, nbytes, shard, root, seq):
    return _switch(n, shard, "multicast", "ag")


def _rs_rhd(n, nbytes, shard, root, seq):
    return _halving(n, shard, "rs")


def _rs_in_network(n, nbytes, shard, root, seq):
    return _switch(n, shard, "switch-reduce", "rs")


def algorithms_for(op: str) -> list[str]:
    """The algorithms the model has for ``op`` (pksim_core.algorithms), sorted."""
    return sorted(r.algorithm for r in algorithms.of_op(op))
