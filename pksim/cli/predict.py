"""``pksim predict`` and ``pksim search``: one operation on one system."""
from __future__ import annotations

import functools

import click

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.topology import Topology
from hwmodels.units import format_bytes, format_time, parse_bytes
from pksim.cli.comm_options import comm_extra, comm_options
from pksim.cli.output import emit_json, table
from pksim.cli.programs import (print_prediction as print_program, print_search as
                                print_program_search, program_prediction, search_program)
from pksim.collective import as_run
from pksim.kernel_contract import emittable_fields
from pksim.prediction import Prediction
from pksim.cli.op_checks import check_applies, nccl_algo
from pksim.inputs import (check_bytes, check_comm_sms, check_dtype, check_elements,
                          check_operands, check_root, check_skew, check_world, even_bytes)
from pksim.schedule import ALGORITHMS, DTYPES, IMPLS, MECHANISMS, OVERLAPS, PEER_ORDERS, Schedule
from pksim.nccl import DEFAULT_LAUNCH, LAUNCH_MODES, nccl_schedule, report as nccl_report
from pksim.search import SearchResult, fused_space, search as run_search, space
from pksim.workloads.fused import ALGORITHMS as FUSED_ALGORITHMS
from pksim.workloads.fused import FUSED_OPS, SHAPE_KEYS, check_shape, operand_bytes
from pksim.simulate import predict as run_predict
from pksim.versus import versus_nccl
from pksim.workloads.collectives import COLLECTIVES


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
                          "(default: the newest in pksim.nccl_constants)."),
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


def _fused_candidates(system, kw, world: int) -> list[Schedule]:
    values = dict(kw, n=kw["n_"])
    shape = {}
    for key in SHAPE_KEYS[kw["op"]]:
        if values.get(key) is None:
            raise ConfigError(f"--op {kw['op']} needs --{key.replace('_', '-')}")
        shape[key] = values[key]
    check_shape(kw["op"], shape, world)
    check_operands(system, kw["op"], shape, kw["dtype"], world, "the shape options")
    check_skew(kw["skew"])
    if kw["skew"] and not kw["op"].startswith("moe"):
        raise ConfigError(f"--skew {kw['skew']:g}: only the MoE ops route tokens, not {kw['op']}")
    if kw["overlap"] == "none":
        fixed = [f for f, k in (("--algorithm", "algorithm"), ("--mechanism", "mechanism"),
                                ("--comm-sms", "comm_sms"), ("--chunk-bytes", "chunk_bytes"))
                 if kw[k] is not None]
        if fixed:
            raise ConfigError(f"{fixed[0]}: --overlap none is the library kernel, then NCCL: "
                              f"it has no {fixed[0][2:]} to fix")
    if kw["algorithm"] and kw["algorithm"] not in FUSED_ALGORITHMS[kw["op"]]:
        raise ConfigError(f"--algorithm {kw['algorithm']}: {kw['op']} communicates by "
                          f"{', '.join(FUSED_ALGORITHMS[kw['op']])}")
    chunk = _chunk(kw) if kw["chunk_bytes"] is not None else 0
    if chunk:
        check_elements(chunk, kw["dtype"], "--chunk-bytes")
        whole = operand_bytes(kw["op"], shape, world, DTYPES[kw["dtype"]])
        if chunk > whole:
            raise ConfigError(f"--chunk-bytes {kw['chunk_bytes']}: larger than all of a rank's "
                              f"operands ({format_bytes(whole)}); 0: one chunk per peer")
    if kw["impl"] == "nccl":
        overlaps = ("none",)
    else:
        overlaps = (kw["overlap"],) if kw["overlap"] else ()
    return fused_space(system, kw["op"], shape, kw["world"], kw["domains"], kw["dtype"],
                       overlaps=overlaps,
                       algorithms=(kw["algorithm"],) if kw["algorithm"] else (),
                       mechanisms=(kw["mechanism"],) if kw["mechanism"] else (),
                       comm_sms=(kw["comm_sms"],) if kw["comm_sms"] else (),
                       skew=kw["skew"], chunks=(_chunk(kw),) if kw["chunk_bytes"] else ())


def _chunk(kw) -> int:
    return 0 if kw["chunk_bytes"] in ("0", 0) else parse_bytes(kw["chunk_bytes"], "--chunk-bytes")


def _candidates(system, kw) -> list[Schedule]:
    cands = _space(system, kw)
    if kw.get("label") is None:
        return cands
    # a label names the schedule as it runs (a streamed in-network kernel's chunk included)
    chosen = list(dict.fromkeys(c for c in cands
                                if kw["label"] in (c.label(), as_run(c).label())))
    if not chosen:
        labels = sorted({c.label() for c in cands})
        raise ConfigError(f"--schedule {kw['label']!r} is not a candidate here "
                          f"({len(labels)} are, e.g. {', '.join(labels[:3])}; "
                          f"pksim search lists them)")
    return chosen


