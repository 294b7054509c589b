"""Validation suites: which generated collectives ``pksim validate`` builds, runs and predicts.

A suite is a TOML file (``validation/suites/default.toml`` and ``quick.toml`` are shipped)::

    name = "default"
    description = "..."                       # optional
    system = "h200-virtual-calibrated"        # predictions (``--system`` overrides)
    set = ["domain.gpus_per_domain=128"]      # optional: overrides of the system's figures
    dtype = "bf16"                            # bf16 or fp32
    ops = ["all-gather", "all-reduce"]        # collectives codegen emits
    algorithms = ["direct", "two-shot", "ring"]   # each op takes those codegen implements
    mechanisms = ["tma", "register", "copy-engine"]
    worlds = [2, 4, 8]
    sizes = ["4KiB", "1GiB"]                  # nccl-tests bytes: bytes or KiB/MiB/GiB
    min_candidates = 5                        # optional: fewer per (op, size, world) is an error
    [blocks_per_rank]
    divisors = [4, 2, 1]                      # blocks per rank = max(1, (SMs // world) // d)
    [timing]
    iters = 20                                # timed calls (median), each after an L2 flush
    warmup = 3
    large_from = "256MiB"                     # optional, with large_iters and large_warmup
    large_iters = 5
    large_warmup = 1
    [fused]                                   # optional: fused GEMM + communication kernels
    ops = ["gemm-rs", "ag-gemm", "gemm-ar"]   # (validation/suites/fused_suite.py documents the table)
    shapes = [{mnk = "8192x8192x2048", worlds = [2, 4, 8]}]

The collective keys (ops to sizes) may be left out when the suite has a ``[fused]`` table; a
suite has at least one of the two parts.

A candidate is one schedule: (algorithm, mechanism, blocks per rank) for an (op, size,
world) that the kernels run at that world (pksim_core.kernel_contract.world_reason: no TMA sum of
more than 8 sources, recursive halving at powers of two); its ``comm_sms`` is the blocks per
rank. Copy-engine copies (all-gather, all-to-all,
broadcast) get one candidate with ``SMs // world`` blocks: the copy engines move their data.
Unknown keys, wrong types and values codegen cannot run are ConfigErrors naming the file and
the key.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegen.plan import MAX_RANKS, OPS, RUNNABLE_MECHANISMS, algorithms
from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from pksim_core.kernel_contract import world_reason
from hwmodels.resources import suites_dir
from hwmodels.units import format_bytes, parse_bytes
from validation.suites.fused_suite import FusedPart, parse_fused, reject_unknown_keys

SUITES_DIR = suites_dir()
COPY_OPS = ("all-gather", "all-to-all", "broadcast")   # no reduction: blocks do not matter on CE
DTYPES = ("bf16", "fp32")
_TOP = {"name", "description", "system", "set", "dtype", "ops", "algorithms", "mechanisms",
        "worlds", "sizes", "min_candidates", "blocks_per_rank", "timing", "fused"}
_COLLECTIVE = ("ops", "algorithms", "mechanisms", "worlds", "sizes")
_BLOCKS = {"divisors"}
_TIMING = {"iters", "warmup", "large_from", "large_iters", "large_warmup"}


@dataclass(frozen=True)
class Candidate:
    """One schedule of the suite: a kernel, where it runs, and its blocks per rank."""
    op: str
    algorithm: str
    mechanism: str
    world: int
    nbytes: int
    blocks_per_rank: int
    dtype: str

    @property
    def group(self) -> tuple[str, int, int]:
        """The (op, size, world) whose candidates are ranked against each other."""
        return (self.op, self.nbytes, self.world)

    def case_id(self) -> str:
        return (f"{self.op}-{self.algorithm}-{self.mechanism}-w{self.world}-"
                f"{format_bytes(self.nbytes)}-b{self.blocks_per_rank}-{self.dtype}")


@dataclass(frozen=True)
class Suite:
    name: str
    path: str
    ops: tuple[str, ...] = ()                # the collective part (empty: fused only)
    algorithms: tuple[str, ...] = ()
    mechanisms: tuple[str, ...] = ()
    worlds: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    divisors: tuple[int, ...] = (1,)
    system: str = "h200-virtual-calibrated"
    overrides: tuple[str, ...] = ()          # the suite's `set`: KEY=VALUE figures of the system
    dtype: str = "bf16"
    description: str = ""
    min_candidates: int = 1
    iters: int = 20
    warmup: int = 3
    large_from: int = 0                  # 0: every size uses iters / warmup
    large_iters: int = 5
    large_warmup: int = 1
    fused: FusedPart | None = None

    def timing(self, nbytes: int) -> tuple[int, int]:
        """(iters, warmup) at this size."""
        if self.large_from and nbytes >= self.large_from:
            return self.large_iters, self.large_warmup
        return self.iters, self.warmup

    def kernels(self) -> list[tuple[str, str, str]]:
        """(op, algorithm, mechanism) of every library the suite needs."""
        return [(op, alg, mech) for op in self.ops for alg in algorithms(op)
                if alg in self.algorithms for mech in self.mechanisms]

    def candidates(self, sms: int) -> list[Candidate]:
        """Every candidate on a GPU of ``sms`` SMs, grouped by (op, size, world)."""
        out = []
        for op in self.ops:
            for nbytes in self.sizes:
                for world in self.worlds:
                    for o, alg, mech in self.kernels():
                        if o != op or world_reason(op, alg, mech, world):
                            continue
                        full = max(1, sms // world)
                        counts = ((full,) if mech == "copy-engine" and op in COPY_OPS else
                                  sorted({max(1, full // d) for d in self.divisors}))
                        out += [Candidate(op, alg, mech, world, nbytes, b, self.dtype)
                                for b in counts]
        return out

    def check_candidates(self, sms: int) -> None:
        """At least ``min_candidates`` per (op, size, world)."""
        per: dict[tuple, int] = {}
        for c in self.candidates(sms):
            per[c.group] = per.get(c.group, 0) + 1
        for (op, nbytes, world), n in per.items():
            if n < self.min_candidates:
                raise ConfigError(f"{self.path}: min_candidates = {self.min_candidates}, but "
                                  f"{op} {format_bytes(nbytes)} at world {world} has {n}")


def suite_path(ref: str | Path) -> Path:
    """A shipped suite's name (``default``, ``quick``) or a path to a suite file."""
    names = ", ".join(sorted(x.stem for x in SUITES_DIR.glob("*.toml")))
    if not str(ref).strip():
        raise ConfigError(f"suite {str(ref)!r}: give a shipped suite's name ({names}) or a file")
    p = Path(ref)
    shipped = SUITES_DIR / f"{ref}.toml"
    bare = p.suffix != ".toml" and "/" not in str(ref)
    if bare and shipped.is_file():          # a shipped name wins over ./name (./name: that)
        return shipped
    if p.is_dir():
        raise ConfigError(f"suite {str(ref)!r}: is a folder, not a suite file")
    if p.is_file():
        return p
    names = ", ".join(sorted(x.stem for x in SUITES_DIR.glob("*.toml")))
    raise ConfigError(f"suite {str(ref)!r}: no such file, and not a shipped suite ({names})")


