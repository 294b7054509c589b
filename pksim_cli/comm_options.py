"""The options of the collectives with split sizes, send-recv's pairs and the reducing ops'
reduce op and epilogue, shared by predict, search, codegen and run: --splits, --peers,
--reduce-op, --epilogue. They become the schedule's extra (``pksim.api.options.comm_extra``,
pksim_core.workloads.varsize_ops, pksim_core.kernel_contract)."""
from __future__ import annotations

import functools

import click

from pksim.api.options import comm_extra
from pksim_core.kernel_contract import EPILOGUES, REDUCE_OPS


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


__all__ = ["comm_extra", "comm_options"]