def _space(system, kw) -> list[Schedule]:
    world = check_world(system, kw["world"], kw["domains"])
    check_comm_sms(system, kw["comm_sms"], world, kw["domains"])
    check_root(kw["root"], world)
    check_dtype(system, kw["dtype"])
    check_applies(kw)
    if kw["op"] in FUSED_OPS:
        return _fused_candidates(system, kw, world)
    extra, implied = comm_extra(kw, kw["op"], world)
    if kw["size"] is None and implied is None:
        raise ConfigError(f"--op {kw['op']} needs --bytes")
    nbytes = implied if implied is not None else parse_bytes(kw["size"])
    check_bytes(system, kw["op"], nbytes, kw["dtype"], world)
    nbytes, note = even_bytes(kw["op"], nbytes, kw["dtype"], world)
    if note:
        click.echo(f"pksim: note: {note}", err=True)
    if kw["impl"] == "nccl":
        sched = nccl_schedule(system, kw["op"], nbytes, kw["world"], kw["domains"],
                              kw.get("nccl_version"), kw.get("launch") or DEFAULT_LAUNCH,
                              nvls=kw.get("nvls") != "off", algo=nccl_algo(kw, kw["op"]))
        return [sched.with_(root=kw["root"], dtype=kw["dtype"],
                            extra=tuple(sorted(dict(sched.extra, **dict(extra)).items())))]
    chunk = None if kw["chunk_bytes"] is None else _chunk(kw)
    if chunk:
        check_elements(chunk, kw["dtype"], "--chunk-bytes")
        if chunk >= nbytes:
            raise ConfigError(f"--chunk-bytes {kw['chunk_bytes']}: a pipeline chunk must be "
                              f"smaller than the buffer ({format_bytes(nbytes)}); 0: none")
    cands = space(system, kw["op"], nbytes, kw["world"], kw["domains"],
                  algorithms=(kw["algorithm"],) if kw["algorithm"] else (),
                  mechanisms=(kw["mechanism"],) if kw["mechanism"] else (),
                  comm_sms=(kw["comm_sms"],) if kw["comm_sms"] else (),
                  chunks=(chunk,) if chunk is not None else (), extra=extra)
    if kw["peer_order"]:
        cands = list({c.with_(peer_order=kw["peer_order"]) for c in cands})
    if kw["algorithm"] and kw["mechanism"] is None and kw["algorithm"] == "in-network":
        cands = [c for c in cands if c.mechanism == "multimem"]
    return [c.with_(root=kw["root"], dtype=kw["dtype"]) for c in cands]


def _print_prediction(p: Prediction) -> None:
    if p.schedule.op in FUSED_OPS:
        shape = " ".join(f"{k}={v}" for k, v in p.schedule.shape)
        click.echo(f"{p.schedule.op} {shape} {p.schedule.dtype} on {p.system} "
                   f"({p.schedule.world} ranks): {p.schedule.label()}")
        click.echo(f"  time      {format_time(p.time_s)}   compute {format_time(p.compute_s)}   "
                   f"exposed comm {format_time(p.exposed_comm_s)}")
        click.echo(f"  baseline  {format_time(p.baseline_s)} (cuBLAS + NCCL)   "
                   f"speed-up {p.speedup:.2f}x   bound {format_time(p.bound_s)} "
                   f"({p.bound_resource})")
        for note in p.notes:
            click.echo(f"  note      {note}")
        return
    click.echo(f"{p.schedule.op} {format_bytes(p.nbytes)} on {p.system} "
               f"({p.schedule.world} ranks): {p.schedule.label()}")
    click.echo(f"  time      {format_time(p.time_s)}   algbw {p.algbw_GBps:.1f} GB/s   "
               f"busbw {p.busbw_GBps:.1f} GB/s   link_util {p.link_util:.2f}")
    click.echo(f"  bound     {format_time(p.bound_s)} ({p.bound_resource})   "
               f"alpha-beta {format_time(p.alpha_beta_s)}")
    busy = ", ".join(f"{k} {format_time(v)}" for k, v in
                     sorted(p.breakdown.items(), key=lambda kv: -kv[1]))
    click.echo(f"  busy      {busy}")
    if p.depends_on_assumed:
        click.echo(f"  assumed   {', '.join(p.depends_on_assumed)}")


