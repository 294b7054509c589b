"""``pksim predict`` and ``pksim search``: one operation on one system."""
from __future__ import annotations

import functools

import click

from hwmodels.units import Seconds, format_bytes, format_time, time_unit
from pksim.api import predict as api
from pksim.api.options import Options
from pksim.api.predict import candidates as _candidates   # trace (pksim_cli.whatif) uses it
from pksim_cli.comm_options import comm_options
from pksim_cli.output import emit_json, table
from pksim_cli.programs import print_prediction as print_program, print_search as \
    print_program_search
from pksim_core.nccl import DEFAULT_LAUNCH, LAUNCH_MODES
from pksim_core.prediction import Prediction
from pksim_core.schedule import ALGORITHMS, DTYPES, IMPLS, MECHANISMS, OVERLAPS, PEER_ORDERS
from pksim_core.sensitivity import swings
from pksim_core.workloads.collectives import COLLECTIVES
from pksim_core.workloads.fused_ops import FUSED_OPS


def op_options(fn):
    """Options shared by predict and search."""
    fn = comm_options(fn)
    options = [
        click.option("--system", "system_name", default=None,
                     help="Shipped system name or path to a system .toml (with --program: "
                          "default dgx-h100)."),
        click.option("--program", default=None, metavar="NAME|FILE",
                     help="A whole program (a shipped name, pksim programs list, or a .toml): "
                          "its baseline, pksim's best and its roofline."),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a system figure (repeatable)."),
        click.option("--op", default=None, type=click.Choice(COLLECTIVES + FUSED_OPS),
                     help="Operation: a collective, or a fused compute + communication op."),
        click.option("--bytes", "size", default=None, metavar="SIZE",
                     help="Collectives: size as nccl-tests counts it (bytes or KiB/MiB/GiB)."),
        click.option("--m", type=int, default=None, help="GEMM ops: rows of A per rank."),
        click.option("--n", "n_", type=int, default=None, help="GEMM ops: columns of B."),
        click.option("--k", type=int, default=None, help="GEMM ops: the reduction dimension."),
        click.option("--batch", type=int, default=None, help="Attention: batch."),
        click.option("--heads", type=int, default=None, help="Attention: heads."),
        click.option("--seq", type=int, default=None, help="Attention: total sequence length."),
        click.option("--head-dim", type=int, default=None, help="Attention: head dimension."),
        click.option("--tokens", type=int, default=None, help="MoE: tokens per rank."),
        click.option("--hidden", type=int, default=None, help="MoE: hidden size."),
        click.option("--experts", type=int, default=None, help="MoE: experts in all."),
        click.option("--topk", type=int, default=None, help="MoE: experts per token."),
        click.option("--expert-hidden", type=int, default=None, help="MoE: expert FFN size."),
        click.option("--skew", type=float, default=0.0, show_default=True,
                     help="MoE: Zipf exponent of the routing (0 = uniform)."),
        click.option("--dtype", type=click.Choice(tuple(DTYPES)), default="bf16",
                     show_default=True, help="Element type."),
        click.option("--overlap", type=click.Choice(OVERLAPS), default=None,
                     help="Fused ops: fix the overlap strategy (default: search)."),
        click.option("--world", type=int, default=None,
                     help="Ranks (default: the GPUs of --domains domains)."),
        click.option("--domains", type=int, default=1, show_default=True,
                     help="NVLink domains joined by the scale-out network."),
        click.option("--impl", type=click.Choice(IMPLS), default="pk", show_default=True,
                     help="pk: ParallelKittens-style kernels; nccl: NCCL's own choice."),
        click.option("--algorithm", type=click.Choice(ALGORITHMS), default=None,
                     help="Fix the algorithm (default: search)."),
        click.option("--mechanism", type=click.Choice(MECHANISMS), default=None,
                     help="Fix the transfer mechanism (default: search)."),
        click.option("--comm-sms", type=int, default=None,
                     help="Fix the number of communication SMs."),
        click.option("--chunk-bytes", default=None, metavar="SIZE",
                     help="Fix the pipeline chunk (0: none)."),
        click.option("--peer-order", type=click.Choice(PEER_ORDERS), default=None,
                     help="Order of peers for direct algorithms."),
        click.option("--root", type=int, default=0, show_default=True,
                     help="Root rank of broadcast/reduce/gather/scatter."),
        click.option("--schedule", "label", default=None, metavar="LABEL",
                     help="The schedule of that label in search's table, e.g. "
                          "two-shot/tma/32sm/sequential."),
        click.option("--cold-l2", "cold", is_flag=True,
                     help="Collectives: the inputs come from HBM however small (as after "
                          "other work has filled the L2; pksim validate measures so); by "
                          "default a working set that fits in L2 is served from it."),
        click.option("--full", is_flag=True,
                     help="With a fixed schedule: simulate every rank instead of one per "
                          "symmetry class."),
        click.option("--nccl-version", default=None, metavar="X.Y.Z",
                     help="--impl nccl: the NCCL release whose tuner constants pick "
                          "(default: the newest in pksim_core.nccl_constants)."),
        click.option("--launch", type=click.Choice(LAUNCH_MODES), default=None,
                     help=f"--impl nccl: CUDA graph, one process per GPU (eager), or one "
                          f"thread driving the domain's GPUs (nccl-tests -g N) [default: "
                          f"{DEFAULT_LAUNCH}]."),
        click.option("--nvls", type=click.Choice(("on", "off")), default=None,
                     help="--impl nccl: NVLink SHARP as NCCL_NVLS_ENABLE leaves it; off (=0, "
                          "how most clusters run NCCL) takes NVLS and NVLSTree out of its "
                          "tuner's choices [default: on, where the switches reduce]."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), fn)