def load_suite(ref: str | Path) -> Suite:
    path = suite_path(ref)
    return parse_suite(read_toml(path, "suite file"), str(path))


def _check_keys(where: str, table: Any, allowed: set[str], prefix: str = "") -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {prefix.rstrip('.') or 'suite'} must be a table")
    reject_unknown_keys(where, table, allowed, prefix)
    return table


def _list(where: str, data: dict, key: str, kind: type | tuple[type, ...],
          allowed: tuple = ()) -> tuple:
    value = data[key]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty list, got {value!r}")
    for v in value:
        if not isinstance(v, kind) or isinstance(v, bool):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ConfigError(f"{where}: {key} entry {v!r} is not a {names}")
        if allowed and v not in allowed:
            raise ConfigError(f"{where}: {key} entry {v!r} is not one of {', '.join(allowed)}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: {key} lists an entry twice: {value!r}")
    return tuple(value)


def _int(where: str, data: dict, key: str, lo: int, default: int, hi: int | None = None) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or \
            (hi is not None and value > hi):
        rng = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
        raise ConfigError(f"{where}: {key} = {value!r} must be an integer {rng}")
    return value


def parse_suite(data: dict, where: str = "suite") -> Suite:
    """A Suite from the TOML table of a suite file (``where`` names it in errors)."""
    _check_keys(where, data, _TOP)
    if "name" not in data:
        raise ConfigError(f"{where}: missing key 'name'")
    if not isinstance(data["name"], str) or not data["name"]:
        raise ConfigError(f"{where}: name must be a non-empty string")
    fused = parse_fused(data["fused"], where) if "fused" in data else None
    if fused is not None and not any(key in data for key in _COLLECTIVE):
        return _parse_common(data, where, fused, collectives=False)
    for key in _COLLECTIVE:
        if key not in data:
            raise ConfigError(f"{where}: missing key {key!r}" +
                              ("" if fused else " (or a [fused] table instead of the collectives)"))
    return _parse_common(data, where, fused, collectives=True)