def _search(kw, top: int = 1):
    """The ranked predictions (the first ``top`` are the best of every candidate; the
    search prunes by lower bound what cannot be among them) and the search result."""
    need_op(kw)
    system = load_system(kw["system_name"], kw["overrides"])
    cands = _candidates(system, kw)
    if len(cands) == 1:                    # a fixed schedule: --full simulates every rank
        p = run_predict(system, cands[0], reduced=not kw["full"], cold=kw["cold"])
        return system, [p], SearchResult((p,), (), 1)
    if kw["full"]:
        raise ConfigError(f"--full simulates every rank of one schedule, and these options "
                          f"leave {len(cands)}: fix it (--schedule LABEL, or --algorithm, "
                          f"--mechanism, --comm-sms, ...)")
    result = run_search(system, cands, top=top, cold=kw["cold"])
    return system, list(result.ranked), result


def need_op(kw) -> None:
    """Without --program, --system and --op are required."""
    for key, flag in (("system_name", "--system"), ("op", "--op")):
        if kw.get(key) is None:
            raise click.UsageError(f"Missing option '{flag}' (or give --program).")


@click.command()
@op_options
def predict(**kw) -> None:
    """Predict one operation; without schedule options, the best schedule found.

    Collectives take --bytes; gemm-rs, gemm-ar and ag-gemm take --m --n --k
    (each rank's own GEMM); ring-attention and ulysses-attention take --batch --heads
    --seq --head-dim; moe-dispatch-gemm and moe-combine take --tokens --hidden
    --experts --topk --expert-hidden [--skew]. --program NAME|FILE predicts a whole program
    (pksim programs list): the baseline as PyTorch + NCCL run it, pksim's best, the roofline."""
    if kw["program"]:
        p = program_prediction(kw)
        if kw["as_json"]:
            emit_json(p.to_dict(timeline=True))
        else:
            print_program(p)
        return
    system, ranked, _ = _search(kw, top=1)
    best = ranked[0]
    if kw["as_json"]:
        out = best.to_dict() | emittable_fields(system, best.schedule)
        if best.schedule.impl == "nccl" and best.schedule.op in COLLECTIVES:
            out["nccl"] = nccl_report(system, best.schedule)
        elif best.schedule.op in COLLECTIVES and best.schedule.world > 1 \
                and not Topology.build(system, best.schedule.world,
                                       best.schedule.domains).virtual:
            # pk's schedule against NCCL's own pick: both bindings, the difference itemised
            out["vs_nccl"] = versus_nccl(system, best.schedule.op, best.nbytes,
                                         best.schedule.world, best.schedule.domains,
                                         kw.get("launch") or DEFAULT_LAUNCH, pk=best)
        emit_json(out)
    else:
        _print_prediction(best)


@click.command()
@op_options
@click.option("--top", type=int, default=10, show_default=True,
              help="How many to list (candidates whose lower bound exceeds the top-th "
                   "best time are not simulated).")
def search(top: int, **kw) -> None:
    """Rank candidate schedules by predicted time: the --top best of every candidate,
    found by branch and bound (the table says how many were simulated and pruned)."""
    if top < 1:
        raise ConfigError(f"--top must be at least 1, got {top}")
    if kw["program"]:
        found = search_program(kw, top)
        if kw["as_json"]:
            emit_json(found)
        else:
            print_program_search(found)
        return
    system, ranked, result = _search(kw, top=top)
    infeasible = result.infeasible
    emit = {p.schedule: emittable_fields(system, p.schedule) for p in ranked[:top]}
    if kw["as_json"]:
        emit_json({"ranked": [p.to_dict() | emit[p.schedule] for p in ranked[:top]],
                   "candidates": result.candidates, "simulated": result.simulated,
                   "pruned": [{"label": s, "bound_s": b} for s, b in result.pruned],
                   "infeasible": [{"label": s, "reason": r} for s, r in infeasible]})
        return
    counts = (f"{result.candidates} candidates: {result.simulated} simulated, "
              f"{len(result.pruned)} pruned by their lower bound, {len(infeasible)} infeasible")
    if kw["op"] in FUSED_OPS:
        table(f"{kw['op']} on {kw['system_name']}: {counts}",
              ["schedule", "time", "exposed comm", "speed-up", "bound", "binding"],
              [[_marked(p, emit), format_time(p.time_s), format_time(p.exposed_comm_s),
                f"{p.speedup:.2f}x", format_time(p.bound_s), p.bound_resource]
               for p in ranked[:top]])
    else:
        table(f"{kw['op']} {format_bytes(ranked[0].nbytes)} on {kw['system_name']}: {counts}",
              ["schedule", "time", "busbw GB/s", "bound", "binding", "link util"],
              [[_marked(p, emit), format_time(p.time_s), f"{p.busbw_GBps:.1f}",
                format_time(p.bound_s), p.bound_resource, f"{p.link_util:.2f}"]
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
