"""The options of ``pksim.predict`` and ``pksim.search``: the CLI's options as keywords
(``system=``, ``op=``, ``bytes=``, ``world=``, ``impl=``, ``set=``, ...), checked as the CLI's
choices check them, and the CLI's own names for them (the engine's functions read those).

A keyword is the option's name without the dashes (``--comm-sms`` -> ``comm_sms``,
``--cold-l2`` -> ``cold_l2``, ``--schedule LABEL`` -> ``schedule``); sizes (``bytes``,
``chunk_bytes``) take an int of bytes or the CLI's text (``"1MiB"``); ``set`` is a sequence
of ``KEY=VALUE`` overrides, or a mapping ``{KEY: value}`` of the same (``overrides_of``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from hwmodels.errors import ConfigError
from pksim_core.kernel_contract import EPILOGUES, REDUCE_OPS, SPLIT_OPS
from pksim_core.nccl import DEFAULT_LAUNCH, LAUNCH_MODES
from pksim_core.schedule import ALGORITHMS, DTYPES, IMPLS, MECHANISMS, OVERLAPS, PEER_ORDERS
from pksim_core.workloads import varsize_ops
from pksim_core.workloads.collectives import COLLECTIVES, REDUCING
from pksim_core.workloads.fused_ops import FUSED_OPS

# keyword -> the CLI's parameter name, where they differ
CLI_NAMES = {"system": "system_name", "set": "overrides", "bytes": "size", "n": "n_",
             "schedule": "label", "cold_l2": "cold"}
CHOICES = {"op": COLLECTIVES + FUSED_OPS, "dtype": tuple(DTYPES), "overlap": OVERLAPS,
           "impl": IMPLS, "algorithm": ALGORITHMS, "mechanism": MECHANISMS,
           "peer_order": PEER_ORDERS, "launch": LAUNCH_MODES, "nvls": ("on", "off"),
           "reduce_op": REDUCE_OPS, "epilogue": EPILOGUES}


# The keywords' kinds, checked before any use (a wrong type is a ConfigError naming the
# keyword and the value, never a TypeError from deep inside): whole numbers, numbers, flags,
# text; ``bytes`` and ``chunk_bytes`` take an int or text (checked where they are read).
WHOLE = ("m", "n", "k", "batch", "heads", "seq", "head_dim", "tokens", "hidden", "experts",
         "topk", "expert_hidden", "world", "domains", "comm_sms", "root")
NUMBER = ("skew",)
FLAGS = ("cold_l2", "full")
TEXT = ("system", "program", "op", "dtype", "overlap", "impl", "algorithm", "mechanism",
        "peer_order", "schedule", "nccl_version", "launch", "nvls", "splits", "peers",
        "reduce_op", "epilogue")
SIZES = ("bytes", "chunk_bytes")
REQUIRED = ("dtype", "impl", "domains", "root", "skew")     # None is not a value of these


def ok_texts(value: Any) -> bool:
    """Text, or a list or tuple of text."""
    return isinstance(value, str) or isinstance(value, (list, tuple)) and all(
        isinstance(x, str) for x in value)


def check_kind(where: str, key: str, value: Any, kind: str, none: bool = True) -> None:
    """``value`` of keyword ``key`` is of ``kind`` (whole, number, flag, text, size,
    texts); None passes where ``none``. A ConfigError naming ``where``, the key and value."""
    if value is None:
        if none:
            return
        raise ConfigError(f"{where}: {key}=None: give a value (or leave the keyword out)")
    ok = {"whole": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "flag": lambda v: isinstance(v, bool),
          "text": lambda v: isinstance(v, str),
          "size": lambda v: isinstance(v, (int, str)) and not isinstance(v, bool),
          "texts": ok_texts,
          "overrides": lambda v: isinstance(v, dict) and all(
              isinstance(k, str) and isinstance(x, (int, float, str)) and not isinstance(x, bool)
              for k, x in v.items()) or ok_texts(v)}[kind](value)
    if not ok:
        want = {"whole": "a whole number (int)", "number": "a number", "flag": "True or False",
                "text": "text (str)", "size": "bytes as an int or text such as '1MiB'",
                "texts": "text or a list of text",
                "overrides": "'KEY=VALUE' text, a list of them or a dict {KEY: number}"}[kind]
        raise ConfigError(f"{where}: {key}={value!r}: must be {want}")


def overrides_of(where: str, value: Any) -> tuple[str, ...]:
    """``set=``'s overrides as the CLI's ``KEY=VALUE`` texts: one text, a list of them, or a
    dict ``{KEY: value}`` (a number or text each; a float written with repr, so no digit is
    lost). A ConfigError naming ``where`` for anything else."""
    check_kind(where, "set", value, "overrides", none=False)
    if isinstance(value, dict):
        return tuple(f"{key}={val!r}" if isinstance(val, float) else f"{key}={val}"
                     for key, val in value.items())
    return (value,) if isinstance(value, str) else tuple(value)


def check_kinds(where: str, values: dict[str, Any]) -> None:
    """Every keyword of ``values`` whose kind is known (the lists above; ``set``: text, a
    list of text or a dict) checked by ``check_kind``."""
    kinds = {**dict.fromkeys(WHOLE, "whole"), **dict.fromkeys(NUMBER, "number"),
             **dict.fromkeys(FLAGS, "flag"), **dict.fromkeys(TEXT, "text"),
             **dict.fromkeys(SIZES, "size"), "set": "overrides"}
    for key, value in values.items():
        if key in kinds:
            check_kind(where, key, value, kinds[key], key not in REQUIRED)


@dataclass(frozen=True)
class Options:
    """One operation on one system, as ``pksim predict`` / ``pksim search`` take it."""
    system: str | None = None
    program: str | None = None
    set: tuple[str, ...] | dict = ()
    op: str | None = None
    bytes: int | str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    heads: int | None = None
    seq: int | None = None
    head_dim: int | None = None
    tokens: int | None = None
    hidden: int | None = None
    experts: int | None = None
    topk: int | None = None
    expert_hidden: int | None = None
    skew: float = 0.0
    dtype: str = "bf16"
    overlap: str | None = None
    world: int | None = None
    domains: int = 1
    impl: str = "pk"
    algorithm: str | None = None
    mechanism: str | None = None
    comm_sms: int | None = None
    chunk_bytes: int | str | None = None
    peer_order: str | None = None
    root: int = 0
    schedule: str | None = None
    cold_l2: bool = False
    full: bool = False
    nccl_version: str | None = None
    launch: str | None = None          # --impl nccl only; None: DEFAULT_LAUNCH
    nvls: str | None = None            # --impl nccl only: "on" | "off" (NCCL_NVLS_ENABLE)
    splits: str | None = None
    peers: str | None = None
    reduce_op: str | None = None
    epilogue: str | None = None

    def __post_init__(self):
        check_kinds("options", asdict(self))
        for key, allowed in CHOICES.items():
            value = getattr(self, key)
            if value is not None and value not in allowed:
                raise ConfigError(f"{key}={value!r}: not one of {', '.join(allowed)}")
        object.__setattr__(self, "set", overrides_of("options", self.set))

    @classmethod
    def of(cls, where: str, options: dict[str, Any]) -> Options:
        """``Options(**options)``, an unknown keyword a ConfigError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown option {unknown[0]!r} "
                              f"(options: {', '.join(sorted(known))})")
        check_kinds(where, options)
        return cls(**options)

    @classmethod
    def from_cli(cls, kw: dict[str, Any]) -> Options:
        """The options of a CLI command's parameters (its own extras, e.g. --json, left out)."""
        back = {cli: key for key, cli in CLI_NAMES.items()}
        known = {f.name for f in fields(cls)}
        return cls(**{back.get(name, name): value for name, value in kw.items()
                      if back.get(name, name) in known})

    def cli(self) -> dict[str, Any]:
        """The parameters as the CLI names them (what the engine's functions read)."""
        return {CLI_NAMES.get(key, key): value for key, value in asdict(self).items()}


