"""``pksim codegen``: emit (and optionally build) the CUDA collective for a schedule.

Without schedule options the simulator's best schedule among those codegen implements is
emitted; each schedule option narrows that search (all of them: one schedule). The fused
GEMM + communication ops (gemm-rs, ag-gemm, gemm-ar) take --m --n --k instead of --bytes and
--overlap intra-sm|inter-sm (codegen.fused).
"""
from __future__ import annotations

import functools
import json
import shlex
import sys
from pathlib import Path

import click

import codegen as cg
from codegen.fused import OPS as FUSED_CODEGEN_OPS
from codegen.plan import OPS as CODEGEN_OPS
from codegen.plan import algorithms as codegen_algorithms
from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError, InfeasibleError
from hwmodels.system import System
from hwmodels.units import format_bytes, format_time, parse_bytes
from pksim_cli.codegen_program import codegen_program
from pksim_cli.comm_options import comm_extra, comm_options
from pksim.api.op_checks import check_applies
from pksim_cli.output import emit_json
from pksim_core.inputs import check_bytes, check_comm_sms, check_operands, check_world, even_bytes
from pksim_core.plots import check_writable
from pksim_core.kernel_contract import (FUSED_KERNELS, HIERARCHICAL_PARTS, RUNNABLE_MECHANISMS,
                                   emit_reason)
from pksim_core.prediction import Prediction
from pksim_core.schedule import ALGORITHMS, DTYPES, MECHANISMS, PEER_ORDERS, Schedule
from pksim_core.search import fused_space, search, space
from pksim_core.workloads.fused_ops import check_shape
from validation.environment import require


def choose(system: System, op: str, nbytes: int, world: int | None, dtype: str,
           algorithm: str | None = None, mechanism: str | None = None, comm_sms: int | None = None,
           peer_order: str | None = None, root: int = 0, runnable_only: bool = False,
           label: str | None = None, domains: int = 1,
           extra: tuple = ()) -> tuple[Schedule, Prediction | None]:
    """The fastest predicted schedule that codegen can emit (narrowed by the options). Asked
    for one it cannot emit (kernel_contract.emit_reason), an InfeasibleError with the reason
    and the closest schedule it can. ``extra``: split sizes, send-recv's pairs, a reduce op or an
    epilogue (Schedule.extra)."""
    algs = codegen_algorithms(op)
    if domains > 1:              # over several domains: the hierarchical NVLink + NCCL split
        algs = ("hierarchical",) if op in HIERARCHICAL_PARTS else ()
    if algorithm is not None and algorithm in ALGORITHMS:
        algs = (algorithm,)
    mechs = (mechanism,) if mechanism else (RUNNABLE_MECHANISMS if runnable_only else MECHANISMS)
    if runnable_only and mechanism == "multimem":
        raise InfeasibleError("multimem kernels are compile-only here (NVLink multicast stays off)")
    if runnable_only:
        algs = tuple(a for a in algs if a != "in-network")
    cands = _collective_space(system, op, nbytes, world, domains, algs, mechs, comm_sms, dtype,
                              root, peer_order, extra)
    cands = _labelled(list(dict.fromkeys(cands)), label)
    if not cands:
        raise InfeasibleError(f"no {op} schedule matches these options")
    can = [c for c in cands if emit_reason(system, c) is None]
    if not can:
        every = RUNNABLE_MECHANISMS if runnable_only else MECHANISMS
        pool = _collective_space(system, op, nbytes, world, domains, codegen_algorithms(op) + (
            ("hierarchical",) if domains > 1 else ()), every, None, dtype, root, None, extra)
        raise InfeasibleError(_closest_message(system, cands, pool))
    try:
        best = search(system, can, top=1).ranked[0]
    except InfeasibleError:
        # The simulator cannot model every kernel codegen can emit (copy-engine reductions
        # pair copies with a local reduction kernel): with algorithm and mechanism fixed, emit
        # that schedule unpredicted.
        if algorithm is None or mechanism is None:
            raise
        return can[0] if comm_sms else can[0].with_(comm_sms=16), None
    return best.schedule, best


def _collective_space(system, op, nbytes, world, domains, algs, mechs, comm_sms, dtype, root,
                      peer_order, extra=()) -> list[Schedule]:
    cands = space(system, op, nbytes, world, domains, algorithms=algs, mechanisms=mechs,
                  comm_sms=(comm_sms,) if comm_sms else (), chunks=(0,), extra=extra)
    return [c.with_(dtype=dtype, root=root, **({"peer_order": peer_order} if peer_order else {}))
            for c in cands]


