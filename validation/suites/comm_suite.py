"""The suite of the communication kernels of issue 30 (``validation/suites/comm.toml``): reduce,
gather, scatter, the -v forms, send/recv and the reducing kernels with a reduce op and an
epilogue. Which libraries to build (``LibraryVariant``: op, algorithm, mechanism, reduce op, epilogue,
send-recv's peers), and every case: correctness at every world and dtype on odd sizes, timing
in bf16 with every candidate of its group. Split sizes are drawn uneven (and odd, one block
empty where there are blocks enough) from the suite's seed, so a case list is reproducible.

    name, description, system, worlds, check_dtypes, check_sizes, timed_sizes, divisors, seed
    [timing] iters, warmup
    [[kernels]] op, algorithms, mechanisms, and optionally reduce_op, epilogue, peers

Unknown keys, wrong types and kernels codegen does not emit are ConfigErrors naming the file.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from codegen.plan import algorithms as codegen_algorithms
from codegen.plan import mechanisms as codegen_mechanisms
from hwmodels.errors import ConfigError
from hwmodels.files import read_toml
from hwmodels.resources import suites_dir
from hwmodels.units import format_bytes, parse_bytes
from pksim_core.kernel_contract import EPILOGUES, REDUCE_OPS
from pksim_core.workloads import varsize_ops
from validation.suites.fused_suite import reject_unknown_keys

ELEM = {"bf16": 2, "fp32": 4}
SHORT = {"reduce": "red", "gather": "gat", "scatter": "sca", "all-to-all-v": "a2av",
         "all-gather-v": "agv", "reduce-scatter-v": "rsv", "send-recv": "sr", "all-reduce": "ar",
         "reduce-scatter": "rs", "direct": "direct", "two-shot": "2shot", "tma": "tma",
         "register": "reg", "copy-engine": "ce"}
_TOP = {"name", "description", "system", "worlds", "check_dtypes", "check_sizes", "timed_sizes",
        "divisors", "seed", "timing", "kernels"}
_KERNEL = {"op", "algorithms", "mechanisms", "reduce_op", "epilogue", "peers"}
_TIMING = {"iters", "warmup"}
# Bias entries of the bias epilogues' cases: a row of a (rows, hidden) output; the checked cases'
# is not a multiple of the 16-byte vector (the kernels wrap it inside a vector).
BIAS_COUNT = {"check": 1003, "timed": 1024}
ALPHA = 0.37
# Timed split sizes are whole rows of this many elements (a (tokens, hidden) tensor split by
# rows, as MoE dispatch and torch's split sizes do: every block starts 16-byte aligned); the
# checked cases' sizes are odd. Packed blocks at odd displacements run the register fallback
# of the copy and sum routines (collective.cuh), which the model does not know
# (docs/validation/comm.md).
ROW = 64


@dataclass(frozen=True)
class LibraryVariant:
    """One library: a kernel and its compile-time options."""
    op: str
    algorithm: str
    mechanism: str
    reduce_op: str = "sum"
    epilogue: str = "none"
    peers: str = ""

    @property
    def extra(self) -> tuple:
        """The schedule's extra (peers are a run-time matter: not in the library's)."""
        out = {}
        if self.reduce_op != "sum":
            out["reduce_op"] = self.reduce_op
        if self.epilogue != "none":
            out["epilogue"] = self.epilogue
        return tuple(sorted(out.items()))

    @property
    def family(self) -> str:
        """The op with its compile-time options: the candidates of a group share it."""
        tag = SHORT[self.op]
        if self.reduce_op != "sum":
            tag += f"-{self.reduce_op}"
        if self.epilogue != "none":
            tag += f"-{self.epilogue}"
        return tag

    @property
    def tag(self) -> str:
        return f"{self.family}-{SHORT.get(self.algorithm, self.algorithm)}-{SHORT[self.mechanism]}"


@dataclass(frozen=True)
class CommSuite:
    name: str
    path: str
    variants: tuple[LibraryVariant, ...]
    worlds: tuple[int, ...]
    check_dtypes: tuple[str, ...]
    check_sizes: tuple[int, ...]
    timed_sizes: tuple[int, ...]
    divisors: tuple[int, ...] = (1,)
    system: str = "h200-virtual-calibrated"
    seed: int = 30
    iters: int = 20
    warmup: int = 3
    description: str = ""


def load_comm_suite(ref: str | Path = "comm") -> CommSuite:
    p = Path(ref)
    path = p if p.is_file() else suites_dir() / f"{ref}.toml"
    if not path.is_file():
        raise ConfigError(f"comm suite {str(ref)!r}: no such file")
    return parse_comm_suite(read_toml(path, "comm suite"), str(path))


def _list(where: str, data: dict, key: str, kind: type) -> tuple:
    value = data.get(key)
    if not isinstance(value, list) or not value or not all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: {key} must be a non-empty list of {kind.__name__}, got {value!r}")
    return tuple(value)


def parse_comm_suite(data: dict, where: str = "comm suite") -> CommSuite:
    reject_unknown_keys(where, data, _TOP, "")
    variants = []
    for i, k in enumerate(data.get("kernels", [])):
        at = f"{where}: kernels[{i}]"
        reject_unknown_keys(at, k, _KERNEL, "")
        op = k.get("op")
        reduce_op, epilogue = k.get("reduce_op", "sum"), k.get("epilogue", "none")
        if reduce_op not in REDUCE_OPS or epilogue not in EPILOGUES:
            raise ConfigError(f"{at}: reduce_op {reduce_op!r} / epilogue {epilogue!r} is not one of "
                              f"{', '.join(REDUCE_OPS)} / {', '.join(EPILOGUES)}")
        extra = LibraryVariant(op, "", "", reduce_op, epilogue).extra
        for alg in _list(at, k, "algorithms", str):
            if alg not in codegen_algorithms(op):
                raise ConfigError(f"{at}: codegen has no {alg} {op} kernel")
            for mech in _list(at, k, "mechanisms", str):
                if mech not in codegen_mechanisms(alg, op, extra):
                    raise ConfigError(f"{at}: {alg} {op} does not run on {mech}")
                variants.append(LibraryVariant(op, alg, mech, reduce_op, epilogue, k.get("peers", "")))
    if not variants:
        raise ConfigError(f"{where}: no [[kernels]]")
    timing = data.get("timing", {})
    reject_unknown_keys(where, timing, _TIMING, "timing.")
    sizes = {key: tuple(parse_bytes(s, f"{where}: {key}") for s in _list(where, data, key, str))
             for key in ("check_sizes", "timed_sizes")}
    return CommSuite(name=data.get("name", "comm"), path=where, variants=tuple(variants),
                     worlds=_list(where, data, "worlds", int),
                     check_dtypes=_list(where, data, "check_dtypes", str),
                     check_sizes=sizes["check_sizes"], timed_sizes=sizes["timed_sizes"],
                     divisors=_list(where, data, "divisors", int) if "divisors" in data else (1,),
                     system=data.get("system", "h200-virtual-calibrated"),
                     seed=int(data.get("seed", 30)), iters=int(timing.get("iters", 20)),
                     warmup=int(timing.get("warmup", 3)), description=data.get("description", ""))


# ---- sizes --------------------------------------------------------------------------------------

def _uneven(total: int, parts: int, rng: random.Random, odd: bool, empty: bool) -> list[int]:
    """``parts`` sizes summing to about ``total``, each 0.3-1.7 of the mean (odd when asked,
    else whole rows of ROW elements), one of them 0 when ``empty``."""
    weights = [rng.uniform(0.3, 1.7) for _ in range(parts)]
    scale = total / sum(weights)
    sizes = [max(1, int(w * scale)) for w in weights]
    if odd:
        sizes = [s | 1 for s in sizes]
    else:
        sizes = [max(ROW, s // ROW * ROW) for s in sizes]
    if empty and parts > 2:
        sizes[rng.randrange(parts)] = 0
    return sizes


def sizes_for(v: LibraryVariant, world: int, nbytes: int, dtype: str, rng: random.Random,
              odd: bool) -> tuple[int, list[int] | None, int]:
    """(count, splits, schedule bytes) of ``v`` at about ``nbytes`` (nccl-tests convention:
    the buffer of a reduce or all-reduce, the gathered / scattered buffer, every rank's
    buffer of the split-size ops; send-recv: a rank's messages together)."""
    e = ELEM[dtype]
    elems = max(1, nbytes // e)
    if v.op in ("gather", "scatter", "reduce-scatter"):
        count = max(1, elems // world)
        count = count | 1 if odd else count
        return count, None, count * world * e
    if v.op in ("reduce", "all-reduce"):
        count = elems | 1 if odd else elems
        return count, None, count * e
    if v.op == "send-recv":
        peers = varsize_ops.parse_peers(v.peers or "+1", world)
        per_rank = len(varsize_ops.pairs(peers, world)) // world if ">" not in peers else 1
        message = max(1, elems // max(1, per_rank))
        message = message | 1 if odd else message
        splits = varsize_ops.split_list("send-recv", (("peers", peers),), world, message)
        return varsize_ops.buffer_elems("send-recv", (("peers", peers),), world, message), splits, message * e
    if v.op == "all-to-all-v":
        rows = [_uneven(elems, world, rng, odd, empty=r == 0) for r in range(world)]
        splits = [x for row in rows for x in row]
        extra = (("splits", ";".join(",".join(map(str, row)) for row in rows)),)
    else:
        shares = _uneven(elems, world, rng, odd, empty=True)
        splits = shares
        extra = (("splits", ",".join(map(str, shares))),)
    count = varsize_ops.buffer_elems(v.op, extra, world, 0)
    return count, splits, count * e


def schedule_extra(v: LibraryVariant, world: int, splits: list[int] | None) -> tuple:
    """The schedule's extra of a case: the variant's options plus its sizes."""
    out = dict(v.extra)
    if v.op == "send-recv":
        out["peers"] = varsize_ops.parse_peers(v.peers or "+1", world)
    elif v.op == "all-to-all-v":
        out["splits"] = ";".join(",".join(map(str, splits[r * world:(r + 1) * world]))
                                 for r in range(world))
    elif v.op in ("all-gather-v", "reduce-scatter-v"):
        out["splits"] = ",".join(map(str, splits))
    return tuple(sorted(out.items()))


def epilogue_fields(v: LibraryVariant, timed: bool = False) -> dict:
    out = {}
    if v.reduce_op != "sum":
        out["reduce_op"] = v.reduce_op
    if v.epilogue != "none":
        out["epilogue"] = v.epilogue
    if "scale" in v.epilogue:
        out["alpha"] = ALPHA
    if "bias" in v.epilogue:
        out["bias_count"] = BIAS_COUNT["timed" if timed else "check"]
    return out


def cases(suite: CommSuite, sms: int) -> list[dict]:
    """Every case (without library paths and predictions: validation.prepare.comm adds them):
    checked cases at every world, dtype and odd size; timed bf16 cases with every candidate of
    their group (variants of one family x blocks per rank), each group's sizes drawn once."""
    rng = random.Random(suite.seed)
    out = []
    for v in suite.variants:
        for w in suite.worlds:
            for dt in suite.check_dtypes:
                for nbytes in suite.check_sizes:
                    count, splits, sbytes = sizes_for(v, w, nbytes, dt, rng, odd=True)
                    out.append(dict(id=f"{v.tag}-w{w}-{dt}-odd{format_bytes(nbytes)}", variant=v,
                                    world=w, dtype=dt, count=count, splits=splits,
                                    schedule_bytes=sbytes, blocks_per_rank=5, check=True))
    families = dict.fromkeys(v.family for v in suite.variants)
    for fam in families:
        members = [v for v in suite.variants if v.family == fam]
        for w in suite.worlds:
            full = max(1, sms // w)
            counts = sorted({max(1, full // d) for d in suite.divisors})
            for nbytes in suite.timed_sizes:
                count, splits, sbytes = sizes_for(members[0], w, nbytes, "bf16", rng, odd=False)
                for v in members:
                    for b in ((full,) if v.mechanism == "copy-engine" and v.op not in
                              ("reduce", "reduce-scatter-v") else counts):
                        out.append(dict(id=f"{v.tag}-w{w}-bf16-{format_bytes(nbytes)}-b{b}",
                                        variant=v, world=w, dtype="bf16", count=count,
                                        splits=splits, schedule_bytes=sbytes, blocks_per_rank=b,
                                        check=True, time=True, iters=suite.iters,
                                        warmup=suite.warmup, group=f"{fam}-w{w}-{format_bytes(nbytes)}"))
    return out
