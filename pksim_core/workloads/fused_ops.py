"""Compute + communication operations: what each rank computes and what it sends.

Local shapes as ParallelKittens states them (each rank's own GEMM):
- ``gemm-rs``: A[M x K] @ B[K x N] per rank (K is its shard of the reduction); the
  M x N partial sums are reduce-scattered along M.
- ``gemm-ar``: the same, all-reduced.
- ``ag-gemm``: each rank holds A[M/world x K], all-gathers it to M x K, times B[K x N].
- ``ring-attention``: sequence-parallel attention; K/V blocks pass around the ring.
- ``ulysses-attention``: all-to-all heads <-> sequence, attention, all-to-all back.
- ``moe-dispatch-gemm``: top-k token dispatch by all-to-all, then the expert GEMM.
- ``moe-combine``: expert outputs back by all-to-all, then the weighted sum.

A plan is a list of chunks. Each chunk has, per rank, some tensor work (FLOP, the
bytes it streams through HBM, its GEMM shape for the efficiency model) and the
transfers that carry its data. ``mode`` says how they depend: ``produce`` (a chunk is
sent after it is computed: GEMM then reduce-scatter) or ``consume`` (a chunk is
computed after it arrived: all-gather then GEMM).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from hwmodels.errors import ConfigError, InfeasibleError
from hwmodels.sm import GEMM_TILE
from pksim_core.program import Move, Transfer

FUSED_OPS = ("gemm-rs", "gemm-ar", "ag-gemm", "ring-attention", "ulysses-attention",
             "moe-dispatch-gemm", "moe-combine")
SHAPE_KEYS = {
    "gemm-rs": ("m", "n", "k"), "gemm-ar": ("m", "n", "k"), "ag-gemm": ("m", "n", "k"),
    "ring-attention": ("batch", "heads", "seq", "head_dim"),
    "ulysses-attention": ("batch", "heads", "seq", "head_dim"),
    "moe-dispatch-gemm": ("tokens", "hidden", "experts", "topk", "expert_hidden"),
    "moe-combine": ("tokens", "hidden", "experts", "topk", "expert_hidden"),
}
# The algorithm names a fused op accepts for its communication.
ALGORITHMS = {
    "gemm-rs": ("direct",), "gemm-ar": ("two-shot", "direct", "in-network"),
    "ag-gemm": ("direct",), "ring-attention": ("ring",), "ulysses-attention": ("direct",),
    "moe-dispatch-gemm": ("direct",), "moe-combine": ("direct",),
}
# The collective of each op's "none" baseline: pksim_core.kernel_contract.BASELINE_COLLECTIVE.


@dataclass(frozen=True)
class Work:
    """Tensor work of one rank in one chunk."""
    flop: float
    nbytes: float                     # HBM traffic of the operands and output
    shape: tuple[int, int, int]       # (m, n, k) of the GEMM, for the efficiency model
    kind: str = "gemm"                # gemm | attention


@dataclass(frozen=True)
class Chunk:
    work: tuple[Work, ...]            # one per rank
    transfers: tuple[Transfer, ...]   # where the chunk's data ends (costed when no moves)
    key: tuple                        # traffic pattern + work shape (equal keys cost the same)
    moves: tuple[Move, ...] = ()      # what the communication blocks do, when it differs


@dataclass(frozen=True)
class ChunkPlan:
    mode: str                         # "produce" or "consume"
    chunks: tuple[Chunk, ...]
    total_flop: float                 # per rank, for the compute-only reference
    baseline_bytes: int               # nccl-tests size of the baseline collective
    note: str = ""
    tail: tuple[tuple[Transfer, ...], ...] = ()   # steps after all chunks (second shot, out)


# The largest shape dimension: cuBLAS and the generated kernels index with 32-bit ints.
MAX_DIM = 2 ** 31 - 1


def operand_bytes(op: str, shape: dict[str, int], world: int, elem: float) -> float:
    """The bytes one rank's operands and results occupy (what must fit in its GPU's memory):
    a GEMM op's A (m x k), B (k x n) and C (m x n); an attention op's q, k, v and output of
    its seq / world positions (Ulysses holds as many after its all-to-all); an MoE op's tokens,
    the routed copies it sends, what they become (tokens x topk x expert_hidden, uniform
    routing) and its experts' weights (hidden x expert_hidden each)."""
    if op in ("gemm-rs", "gemm-ar", "ag-gemm"):
        m, n, k = shape["m"], shape["n"], shape["k"]
        return elem * (m * k + k * n + m * n)
    if op in ("ring-attention", "ulysses-attention"):
        return elem * 4 * shape["batch"] * shape["heads"] * shape["seq"] * shape["head_dim"] / world
    t, h, e, k, f = (shape["tokens"], shape["hidden"], shape["experts"], shape["topk"],
                     shape["expert_hidden"])
    return elem * (t * h + t * k * (h + f) + e / world * h * f)