# How far apart two schedules are, for "the closest schedule that can be emitted": what the
# user chose first (overlap, algorithm), then the mechanism, then the finer parameters.
_DISTANCE = (("overlap", 8), ("algorithm", 4), ("mechanism", 2), ("comm_sms", 1),
             ("peer_order", 1), ("chunk_bytes", 1))


def _distance(a: Schedule, b: Schedule) -> int:
    return sum(w for field, w in _DISTANCE if getattr(a, field) != getattr(b, field))


def _closest_message(system: System, asked: list[Schedule], pool: list[Schedule]) -> str:
    """Why the asked schedules cannot be emitted, and the closest one of ``pool`` that can
    (the fewest differences, weighted as _DISTANCE; among them the fastest predicted)."""
    first = asked[0]
    why = emit_reason(system, first)
    what = first.label() if len(asked) == 1 else f"none of the {len(asked)} {first.op} schedules asked"
    can = [c for c in dict.fromkeys(pool) if emit_reason(system, c) is None]
    if not can:
        return f"{what} can be emitted on {system.name}: {why}; no {first.op} schedule can"
    near = min(_distance(first, c) for c in can)
    nearest = [c for c in can if _distance(first, c) == near]
    try:
        pick = search(system, nearest, top=1).ranked[0]
        best, note = pick.schedule, f", predicted {format_time(pick.time_s)}"
    except InfeasibleError:
        best, note = nearest[0], ""
    verb = "cannot be emitted" if len(asked) == 1 else "can be emitted"
    return (f"{what} {verb} on {system.name}: {why}; the closest that can: {best.label()}"
            f"{note} (--schedule {best.label()})")


def choose_fused(system: System, op: str, shape: dict[str, int], world: int | None,
                 overlap: str | None = None, algorithm: str | None = None,
                 mechanism: str | None = None, comm_sms: int | None = None,
                 peer_order: str | None = None, label: str | None = None
                 ) -> tuple[Schedule, Prediction | None]:
    """The fastest predicted fused schedule that codegen can emit (narrowed by the options);
    asked for one it cannot, the reason and the closest it can."""
    overlaps = (overlap,) if overlap else ("inter-sm", "intra-sm")

    def cands_of(**narrow) -> list[Schedule]:
        try:
            out = fused_space(system, op, shape, world, 1, "bf16",
                              overlaps=narrow.get("overlaps", overlaps),
                              algorithms=narrow.get("algorithms", ()),
                              mechanisms=narrow.get("mechanisms", ()),
                              comm_sms=narrow.get("comm_sms", ()))
        except InfeasibleError:          # the options leave none: said below, with the kernels
            return []
        out = [c for c in out if c.chunk_bytes == 0]
        if peer_order:
            out = [c.with_(peer_order=peer_order) for c in out]
        return list(dict.fromkeys(out))

    cands = _labelled(cands_of(algorithms=(algorithm,) if algorithm else (),
                               mechanisms=(mechanism,) if mechanism else (),
                               comm_sms=(comm_sms,) if comm_sms else ()), label)
    if not cands:
        have = ", ".join(f"{ov}/{alg}/{'|'.join(m)}" for (o, ov, alg), (_, m) in FUSED_KERNELS.items()
                         if o == op)
        raise InfeasibleError(f"no {op} schedule matches these options (implemented: {have})")
    can = [c for c in cands if emit_reason(system, c) is None]
    if not can:
        raise InfeasibleError(_closest_message(system, cands, cands_of(overlaps=("inter-sm", "intra-sm"))))
    try:
        best = search(system, can, top=1).ranked[0]
    except InfeasibleError:
        if len(can) != 1:
            raise
        return can[0], None
    return best.schedule, best


def _labelled(cands: list[Schedule], label: str | None) -> list[Schedule]:
    """The candidates of ``--schedule LABEL`` (all of them without it)."""
    if label is None:
        return cands
    chosen = [c for c in cands if c.label() == label]
    if cands and not chosen:
        labels = sorted({c.label() for c in cands})
        raise ConfigError(f"--schedule {label!r} is not a schedule codegen implements here "
                          f"({len(labels)} are, e.g. {', '.join(labels[:3])})")
    return chosen