def _parse_common(data: dict, where: str, fused: FusedPart | None, collectives: bool) -> Suite:
    runnable_algs = tuple(dict.fromkeys(a for op in OPS for a in algorithms(op) if a != "in-network"))
    ops = algs = mechs = worlds = sizes = ()
    if collectives:
        ops = _list(where, data, "ops", str, OPS)
        algs = _list(where, data, "algorithms", str, runnable_algs)
        mechs = _list(where, data, "mechanisms", str, RUNNABLE_MECHANISMS)
        worlds = _list(where, data, "worlds", int)
        sizes = tuple(parse_bytes(s, f"{where}: sizes")
                      for s in _list(where, data, "sizes", (str, int)))
    for w in worlds:
        if not 2 <= w <= MAX_RANKS:
            raise ConfigError(f"{where}: worlds entry {w} must be from 2 to {MAX_RANKS}")
    for op in ops:
        if not any(a in algorithms(op) for a in algs):
            have = ", ".join(a for a in algorithms(op) if a != "in-network")
            raise ConfigError(f"{where}: op {op!r} has none of the suite's algorithms "
                              f"(codegen implements {have})")
    dtype = data.get("dtype", "bf16")
    if dtype not in DTYPES:
        raise ConfigError(f"{where}: dtype = {dtype!r} is not one of {', '.join(DTYPES)}")
    system = data.get("system", "h200-virtual-calibrated")
    if not isinstance(system, str) or not system:
        raise ConfigError(f"{where}: system must be a system name or file, got {system!r}")
    overrides = _list(where, data, "set", str) if "set" in data else ()
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"{where}: set entry {o!r} is not KEY=VALUE")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string")
    blocks = _check_keys(where, data.get("blocks_per_rank", {}), _BLOCKS, "blocks_per_rank.")
    divisors = (1,)
    if "divisors" in blocks:
        divisors = _list(where, blocks, "divisors", int)
        if any(d < 1 for d in divisors):
            raise ConfigError(f"{where}: blocks_per_rank.divisors must be at least 1, "
                              f"got {list(divisors)}")
    timing = _check_keys(where, data.get("timing", {}), _TIMING, "timing.")
    tw = f"{where}: timing"
    large_from = timing.get("large_from", 0)
    large_from = parse_bytes(large_from, f"{tw}.large_from") if large_from else 0
    return Suite(name=data["name"], path=where, ops=ops, algorithms=algs, mechanisms=mechs,
                 worlds=worlds, sizes=sizes, divisors=divisors, system=system,
                 overrides=overrides, dtype=dtype,
                 description=description,
                 min_candidates=_int(where, data, "min_candidates", 1, 1),
                 iters=_int(tw, timing, "iters", 1, 20, 10000),
                 warmup=_int(tw, timing, "warmup", 0, 3, 10000),
                 large_from=large_from,
                 large_iters=_int(tw, timing, "large_iters", 1, 5, 10000),
                 large_warmup=_int(tw, timing, "large_warmup", 0, 1, 10000), fused=fused)


__all__ = ["Suite", "Candidate", "load_suite", "parse_suite", "suite_path", "SUITES_DIR"]