def _print_prediction(p: Prediction, system_ref: str, overrides: tuple[str, ...],
                      cold: bool, explain: bool) -> None:
    """The prediction for people: every time in the one unit of the total time; then the
    figures the user set, and the guessed figures it rests on, summarised by how much each
    moves it (``pksim_core.sensitivity``; all of them with ``explain``)."""
    unit = time_unit(p.time_s)[0]

    def t(seconds: float) -> str:
        return format_time(seconds, unit)

    if p.schedule.op in FUSED_OPS:
        shape = " ".join(f"{k}={v}" for k, v in p.schedule.shape)
        click.echo(f"{p.schedule.op} {shape} {p.schedule.dtype} on {p.system} "
                   f"({p.schedule.world} ranks, profile {p.profile}): {p.schedule.label()}")
        click.echo(f"  time      {t(p.time_s)}   compute {t(p.compute_s)}   "
                   f"exposed comm {t(p.exposed_comm_s)}")
        click.echo(f"  baseline  {t(p.baseline_s)} (cuBLAS + NCCL)   "
                   f"speed-up {p.speedup:.2f}x   bound {t(p.bound_s)} ({p.bound_resource})")
        for note in p.notes:
            click.echo(f"  note      {note}")
    else:
        click.echo(f"{p.schedule.op} {format_bytes(p.nbytes)} on {p.system} "
                   f"({p.schedule.world} ranks, profile {p.profile}): {p.schedule.label()}")
        click.echo(f"  time      {t(p.time_s)}   algbw {p.algbw_GBps:.1f} GB/s   "
                   f"busbw {p.busbw_GBps:.1f} GB/s   link_util {p.link_util:.2f}")
        click.echo(f"  bound     {t(p.bound_s)} ({_bound_parts(p.bound_resource)})   "
                   f"alpha-beta {t(p.alpha_beta_s)}")
        busy = ", ".join(f"{k} {t(v)}" for k, v in
                         sorted(p.breakdown.items(), key=lambda kv: -kv[1]))
        click.echo(f"  busy      {busy}")
    if overrides:
        click.echo(f"  set       {', '.join(overrides)}")
    if not p.depends_on_assumed:
        return
    found = swings(system_ref, overrides, p, cold, screen=None if explain else SHOWN)
    if explain:
        click.echo(f"  assumed   {_figures(len(found))}, each set 20 % lower and higher "
                   f"(the same schedule simulated again):")
        table("", ["figure", "value", "provenance", "-20 %", "+20 %"],
              [[s.key, _value(s.value), s.tag, _change(s.low_s, p.time_s),
                _change(s.high_s, p.time_s)] for s in found])
        return
    moving = [s for s in found[:SHOWN] if s.change(p.time_s) >= MOVES]
    most = ("; the most it moves at -20 % / +20 %: " + ", ".join(
        f"{s.key} {_change(s.low_s, p.time_s)} / {_change(s.high_s, p.time_s)}"
        for s in moving)) if moving else "; none moves it 0.1 % at -20 % or +20 %"
    click.echo(f"  assumed   {_figures(len(found))}{most} (--explain lists all)")


SHOWN = 3           # the guessed figures predict names: the ones that move the time most
MOVES = 1e-3        # ... by at least 0.1 % either way


def _figures(n: int) -> str:
    return f"{n} guessed figure" + ("" if n == 1 else "s")