def schedule_options(fn=None, *, default_system: str | None = None, fused: bool = False):
    """The options of codegen and run (run predicts on h200-virtual unless told otherwise);
    ``fused`` adds the fused GEMM ops and their shape and overlap options (codegen only)."""
    if fn is None:
        return functools.partial(schedule_options, default_system=default_system, fused=fused)
    system_help = "Shipped system name or path to a system .toml."
    options = [
        click.option("--system", "system_name", required=default_system is None,
                     default=default_system, show_default=default_system is not None,
                     help=system_help),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a system figure (repeatable)."),
        click.option("--op", default=None,
                     type=click.Choice(CODEGEN_OPS + (FUSED_CODEGEN_OPS if fused else ())),
                     help="Collective" + (", or a fused GEMM + communication op." if fused else ".")),
        click.option("--bytes", "size", required=not fused, metavar="SIZE",
                     help="Size as nccl-tests counts it: bytes or KiB/MiB/GiB"
                          + (" (collectives)." if fused else ".")),
        click.option("--world", type=int, default=None, help="Ranks (default: the domain's GPUs)."),
        click.option("--domains", type=int, default=1, show_default=True,
                     help="NVLink domains: over several, the hierarchical schedule's NVLink part "
                          "is emitted and NCCL's scale-out part named in the manifest."),
        click.option("--dtype", type=click.Choice(tuple(DTYPES)), default="bf16",
                     show_default=True, help="Element type (generated kernels: bf16, fp32)."),
        click.option("--algorithm", type=click.Choice(ALGORITHMS), default=None,
                     help="Fix the algorithm (default: search)."),
        click.option("--mechanism", type=click.Choice(MECHANISMS), default=None,
                     help="Fix the transfer mechanism (default: search)."),
        click.option("--comm-sms", type=int, default=None, help="Fix the communication SMs."),
        click.option("--peer-order", type=click.Choice(PEER_ORDERS), default=None,
                     help="Order of peers for direct algorithms."),
        click.option("--root", type=int, default=0, show_default=True,
                     help="Root of broadcast, reduce, gather and scatter."),
        click.option("--schedule", "label", default=None, metavar="LABEL",
                     help="The schedule of that label (as pksim search prints it)."),
    ]
    if fused:
        options += [
            click.option("--m", type=int, default=None,
                         help="Fused ops: rows of A (gemm-rs, gemm-ar: per rank; ag-gemm: "
                              "gathered)."),
            click.option("--n", "n_", type=int, default=None, help="Fused ops: columns of B."),
            click.option("--k", type=int, default=None,
                         help="Fused ops: the reduction dimension (per rank for gemm-rs, gemm-ar)."),
            click.option("--overlap", type=click.Choice(("intra-sm", "inter-sm")), default=None,
                         help="Fused ops: fix the overlap strategy (default: search)."),
        ]
    return comm_options(functools.reduce(lambda f, opt: opt(f), reversed(options), fn))


def _choose_from(kw, runnable_only: bool = False) -> tuple[System, Schedule, Prediction | None]:
    if kw["op"] is None:
        raise ConfigError("--op is required" + ("" if runnable_only else " (or --program NAME)"))
    system = load_system(kw["system_name"], kw["overrides"])
    check_applies(kw)
    if kw["op"] in FUSED_CODEGEN_OPS:
        return (system, *_choose_fused(system, kw))
    domains = kw.get("domains", 1)
    if runnable_only and domains != 1:
        raise ConfigError("pksim run runs one NVLink domain (virtual ranks on this GPU); "
                          "--domains must be 1")
    world = check_world(system, kw["world"], domains)
    extra, implied = comm_extra(kw, kw["op"], world)
    if kw["size"] is None and implied is None:
        raise ConfigError(f"--op {kw['op']} needs --bytes")
    nbytes = implied if implied is not None else parse_bytes(kw["size"])
    if not 0 <= kw["root"] < world:
        raise ConfigError(f"--root {kw['root']} is not a rank of world {world}")
    check_comm_sms(system, kw["comm_sms"], world, domains)
    check_bytes(system, kw["op"], nbytes, kw["dtype"], world)
    nbytes, note = even_bytes(kw["op"], nbytes, kw["dtype"], world)
    if note:
        click.echo(f"pksim: note: {note}", err=True)
    if kw["dtype"] not in ("bf16", "fp32"):
        raise InfeasibleError(f"generated kernels handle bf16 and fp32, not {kw['dtype']}")
    sched, pred = choose(system, kw["op"], nbytes, kw["world"], kw["dtype"], kw["algorithm"],
                         kw["mechanism"], kw["comm_sms"], kw["peer_order"], kw["root"],
                         runnable_only=runnable_only, label=kw.get("label"), domains=domains,
                         extra=extra)
    return system, sched, pred