def check_shape(op: str, shape: dict[str, int], world: int,
                option: Callable[[str], str] | None = None) -> None:
    """ConfigError for a shape no run can have (names the key as ``option(key)`` gives
    it: ``--topk`` by default), InfeasibleError for one this world cannot split."""
    name = option or (lambda key: "--" + key.replace("_", "-"))
    for key in SHAPE_KEYS[op]:
        if key not in shape:
            raise ConfigError(f"{op} needs {name(key)}")
        if shape[key] <= 0:
            raise ConfigError(f"{name(key)} must be positive, got {shape[key]}")
        if shape[key] > MAX_DIM:
            raise ConfigError(f"{name(key)} {shape[key]} is more than a kernel indexes "
                              f"(at most {MAX_DIM}, 2^31 - 1)")
    if op in ("gemm-rs", "gemm-ar", "ag-gemm") and shape["m"] < world:
        raise ConfigError(f"{name('m')} {shape['m']} is smaller than the world ({world})")
    if op in ("ring-attention", "ulysses-attention") and shape["seq"] < world:
        raise ConfigError(f"{name('seq')} {shape['seq']} is smaller than the world ({world}): "
                          f"each rank holds seq / world positions")
    if op == "ulysses-attention" and shape["heads"] % world:
        raise InfeasibleError(f"{name('heads')} {shape['heads']}: ulysses needs heads divisible "
                              f"by the world ({world})")
    if op.startswith("moe") and shape["topk"] > shape["experts"]:
        raise ConfigError(f"{name('topk')} {shape['topk']} is more than the "
                          f"{shape['experts']} experts")
    if op.startswith("moe") and shape["experts"] % world:
        raise InfeasibleError(f"{name('experts')} {shape['experts']}: the experts must divide "
                              f"evenly over the world ({world})")


# The fused kernels' persistent GEMM walks its tiles in bands of GEMM_GROUP_M tile rows,
# column by column (pk::gemm::make_raster's default group_m, kernels/gemm/gemm_host.cuh):
# the tiles in flight share a column of B, so B streams from HBM once per band.
GEMM_GROUP_M = 16


def _gemm(m: float, n: int, k: int, elem: float, whole_m: float | None = None,
          write_c: bool = True) -> Work:
    """Tensor work of an (m, n, k) GEMM: its operands read once, its output written once.
    A chunk of a persistent kernel's tile stream (``whole_m`` rows in all) carries the
    whole GEMM's shape (tiles flow from one chunk into the next, so only the whole GEMM's
    last wave is quantised) and its share of the whole GEMM's HBM traffic: its own rows of
    A and C, and rows / whole_m of B's reads, B being read once per band of
    GEMM_GROUP_M x 128 rows. (A chunk does not read all of B: that made 128 chunks of a
    world-8 GEMM stream 128 copies of B.) ``write_c`` False: the epilogue sends C
    elsewhere (store-adds, costed as the chunk's transfers) instead of writing it."""
    if whole_m is None:
        return Work(2.0 * m * n * k, elem * (m * k + k * n + m * n), (max(1, int(round(m))), n, k))
    whole = max(1.0, whole_m)
    bands = math.ceil(whole / (GEMM_GROUP_M * GEMM_TILE[0]))
    b_reads = k * n * bands * m / whole
    return Work(2.0 * m * n * k, elem * (m * k + b_reads + (m * n if write_c else 0.0)),
                (max(1, int(round(whole))), n, k))


MAX_PEER_GROUPS = 16
# Past this many ranks a chunk's group of peer offsets travels as one shift (the group's
# middle offset) carrying the group's bytes: every port still carries the same load, only
# which offsets cross a switch-tier boundary is approximated. It keeps a 576-rank plan at
# 17 x 576 flows instead of 576 x 575.
EXACT_SHIFTS_UP_TO = 128


def _peer_groups(n: int) -> tuple[tuple[int, ...], ...]:
    """Peer offsets 1..n-1 in order, then the own shard (n). Past MAX_PEER_GROUPS peers,
    consecutive offsets are sent together in one chunk (a kernel talks to several peers
    at once), so a 576-rank plan has 17 chunks, not 576."""
    peers = list(range(1, n))
    size = max(1, math.ceil(len(peers) / MAX_PEER_GROUPS))
    groups = tuple(tuple(peers[i:i + size]) for i in range(0, len(peers), size))
    return groups + ((n,),)


