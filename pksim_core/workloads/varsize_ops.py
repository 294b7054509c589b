"""Collectives with split sizes: all-to-all-v, all-gather-v, reduce-scatter-v, and send-recv.

Their sizes are not one number. A schedule carries them in ``Schedule.extra``, as text:

* ``splits``: elements. all-to-all-v: world x world, rows separated by ``;`` (row r: what rank
  r sends to ranks 0, 1, ...); all-gather-v and reduce-scatter-v: world shares, rank r's first.
  Without it, the op splits its ``bytes`` evenly (the plain collective's sizes).
* ``peers`` (send-recv): the pairs that exchange one message of ``bytes`` each, as offsets
  (``+1`` a ring shift: rank r sends to r + 1 mod world; ``+1,-1`` a neighbour / halo
  exchange) or as explicit pairs (``0>4,1>5``: rank 0 sends to rank 4, ...); or, instead,
  ``splits`` as all-to-all-v's matrix (messages of any sizes: a program's batch,
  pksim_core.programs.costs.kernel_call). The kernel takes the matrix either way.

Buffers are packed as torch.distributed lays them out (and kernels/collectives/varsize.cuh
moves them): a rank's blocks follow each other in rank order. ``buffer_elems`` is what the
kernels take as ``count`` (every rank's input and output, in elements).

The semantic programs (which data ends where) live here; pksim_core.workloads.phases has the
generated kernels' moves.
"""
from __future__ import annotations

from typing import Hashable

from hwmodels.errors import ConfigError
from pksim_core.kernel_contract import SPLIT_OPS
from pksim_core.program import Step, Transfer, digest

MATRIX_OPS = ("all-to-all-v", "send-recv")     # world x world sizes
VECTOR_OPS = ("all-gather-v", "reduce-scatter-v")  # world shares
# The plain collective each -v form generalises (its sizes with even splits).
PLAIN = {"all-to-all-v": "all-to-all", "all-gather-v": "all-gather",
         "reduce-scatter-v": "reduce-scatter"}


def _ints(text: str, what: str) -> list[int]:
    out = []
    for item in text.replace(" ", "").split(","):
        try:
            value = int(item)
        except ValueError:
            raise ConfigError(f"{what}: {item!r} is not a whole number") from None
        if value < 0:
            raise ConfigError(f"{what}: {value} is negative")
        out.append(value)
    return out


def parse_splits(op: str, text: str, world: int, what: str = "--splits") -> str:
    """The canonical ``splits`` text of ``op`` at ``world`` (ConfigError naming ``what``)."""
    if op not in VECTOR_OPS + ("all-to-all-v",):
        raise ConfigError(f"{what}: {op} takes no split sizes (only "
                          f"{', '.join(VECTOR_OPS + ('all-to-all-v',))})")
    if op in VECTOR_OPS:
        values = _ints(text, what)
        if len(values) != world:
            raise ConfigError(f"{what}: {op} takes {world} shares (one per rank), got {len(values)}")
        if not any(values):
            raise ConfigError(f"{what}: every share is 0")
        return ",".join(map(str, values))
    rows = [r for r in text.replace(" ", "").split(";") if r]
    flat = [v for r in rows for v in _ints(r, what)]
    if len(flat) != world * world:
        raise ConfigError(f"{what}: all-to-all-v takes world x world = {world * world} sizes "
                          f"(rows separated by ';'), got {len(flat)}")
    if not any(flat):
        raise ConfigError(f"{what}: every size is 0")
    return ";".join(",".join(map(str, flat[r * world:(r + 1) * world])) for r in range(world))


def parse_peers(text: str, world: int, what: str = "--peers") -> str:
    """The canonical ``peers`` text of a send-recv: ``+1,-1`` offsets or ``0>4,1>5`` pairs."""
    items = [x for x in text.replace(" ", "").split(",") if x]
    if not items:
        raise ConfigError(f"{what}: no pairs given")
    if all(">" in x for x in items):
        pairs = []
        for x in items:
            a, _, b = x.partition(">")
            try:
                src, dst = int(a), int(b)
            except ValueError:
                raise ConfigError(f"{what}: {x!r} is not SRC>DST with whole ranks") from None
            for r in (src, dst):
                if not 0 <= r < world:
                    raise ConfigError(f"{what}: rank {r} in {x!r} is not a rank of world {world}")
            if src == dst:
                raise ConfigError(f"{what}: {x!r} sends rank {src} to itself; a send-recv "
                                  f"moves data between two ranks")
            pairs.append(f"{src}>{dst}")
        return ",".join(pairs)
    offsets = []
    for x in items:
        try:
            offsets.append(int(x))
        except ValueError:
            raise ConfigError(f"{what}: {x!r} is neither an offset (+1, -1) nor a pair "
                              f"(SRC>DST); do not mix them") from None
    for x, o in zip(items, offsets):
        if o % world == 0:
            raise ConfigError(f"{what}: offset {x} sends every rank to itself (world {world}); "
                              f"a send-recv moves data between two ranks")
    return ",".join(f"{o:+d}" for o in offsets)