def _choose_fused(system: System, kw) -> tuple[Schedule, Prediction | None]:
    shape = {}
    for key, opt in (("m", "m"), ("n", "n_"), ("k", "k")):
        if kw.get(opt) is None:
            raise ConfigError(f"--op {kw['op']} needs --{key}")
        if kw[opt] < 1:
            raise ConfigError(f"--{key} must be at least 1, got {kw[opt]}")
        shape[key] = kw[opt]
    if kw.get("domains", 1) != 1:
        raise InfeasibleError("fused kernels run inside one NVLink domain (--domains 1)")
    world = check_world(system, kw["world"])
    check_comm_sms(system, kw["comm_sms"], world)
    check_shape(kw["op"], shape, world)
    check_operands(system, kw["op"], shape, kw["dtype"], world, "--m --n --k")
    if kw["dtype"] != "bf16":
        raise InfeasibleError(f"the fused kernels are bf16 (the Hopper GEMM), not {kw['dtype']}")
    return choose_fused(system, kw["op"], shape, kw["world"], kw["overlap"], kw["algorithm"],
                        kw["mechanism"], kw["comm_sms"], kw["peer_order"], kw.get("label"))


def output_options(fn):
    """``-o/--output DIR`` (``--out``: a hidden alias kept for old scripts) and ``--force``."""
    for option in reversed([
        click.option("-o", "--output", "out_dir", default=None, metavar="DIR",
                     help="Directory for <op>-<hash>.cu and <op>-<hash>.json."),
        click.option("--out", "out_alias", default=None, hidden=True),
        click.option("--force", is_flag=True, help="Overwrite files already there."),
    ]):
        fn = option(fn)
    return fn


def unit_files(system: System, sched: Schedule) -> list[str]:
    """The files ``codegen.emit`` writes for ``sched`` (and ``--build`` adds)."""
    plan = (cg.fused.make_plan if sched.op in FUSED_CODEGEN_OPS else cg.make_plan)(system, sched)
    return [f"{plan.name}.cu", f"{plan.name}.json", f"lib{plan.name}.so"]


@click.command()
@schedule_options(fused=True)
@output_options
@click.option("--build", "do_build", is_flag=True, help="Also compile it (cached by content).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@click.option("--program", default=None, metavar="NAME|FILE",
              help="Instead of --op: every communication op of a program (a shipped name, "
                   "pksim programs list, or a .toml), one kernel per distinct schedule, and an "
                   "index program-<name>.json.")
def codegen(out_dir: str | None, out_alias: str | None, force: bool, do_build: bool,
            as_json: bool, program: str | None, **kw) -> None:
    """Write the CUDA source of a collective's or fused op's best (or given) schedule, and
    its manifest (never over an existing file without --force); with --program, the kernels of
    a program's communication."""
    out_dir = out_dir or out_alias
    if out_dir is None:
        raise ConfigError("pksim codegen needs -o/--output DIR")
    check_writable(out_dir)
    require("codegen --build" if do_build else "codegen")   # before anything is built
    if program is not None:
        codegen_program(program, out_dir, force, do_build, as_json, kw)
        return
    system, sched, pred = _choose_from(kw)
    clash = [name for name in unit_files(system, sched) if (Path(out_dir) / name).exists()]
    if clash and not force:
        raise ConfigError(f"{Path(out_dir) / clash[0]} exists: use --force to overwrite, "
                          f"or -o another folder")
    command = "pksim codegen " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["codegen"] else ""
    emitted = cg.emit(system, sched, pred, out_dir, command=command)
    lib = cg.build(emitted.source, copy_to_dir=True) if do_build else None
    if as_json:
        data = json.loads(emitted.manifest.read_text())
        data["files"] = {"source": str(emitted.source), "manifest": str(emitted.manifest),
                         "library": str(lib) if lib else None}
        emit_json(data)
        return
    predicted = (f"predicted {format_time(pred.time_s)}" if pred else
                 "not predicted (the simulator cannot model this schedule)")
    size = (" ".join(f"{k}={v}" for k, v in sched.shape) if sched.op in FUSED_CODEGEN_OPS
            else format_bytes(sched.dim("bytes")))
    click.echo(f"{sched.op} {size} on {system.name} "
               f"({sched.world} ranks): {sched.label()}, {predicted}")
    click.echo(f"  source    {emitted.source}")
    click.echo(f"  manifest  {emitted.manifest}")
    if lib:
        click.echo(f"  library   {lib}")