def _shifts(world: int, group: tuple[int, ...], nbytes: float, kind: str,
            tag: str) -> tuple[Transfer, ...]:
    """Every rank sends ``nbytes`` to each peer offset of ``group`` (see EXACT_SHIFTS_UP_TO)."""
    if world > EXACT_SHIFTS_UP_TO and len(group) > 1:
        return _shift(world, group[len(group) // 2], nbytes * len(group), kind, tag)
    return tuple(t for d in group for t in _shift(world, d, nbytes, kind, tag))


def _shift(world: int, d: int, nbytes: float, kind: str, tag: str) -> tuple[Transfer, ...]:
    return tuple(Transfer(r, (r + d) % world, nbytes, kind, ((tag, r, d),)) for r in range(world))


def expert_load(experts: int, skew: float) -> list[float]:
    """Fraction of routed tokens each expert receives: uniform, or Zipf(skew)."""
    weights = [1.0 / (i + 1) ** skew for i in range(experts)]
    total = sum(weights)
    return [w / total for w in weights]


def plan(op: str, shape: dict[str, int], world: int, elem: float, algorithm: str,
         chunks_per_peer: int = 1, skew: float = 0.0, store_add: bool = False,
         pull: int = 0) -> ChunkPlan:
    """The chunks of ``op`` on ``world`` ranks; ``chunks_per_peer`` splits each peer's
    part further (finer overlap: tile waves for intra-SM). ``store_add`` (gemm-rs and
    gemm-ar, the intra-SM kernels): the GEMM's epilogue store-adds each finished tile into
    its destinations instead of writing it locally, its own rows included (into its own
    output, gemm-rs; into every rank's output, itself included, gemm-ar). ``pull``
    (gemm-rs and gemm-ar, the inter-SM kernels, kernels/fused/comm.cuh pull_reduce): every
    rank stores its partial tiles locally; the communication blocks of each owner sum a
    tile's world partials into its output rows (gemm-rs) or into those rows of every
    rank's output (gemm-ar, both shots in one pass) once every rank has stored the tile.
    Ranks compute the owners' rows in the order r + 1, r + 2, ..., r, so an owner's tiles
    are complete only once it computes its own rows, the last chunk: that chunk carries
    the whole reduction, as the owners' moves (world sources, 1 or world destinations),
    cut into ``pull`` pieces (the blocks take tiles as they complete, so the reduction
    follows the last chunk's waves of tiles)."""
    check_shape(op, shape, world)
    if algorithm not in ALGORITHMS[op]:
        raise InfeasibleError(f"{op} has no {algorithm!r} communication "
                              f"(it has {', '.join(ALGORITHMS[op])})")
    n, q = world, max(1, chunks_per_peer)
    if op in ("gemm-rs", "gemm-ar"):
        m, nn, k = shape["m"], shape["n"], shape["k"]
        chunks = []
        for group in _peer_groups(n):      # owners r + d; d = n is the own shard
            g = len(group)
            pieces = max(q, pull) if pull and group == (n,) else q
            rows = m / n / pieces
            part = rows * nn * elem
            for _ in range(pieces):
                work = (_gemm(rows * g, nn, k, elem, m, write_c=not store_add),) * n
                pulls: tuple[Move, ...] = ()
                if pull and group != (n,):
                    moves: tuple[Transfer, ...] = ()
                elif pull:
                    everyone = tuple(range(n))
                    moves = _shifts(n, tuple(range(1, n)), part, "reduce", "rs")
                    if op == "gemm-ar":
                        moves += tuple(t for peers in _peer_groups(n) if peers != (n,)
                                       for t in _shifts(n, peers, part, "copy", "ag"))
                    pulls = tuple(Move(r, part, everyone,
                                       everyone if op == "gemm-ar" else (r,), True,
                                       routine="pull")
                                  for r in range(n))
                elif group == (n,) and not store_add:
                    moves = ()
                elif op == "gemm-rs" or algorithm == "two-shot":
                    moves = _shifts(n, group, part, "reduce", "rs")
                elif algorithm == "direct":        # one-shot: store-add into every rank
                    moves = tuple(t for peers in _peer_groups(n)
                                  if peers != (n,) or store_add
                                  for t in _shifts(n, peers, part * g, "reduce", "ar"))
                else:                              # in-network: reduce and multicast the rows
                    moves = tuple(Transfer(r, r, part * g / n, kind, (("ar", r),))
                                  for kind in ("switch-reduce", "multicast") for r in range(n))
                chunks.append(Chunk(work, moves, (op, algorithm, group, rows, store_add, pull),
                                    pulls))
        tail = ()
        if op == "gemm-ar" and algorithm == "two-shot" and not pull:
            # second shot, once every owner holds its reduced rows: store them to all peers
            tail = (tuple(t for peers in _peer_groups(n) if peers != (n,)
                          for t in _shifts(n, peers, m / n * nn * elem, "copy", "ag")),)
        return ChunkPlan("produce", tuple(chunks), 2.0 * m * nn * k, int(m * nn * elem), tail=tail)
    if op == "ag-gemm":
        m, nn, k = shape["m"], shape["n"], shape["k"]
        rows = m / n / q
        chunks = []
        for group in ((0,),) + tuple(g for g in _peer_groups(n) if g != (n,)):
            g = len(group)                 # shards of ranks r - d; d = 0 is the own shard
            for _ in range(q):
                moves = _shifts(n, group, rows * k * elem, "copy", "ag") if group != (0,) else ()
                chunks.append(Chunk((_gemm(rows * g, nn, k, elem, m),) * n, moves,
                                    (op, group, rows)))
        return ChunkPlan("consume", tuple(chunks), 2.0 * m * nn * k, int(m * k * elem))
    if op in ("ring-attention", "ulysses-attention"):
        b, h, s, dd = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
        if op == "ring-attention":
            local = s / n
            flop = 4.0 * b * h * local * local * dd
            kv = 2 * b * h * local * dd * elem
            work = Work(flop, kv + 2 * b * h * local * dd * elem, (int(local), int(local), dd),
                        "attention")
            chunks = [Chunk((work,) * n, () if d == 0 else _shift(n, 1, kv, "copy", "kv"),
                            (op, d == 0)) for d in range(n)]
            return ChunkPlan("consume", tuple(chunks), flop * n, int(kv * n))
        heads = h // n
        flop = 4.0 * b * heads * s * s * dd / q
        qkv = 3 * b * (s / n) * (h / n) * dd * elem / q
        work = Work(flop, 4 * b * heads * s * dd * elem / q, (s, s, dd), "attention")
        chunks = []
        for c in range(q):                 # head groups: all-to-all in, then attention
            moves = tuple(t for e in range(1, n) for t in _shift(n, e, qkv, "copy", f"in{c}"))
            chunks.append(Chunk((work,) * n, moves, (op, "in")))
        out = tuple(t for e in range(1, n) for t in _shift(n, e, qkv / 3 * q, "copy", "out"))
        return ChunkPlan("consume", tuple(chunks), flop * q, int(3 * b * s / n * h * dd * elem),
                    tail=(out,))
    # MoE: tokens routed to experts, E / n experts per rank
    t, hd, e, k, f = (shape["tokens"], shape["hidden"], shape["experts"], shape["topk"],
                      shape["expert_hidden"])
    load = expert_load(e, skew)
    per_rank = [sum(load[i] for i in range(r * e // n, (r + 1) * e // n)) for r in range(n)]
    routed = t * k                         # token copies each rank sends
    bytes_to = [routed * hd * elem * frac for frac in per_rank]
    received = [routed * n * frac for frac in per_rank]          # token copies per rank
    work = tuple(_gemm(received[r], f, hd, elem) for r in range(n))
    moves = tuple(Transfer(src, dst, bytes_to[dst], "copy", ((src, dst),))
                  for src in range(n) for dst in range(n) if src != dst)
    if op == "moe-dispatch-gemm":
        chunks = (Chunk((Work(0.0, 0.0, (1, 1, 1)),) * n, moves, (op, "dispatch", skew)),
                  Chunk(work, (), (op, "gemm", skew)))
        return ChunkPlan("consume", chunks, max(w.flop for w in work), int(routed * hd * elem),
                    note=_skew_note(skew, per_rank))
    back = tuple(Transfer(dst, src, bytes_to[dst], "copy", ((dst, src),))
                 for src in range(n) for dst in range(n) if src != dst)
    combine = Work(2.0 * routed * hd, 2 * routed * hd * elem, (max(1, routed), hd, 1))
    chunks = (Chunk((Work(0.0, 0.0, (1, 1, 1)),) * n, back, (op, "return", skew)),
              Chunk((combine,) * n, (), (op, "combine")))
    return ChunkPlan("consume", chunks, combine.flop, int(routed * hd * elem),
                note=_skew_note(skew, per_rank))


def _skew_note(skew: float, per_rank: list[float]) -> str:
    if skew <= 0:
        return ""
    busiest = max(per_rank) * len(per_rank)
    return (f"Zipf routing (skew {skew:g}): ranks are not symmetric; every rank is "
            f"simulated with its own load (busiest rank gets {busiest:.2f}x the mean)")
