"""The fused part of a validation suite: which GEMM + communication kernels (kernels/fused,
codegen/fused.py) ``pksim validate`` runs, and their candidate schedules.

The ``[fused]`` table of a suite file (``validation/suites/suite.py``)::

    [fused]
    ops = ["gemm-rs", "ag-gemm", "gemm-ar"]
    overlaps = ["none", "intra-sm", "inter-sm"]     # none: our GEMM per rank, then the collective
    mechanisms = ["tma", "register"]                # optional: every runnable one
    shapes = [{mnk = "8192x8192x2048", worlds = [2, 4, 8]},   # m x n x k per rank
              {mnk = "4096x4096x4096", worlds = [4]}]
    comm_blocks_total = [16, 32]    # inter-SM blocks per rank = max(1, total // world)
    sequential = "fewest"           # also the sequential tile order: "no", "fewest", "all"
    [fused.timing]
    iters = 20
    warmup = 3
    interleave = false              # true: time a group's candidates call by call in turn
    idle = 4                        # each call from an idle GPU: before it, idle x the
                                    # previous call's time (0: back to back)

A group is one (op, m, n, k, world); its candidates are "none" (the unfused baseline of
validation/run/fused.py) and every runnable fused variant
(``validation/suites/fused_kernels.VARIANTS``: op, overlap, algorithm, mechanism) of the
listed ops, overlaps and mechanisms: intra-SM once, inter-SM once per communication block
count in the staggered tile order, and in the sequential order for the fewest blocks
(``sequential = "fewest"``, as validation/data/cited/h200-fused-2026-12-02-run2.jsonl ran
them) or for every count. Case ids are those of
``validation/suites/fused_kernels.fused_case`` / ``none_case``, so measurements of the fused
runner's own case list (validation/prepare/fused.py) join with a suite's cases. Shapes
follow kernels/fused/abi.h: N and K multiples of 8, M at least the world.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hwmodels.errors import ConfigError
from pksim_core.kernel_contract import FUSED_MAX_RANKS
from validation.suites.fused_kernels import VARIANTS, fused_case, none_case

OPS = ("gemm-rs", "ag-gemm", "gemm-ar")
OVERLAPS = ("none", "intra-sm", "inter-sm")
SEQUENTIAL = ("no", "fewest", "all")
KEYS = {"ops", "overlaps", "mechanisms", "shapes", "comm_blocks_total", "sequential", "timing"}
SHAPE_KEYS = {"mnk", "worlds"}
TIMING_KEYS = {"iters", "warmup", "interleave", "idle"}
MAX_WORLD = FUSED_MAX_RANKS
_MNK = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*$")


def variants() -> list[tuple[str, str, str, str]]:
    """(op, overlap, algorithm, mechanism) of every runnable fused variant."""
    return list(VARIANTS)


@dataclass(frozen=True)
class FusedCandidate:
    """One schedule of a fused group: a variant (or "none"), comm blocks and tile order."""
    op: str
    overlap: str                 # none, intra-sm, inter-sm
    algorithm: str               # "" for none
    mechanism: str               # "" for none
    world: int
    m: int
    n: int
    k: int
    comm_blocks: int = 0         # inter-SM: per rank; 0 otherwise (the generated default)
    tile_order: int = -1         # -1 generated default, 0 staggered, 1 sequential

    @property
    def group(self) -> tuple[str, int, int, int, int]:
        return (self.op, self.m, self.n, self.k, self.world)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.world, self.m, self.n, self.k)

    def case(self, libs: dict[str, str], seed: int, iters: int, warmup: int) -> dict:
        """The fused runner's case (same id and fields as its own list, validation/prepare/fused.py)."""
        if self.overlap == "none":
            return none_case(libs, self.op, self.shape, seed=seed, iters=iters, warmup=warmup)
        return fused_case(libs, (self.op, self.overlap, self.algorithm, self.mechanism),
                          self.shape, self.comm_blocks, self.tile_order, seed=seed, iters=iters,
                          warmup=warmup)


