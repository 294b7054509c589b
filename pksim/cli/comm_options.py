"""The options of the collectives with split sizes, send-recv's pairs and the reducing ops'
reduce op and epilogue, shared by predict, search, codegen and run: --splits, --peers,
--reduce-op, --epilogue. They become the schedule's extra (pksim.workloads.varsize,
pksim.kernel_contract)."""
from __future__ import annotations

import functools

import click

from hwmodels.errors import ConfigError
from pksim.kernel_contract import EPILOGUES, REDUCE_OPS, SPLIT_OPS
from pksim.schedule import DTYPES
from pksim.workloads import varsize
from pksim.workloads.collectives import REDUCING


def comm_options(fn):
    options = [
        click.option("--splits", default=None, metavar="SIZES",
                     help="-v forms: split sizes in elements. all-to-all-v: world x world, rows "
                          "separated by ';' (row r: what rank r sends to each rank); "
                          "all-gather-v, reduce-scatter-v: one share per rank. --bytes then "
                          "defaults to every rank's buffer."),
        click.option("--peers", default=None, metavar="PAIRS",
                     help="send-recv: who sends to whom, offsets (+1: ring shift; +1,-1: halo "
                          "exchange) or pairs (0>4,1>5); each message is --bytes. Default +1."),
        click.option("--reduce-op", type=click.Choice(REDUCE_OPS), default=None,
                     help="Reducing ops: sum (default), avg (sum x 1/world), min, max."),
        click.option("--epilogue", type=click.Choice(EPILOGUES), default=None,
                     help="Reducing ops: a fused element-wise epilogue after the reduction: "
                          "x alpha, + bias, or both (generated kernels; alpha and bias are "
                          "run-time arguments)."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), fn)


def comm_extra(kw, op: str, world: int) -> tuple[tuple, int | None]:
    """The schedule's extra for these options, and the --bytes they imply (the -v forms' buffer
    when --bytes is not given; else None). ConfigError naming the option that does not apply."""
    extra: dict[str, str] = {}
    if kw.get("splits") is not None:
        extra["splits"] = varsize.parse_splits(op, kw["splits"], world)
    if kw.get("peers") is not None:
        if op != "send-recv":
            raise ConfigError(f"--peers: only send-recv takes pairs, not {op}")
        extra["peers"] = varsize.parse_peers(kw["peers"], world)
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
        implied = varsize.schedule_bytes(op, tuple(extra.items()), world, DTYPES[kw["dtype"]])
    if op in SPLIT_OPS and op != "send-recv" and kw.get("size") is None and "splits" not in extra:
        raise ConfigError(f"--op {op} needs --splits (or --bytes for even splits)")
    return tuple(sorted(extra.items())), implied