def _value(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _bound_parts(resource: str) -> str:
    """What the lower bound adds up (pksim_core.analytical): the launch, then the latency chain
    or the busiest resource's bytes at its capacity."""
    return ("launch + the latency chain" if resource == "latency" else
            f"launch + {resource}'s bytes at its capacity")


def _change(t: float | None, base: float) -> str:
    """A re-simulated time as a change of the prediction: '+1.3 %' ('n/a': not simulated)."""
    return "n/a" if t is None else f"{100 * (t - base) / base:+.1f} %"


def need_op(kw) -> None:
    """Without --program, --system and --op are required (a usage error, before any work)."""
    for key, flag in (("system_name", "--system"), ("op", "--op")):
        if kw.get(key) is None:
            raise click.UsageError(f"Missing option '{flag}' (or give --program).")


@click.command()
@op_options
@click.option("--explain", is_flag=True,
              help="List every guessed figure the prediction rests on, with how much the "
                   "time moves when it is 20 % lower or higher.")
def predict(explain: bool, **kw) -> None:
    """Predict one operation; without schedule options, the best schedule found.

    Collectives take --bytes; gemm-rs, gemm-ar and ag-gemm take --m --n --k
    (each rank's own GEMM); ring-attention and ulysses-attention take --batch --heads
    --seq --head-dim; moe-dispatch-gemm and moe-combine take --tokens --hidden
    --experts --topk --expert-hidden [--skew]. --program NAME|FILE predicts a whole program
    (pksim programs list): the baseline as PyTorch + NCCL run it, pksim's best, the roofline."""
    if not kw["program"]:
        need_op(kw)
    result = api.predict_options(Options.from_cli(kw))
    if kw["as_json"]:
        emit_json(result.to_dict())
    elif kw["program"]:
        print_program(result)
    else:
        _print_prediction(result.prediction, kw["system_name"], kw["overrides"], kw["cold"],
                          explain)


@click.command()
@op_options
@click.option("--top", type=int, default=10, show_default=True,
              help="How many to list (candidates whose lower bound exceeds the top-th "
                   "best time are not simulated).")
def search(top: int, **kw) -> None:
    """Rank candidate schedules by predicted time: the --top best of every candidate,
    found by branch and bound (the table says how many were simulated and pruned)."""
    if not kw["program"]:
        need_op(kw)
    found = api.search_options(Options.from_cli(kw), top)
    if kw["as_json"]:
        emit_json(found.to_dict())
        return
    if kw["program"]:
        print_program_search(found.to_dict())
        return
    ranked, emit = found.ranked, found.emittable
    counts = (f"{found.candidates} candidates: {found.simulated} simulated, "
              f"{len(found.pruned)} pruned by their lower bound, "
              f"{len(found.infeasible)} infeasible")
    where = f"{kw['system_name']} (profile {found.system.profile.name})"
    if kw["op"] in FUSED_OPS:
        table(f"{kw['op']} on {where}: {counts}",
              ["schedule", "time", "exposed comm", "speed-up", "bound", "bound by"],
              [[_marked(p, emit), Seconds(p.time_s), Seconds(p.exposed_comm_s),
                f"{p.speedup:.2f}x", Seconds(p.bound_s), p.bound_resource]
               for p in ranked[:top]])
    else:
        table(f"{kw['op']} {format_bytes(ranked[0].nbytes)} on {where}: {counts}",
              ["schedule", "time", "busbw GB/s", "bound", "bound by", "link util"],
              [[_marked(p, emit), Seconds(p.time_s), f"{p.busbw_GBps:.1f}",
                Seconds(p.bound_s), p.bound_resource, f"{p.link_util:.2f}"]
               for p in ranked[:top]])
    _not_emittable_notes(emit)


NOT_EMITTABLE_MARK = " *"


def _marked(p: Prediction, emit: dict) -> str:
    """A schedule's label, marked when pksim codegen cannot emit it."""
    return p.schedule.label() + ("" if emit[p.schedule]["emittable"] else NOT_EMITTABLE_MARK)


def _not_emittable_notes(emit: dict) -> None:
    """One line per reason a listed schedule cannot be emitted (the rows marked *)."""
    reasons: dict[str, list[str]] = {}
    for sched, e in emit.items():
        if not e["emittable"]:
            reasons.setdefault(e["not_emittable"], []).append(sched.label())
    for why, labels in reasons.items():
        more = f" and {len(labels) - 1} more" if len(labels) > 1 else ""
        click.echo(f"* not emittable by pksim codegen ({labels[0]}{more}): {why}")