@dataclass(frozen=True)
class FusedPart:
    ops: tuple[str, ...]
    overlaps: tuple[str, ...]
    mechanisms: tuple[str, ...]
    shapes: tuple[tuple[int, int, int, int], ...]      # (world, m, n, k), in file order
    comm_blocks_total: tuple[int, ...] = (16, 32)
    sequential: str = "fewest"
    iters: int = 20
    warmup: int = 3
    interleave: bool = False
    idle: float = 0.0

    @property
    def worlds(self) -> tuple[int, ...]:
        return tuple(sorted({w for w, *_ in self.shapes}))

    def variants(self) -> list[tuple[str, str, str, str]]:
        return [v for v in variants() if v[0] in self.ops and v[1] in self.overlaps
                and v[3] in self.mechanisms]

    def comm_counts(self, world: int) -> list[int]:
        return sorted({max(1, t // world) for t in self.comm_blocks_total})

    def candidates(self) -> list[FusedCandidate]:
        """Every candidate, shape by shape (file order), variants in the fused runner's order, the
        op's "none" after its variants' shapes as validation/prepare/fused.py lists them."""
        out = []
        for (w, m, n, k) in self.shapes:
            for op, ov, alg, mech in self.variants():
                combos = [(0, -1)]
                if ov == "inter-sm":
                    counts = self.comm_counts(w)
                    seq = {"no": [], "fewest": counts[:1], "all": counts}[self.sequential]
                    combos = [(c, 0) for c in counts] + [(c, 1) for c in seq]
                out += [FusedCandidate(op, ov, alg, mech, w, m, n, k, c, o) for c, o in combos]
            if "none" in self.overlaps:
                for op in self.ops:
                    if op == "gemm-rs" and (m * n) % w:
                        continue   # the baseline reduce-scatter needs m n / world per rank
                    out.append(FusedCandidate(op, "none", "", "", w, m, n, k))
        return out

    def memcheck_variants(self) -> list[tuple[str, str, str, str]]:
        """One variant per (op, overlap) of the suite, for compute-sanitizer."""
        seen: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        for v in self.variants():
            seen.setdefault((v[0], v[1]), v)
        return list(seen.values())


def _fail(where: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{where}: fused.{key} = {value!r}: {why}")


def _names(where: str, data: dict, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    value = data.get(key, list(allowed))
    if not isinstance(value, list) or not value:
        raise _fail(where, key, value, "must be a non-empty list")
    for v in value:
        if v not in allowed:
            raise ConfigError(f"{where}: fused.{key} entry {v!r} is not one of "
                              f"{', '.join(allowed)}")
    if len(set(value)) != len(value):
        raise _fail(where, key, value, "lists an entry twice")
    return tuple(value)


def _positive_ints(where: str, key: str, value: Any, hi: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or any(
            not isinstance(v, int) or isinstance(v, bool) or v < 1 or (hi and v > hi)
            for v in value):
        rng = f"from 1 to {hi}" if hi else "at least 1"
        raise _fail(where, key, value, f"must be a non-empty list of integers {rng}")
    if len(set(value)) != len(value):
        raise _fail(where, key, value, "lists an entry twice")
    return tuple(value)


def reject_unknown_keys(where: str, table: dict, allowed: set[str], prefix: str) -> None:
    """A one-line ConfigError naming the file and the first key of ``table`` that is not
    ``allowed`` (``prefix`` + key, as the user wrote it)."""
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{prefix}{key}' "
                              f"(known: {', '.join(sorted(allowed))})")


def _shape(where: str, i: int, entry: Any) -> list[tuple[int, int, int, int]]:
    key = f"shapes[{i}]"
    if not isinstance(entry, dict):
        raise _fail(where, key, entry, 'must be a table {mnk = "MxNxK", worlds = [...]}')
    reject_unknown_keys(where, entry, SHAPE_KEYS, f"fused.{key}.")
    for k in sorted(SHAPE_KEYS):
        if k not in entry:
            raise ConfigError(f"{where}: fused.{key}: missing key {k!r}")
    mnk = entry["mnk"]
    match = _MNK.match(mnk) if isinstance(mnk, str) else None
    if not match:
        raise _fail(where, f"{key}.mnk", mnk, "is not MxNxK (three positive integers)")
    m, n, k = (int(x) for x in match.groups())
    if min(m, n, k) < 1:
        raise _fail(where, f"{key}.mnk", mnk, "every dimension must be at least 1")
    if n % 8 or k % 8:
        raise _fail(where, f"{key}.mnk", mnk,
                    "N and K must be multiples of 8 (16-byte TMA row pitches)")
    worlds = _positive_ints(where, f"{key}.worlds", entry["worlds"], MAX_WORLD)
    for w in worlds:
        if w < 2:
            raise _fail(where, f"{key}.worlds", list(worlds), f"world {w} must be from 2 "
                        f"to {MAX_WORLD}")
        if m < w:
            raise _fail(where, f"{key}.mnk", mnk, f"M = {m} is below world {w}: a rank would "
                        f"own no rows")
    return [(w, m, n, k) for w in worlds]


def parse_fused(data: Any, where: str) -> FusedPart:
    """The FusedPart of a suite's ``[fused]`` table (errors name the file, key and value)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: fused must be a table")
    reject_unknown_keys(where, data, KEYS, "fused.")
    if "shapes" not in data:
        raise ConfigError(f"{where}: fused: missing key 'shapes'")
    runnable = variants()
    mech_names = tuple(dict.fromkeys(v[3] for v in runnable))
    ops = _names(where, data, "ops", OPS)
    overlaps = _names(where, data, "overlaps", OVERLAPS)
    mechs = _names(where, data, "mechanisms", mech_names)
    if not isinstance(data["shapes"], list) or not data["shapes"]:
        raise _fail(where, "shapes", data["shapes"], "must be a non-empty list of tables")
    shapes: list[tuple[int, int, int, int]] = []
    for i, entry in enumerate(data["shapes"]):
        for s in _shape(where, i, entry):
            if s in shapes:
                raise _fail(where, f"shapes[{i}]", entry, f"world {s[0]} at "
                            f"{s[1]}x{s[2]}x{s[3]} is listed twice")
            shapes.append(s)
    total = _positive_ints(where, "comm_blocks_total", data.get("comm_blocks_total", [16, 32]))
    seq = data.get("sequential", "fewest")
    if seq not in SEQUENTIAL:
        raise _fail(where, "sequential", seq, f"must be one of {', '.join(SEQUENTIAL)}")
    timing = data.get("timing", {})
    if not isinstance(timing, dict):
        raise _fail(where, "timing", timing, "must be a table")
    reject_unknown_keys(where, timing, TIMING_KEYS, "fused.timing.")
    counts = {}
    for key, lo, default in (("iters", 1, 20), ("warmup", 0, 3)):
        v = timing.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= 10000:
            raise _fail(where, f"timing.{key}", v, f"must be an integer from {lo} to 10000")
        counts[key] = v
    interleave = timing.get("interleave", False)
    if not isinstance(interleave, bool):
        raise _fail(where, "timing.interleave", interleave, "must be true or false")
    idle = timing.get("idle", 0)
    if not isinstance(idle, (int, float)) or isinstance(idle, bool) or not 0 <= idle <= 100:
        raise _fail(where, "timing.idle", idle, "must be a number from 0 to 100")
    part = FusedPart(ops=ops, overlaps=overlaps, mechanisms=mechs, shapes=tuple(shapes),
                     comm_blocks_total=total, sequential=seq, interleave=interleave,
                     idle=float(idle), **counts)
    for op in ops:
        if not any(v[0] == op for v in part.variants()) and "none" not in overlaps:
            have = ", ".join(f"{o}/{m}" for (p, o, _, m) in runnable if p == op)
            raise ConfigError(f"{where}: fused op {op!r} has no runnable variant with the "
                              f"suite's overlaps and mechanisms (runnable: {have})")
    return part


__all__ = ["FusedPart", "FusedCandidate", "parse_fused", "OPS", "OVERLAPS"]