def pairs(peers: str, world: int) -> list[tuple[int, int]]:
    """The (source, destination) of every message of a send-recv, in order."""
    items = peers.split(",")
    if all(">" in x for x in items):
        return [(int(a), int(b)) for a, _, b in (x.partition(">") for x in items)]
    return [(r, (r + int(o)) % world) for o in items for r in range(world)]


def matrix(op: str, extra, world: int, elems: int) -> list[list[int]]:
    """S[r][p]: elements rank r sends to rank p (all-to-all-v, send-recv). ``elems``: the
    schedule's bytes in elements (a send-recv's message; an all-to-all-v's even rank total)."""
    e = dict(extra)
    if op == "send-recv" and "splits" not in e:
        s = [[0] * world for _ in range(world)]
        for src, dst in pairs(e.get("peers", "+1"), world):
            s[src][dst] += elems
        return s
    if "splits" in e:
        return [[int(v) for v in row.split(",")] for row in e["splits"].split(";")]
    return [[elems // world] * world for _ in range(world)]


def shares(extra, world: int, elems: int) -> list[int]:
    """c[r]: rank r's share (all-gather-v, reduce-scatter-v); even from ``elems`` (the whole
    gathered or scattered buffer) without splits."""
    e = dict(extra)
    if "splits" in e:
        return [int(v) for v in e["splits"].split(",")]
    return [elems // world] * world


def buffer_elems(op: str, extra, world: int, elems: int) -> int:
    """Every rank's input and output buffer in elements (the kernels' count): the largest
    rank's sends or receives (matrix ops), the shares' sum (vector ops)."""
    if op in MATRIX_OPS:
        s = matrix(op, extra, world, elems)
        return max(max(sum(row) for row in s), max(sum(s[r][p] for r in range(world))
                                                   for p in range(world)))
    return sum(shares(extra, world, elems))


def split_list(op: str, extra, world: int, elems: int) -> list[int]:
    """pkc_args::splits for the kernels: the matrix row-major, or the shares."""
    if op in MATRIX_OPS:
        return [v for row in matrix(op, extra, world, elems) for v in row]
    return shares(extra, world, elems)


def schedule_bytes(op: str, extra, world: int, elem_bytes: float) -> int:
    """The schedule's ``bytes`` for an op given its splits: the per-rank buffer."""
    return int(buffer_elems(op, extra, world, 0) * elem_bytes)


# ---- semantics -----------------------------------------------------------------------------------

def _messages(op: str, extra, world: int, elems: int) -> list[tuple[int, int, int, Hashable]]:
    """(source, destination, elements, block) of everything the op moves between ranks."""
    if op == "send-recv" and "splits" not in dict(extra):
        return [(src, dst, elems, ("m", i))
                for i, (src, dst) in enumerate(pairs(dict(extra).get("peers", "+1"), world))]
    if op in MATRIX_OPS:
        s = matrix(op, extra, world, elems)
        return [(r, p, s[r][p], (r, p)) for r in range(world) for p in range(world) if s[r][p]]
    c = shares(extra, world, elems)
    if op == "all-gather-v":
        return [(r, q, c[r], r) for r in range(world) for q in range(world) if c[r]]
    return [(r, q, c[q], q) for r in range(world) for q in range(world) if c[q]]  # reduce-scatter-v


def initial_state(op: str, extra, world: int, elems: int) -> dict:
    if op == "reduce-scatter-v":
        c = shares(extra, world, elems)
        return {(r, q): frozenset({r}) for r in range(world) for q in range(world) if c[q]}
    return {(src, block): frozenset({src}) for src, _, _, block in _messages(op, extra, world, elems)}


def expected_state(op: str, extra, world: int, elems: int) -> dict:
    if op == "reduce-scatter-v":
        c = shares(extra, world, elems)
        return {(q, q): frozenset(range(world)) for q in range(world) if c[q]}
    return {(dst, block): frozenset({src}) for src, dst, _, block in _messages(op, extra, world, elems)}


def semantic_steps(op: str, algorithm: str, world: int, extra, elems: int,
                   elem_bytes: float) -> list[Step]:
    """The one step of the direct algorithm: every message between distinct ranks at once
    (a rank's own block stays where it is, or is reduced into its own output)."""
    if op not in SPLIT_OPS:
        raise KeyError(op)
    kind = "reduce" if op == "reduce-scatter-v" else "copy"
    moved = tuple((src, dst, n, block) for src, dst, n, block in _messages(op, extra, world, elems)
                  if src != dst and n)

    def build() -> list[Transfer]:
        return [Transfer(src, dst, n * elem_bytes, kind, (block,)) for src, dst, n, block in moved]
    return [Step((op, algorithm, world, digest([(s, d, n) for s, d, n, _ in moved])), build,
                 kinds=(kind,))]