def comm_extra(kw, op: str, world: int) -> tuple[tuple, int | None]:
    """The schedule's extra for these options, and the --bytes they imply (the -v forms' buffer
    when --bytes is not given; else None). ConfigError naming the option that does not apply."""
    extra: dict[str, str] = {}
    if kw.get("splits") is not None:
        extra["splits"] = varsize_ops.parse_splits(op, kw["splits"], world)
    if kw.get("peers") is not None:
        if op != "send-recv":
            raise ConfigError(f"--peers: only send-recv takes pairs, not {op}")
        extra["peers"] = varsize_ops.parse_peers(kw["peers"], world)
    for key, value, none in (("reduce_op", kw.get("reduce_op"), "sum"),
                             ("epilogue", kw.get("epilogue"), "none")):
        if value is None or value == none:
            continue
        if op not in REDUCING:
            raise ConfigError(f"--{key.replace('_', '-')} {value}: {op} does not reduce "
                              f"(reducing ops: {', '.join(REDUCING)})")
        extra[key] = value
    implied = None
    if "splits" in extra and kw.get("size") is None:
        implied = varsize_ops.schedule_bytes(op, tuple(extra.items()), world, DTYPES[kw["dtype"]])
    if op in SPLIT_OPS and op != "send-recv" and kw.get("size") is None and "splits" not in extra:
        raise ConfigError(f"--op {op} needs --splits (or --bytes for even splits)")
    return tuple(sorted(extra.items())), implied
