"""``pksim programs list|show`` (the shipped programs, as ``systems list|show`` lists systems)
and what ``predict``, ``search`` and ``trace`` do with ``--program``."""
from __future__ import annotations

import click

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes, format_time
from pksim.cli.output import emit_json, table
from pksim.programs import list_programs, load_program, predict_program
from pksim.programs.costs import calls, kernel_call
from pksim.programs.model import Program
from pksim.programs.predict import ProgramPrediction
from pksim.search import search as run_search, space

DEFAULT_SYSTEM = "dgx-h100"
# predict / search / trace options that a program states itself
_PROGRAM_STATES = ("op", "size", "m", "n_", "k", "batch", "heads", "seq", "head_dim", "tokens",
                   "hidden", "experts", "topk", "expert_hidden", "world", "algorithm",
                   "mechanism", "comm_sms", "chunk_bytes", "peer_order", "label", "overlap",
                   "splits", "peers", "reduce_op", "epilogue", "launch", "nvls", "nccl_version")
# The options with a default that a program states too: given otherwise, an error.
_PROGRAM_DEFAULTS = {"dtype": "bf16", "skew": 0.0, "root": 0, "domains": 1, "cold": False,
                     "full": False}


@click.group()
def programs() -> None:
    """Whole multi-GPU problems as programs: list, show (and report)."""


@programs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(as_json: bool) -> None:
    """One line per shipped program, with the ParallelKernelBench problems it covers."""
    rows = [load_program(name).summary() for name in list_programs()]
    if as_json:
        emit_json(rows)
        return
    table(f"pksim programs ({len(rows)} programs, {sum(len(r['covers']) for r in rows)} "
          f"problems covered)", ["program", "covers", "ops", "collectives", "comm bytes",
                                 "FLOP", "description"],
          [[r["name"], ",".join(map(str, r["covers"])), r["ops"], r["collectives"],
            format_bytes(r["comm_bytes"]), f"{r['flops']:.3g}", r["description"][:60]]
           for r in rows])


def detail(program: Program) -> dict:
    ops = []
    for op in program.ops:
        entry = {"name": op.name, "kind": op.kind, "reads": list(op.reads),
                 "writes": list(op.writes), "deps": list(op.deps), "dtype": op.dtype,
                 "flops": op.flops or None, "bytes": op.nbytes or None}
        if op.is_comm:
            entry.update(group=op.group, group_size=program.groups[op.group].size,
                         comm_bytes=op.comm_bytes)
        entry["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in op.params}
        ops.append(entry)
    return {**program.summary(), "path": program.path, "source": program.source,
            "notes": list(program.notes), "dtype": program.dtype,
            "tensors": {t.name: {"shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes}
                        for t in program.tensors.values()},
            "groups": {g.name: [list(p) for p in g.parts] for g in program.groups.values()},
            "ops": ops}


@programs.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, as_json: bool) -> None:
    """Program NAME (a shipped name or a .toml path): tensors, groups and ops in issue order."""
    program = load_program(name)
    out = detail(program)
    if as_json:
        emit_json(out)
        return
    click.echo(f"{program.name}: {program.description}")
    click.echo(f"file: {program.path}; covers {', '.join(map(str, program.covers)) or '-'}; "
               f"world {program.world}")
    if program.source:
        click.echo(f"source: {program.source}")
    groups = ", ".join(f"{g} {len(p)}x{len(p[0])}" for g, p in out["groups"].items())
    click.echo(f"groups: {groups}")
    table("ops", ["op", "kind", "group", "size", "FLOP", "bytes", "after"],
          [[o["name"], o["kind"], o.get("group", ""),
            format_bytes(o["comm_bytes"]) if o.get("comm_bytes") is not None else "",
            f"{o['flops']:.3g}" if o["flops"] else "", format_bytes(o["bytes"]) if o["bytes"]
            else "", ",".join(o["deps"])] for o in out["ops"]])


# ---- --program on predict, search, trace ----------------------------------------------------
def check_program_options(kw: dict) -> None:
    """A program says what runs: options that say it too are errors."""
    given = [k for k in _PROGRAM_STATES if kw.get(k) is not None]
    given += [k for k, v in _PROGRAM_DEFAULTS.items() if kw.get(k, v) != v]
    if given:
        flag = "--" + given[0].rstrip("_").replace("_", "-")
        flag = {"--size": "--bytes", "--label": "--schedule", "--cold": "--cold-l2"}.get(flag,
                                                                                      flag)
        raise ConfigError(f"--program states what runs: leave out {flag}")
    if kw.get("impl", "pk") != "pk":
        raise ConfigError("--program predicts both NCCL's baseline and pksim's best: leave out "
                          "--impl")


def program_prediction(kw: dict) -> ProgramPrediction:
    check_program_options(kw)
    system = load_system(kw["system_name"] or DEFAULT_SYSTEM, kw["overrides"])
    program = load_program(kw["program"])
    capacity = system.domain.gpus_per_domain
    if program.world > capacity:
        raise ConfigError(f"--program {program.name}: world {program.world} is larger than "
                          f"{system.name}'s {capacity} GPUs per domain")
    return predict_program(system, program)


def print_prediction(p: ProgramPrediction) -> None:
    covers = f"; covers {', '.join(map(str, p.covers))}" if p.covers else ""
    click.echo(f"program {p.program} on {p.system} ({p.world} ranks{covers})")
    click.echo(f"  baseline  {format_time(p.baseline_s):>9}   {'PyTorch + NCCL, one stream':30}"
               f"{p.baseline_pct:5.1f} % of roofline")
    click.echo(f"  pksim     {format_time(p.best_s):>9}   {f'speed-up {p.speedup:.2f}x':30}"
               f"{p.best_pct:5.1f} % of roofline")
    terms = ", ".join(f"{k} {format_time(v)}" for k, v in p.roofline_terms.items() if v)
    click.echo(f"  roofline  {format_time(p.roofline_s):>9}   bound by {p.roofline_resource} "
               f"({terms})")
    for note in p.notes:
        click.echo(f"  note      {note}")
    table("per op", ["op", "kind", "size / FLOP", "baseline", "baseline runs", "pksim",
                     "pksim runs", "roofline"],
          [[r.name, r.kind, format_bytes(r.comm_bytes) if r.comm_bytes is not None else
            (f"{r.flops:.3g} FLOP" if r.flops else ""),
            format_time(r.baseline_end_s - r.baseline_start_s), r.baseline_label,
            format_time(r.best_end_s - r.best_start_s),
            r.best_label + (f" [{r.best_task}]" if r.best_task != r.name else ""),
            f"{format_time(r.roofline_s)} {r.roofline_resource}"] for r in p.ops])


def prediction_json(p: ProgramPrediction) -> dict:
    return p.to_dict(timeline=True)


def search_program(kw: dict, top: int) -> dict:
    """pk's ranked schedules for each distinct collective call of the program."""
    check_program_options(kw)
    system = load_system(kw["system_name"] or DEFAULT_SYSTEM, kw["overrides"])
    program = load_program(kw["program"])
    seen: dict = {}
    for op in program.comm_ops:
        kernel = kernel_call(program, op)      # the -v and send-recv kernels at their splits
        if op.kind == "sendrecv" and kernel is None:
            continue
        for call in [kernel] if kernel is not None else calls(program, op):
            if call.world < 2:
                continue
            seen.setdefault(call, []).append(op.name)
    out = []
    for call, ops in seen.items():
        cands = [c.with_(root=call.root, dtype=call.dtype)
                 for c in space(system, call.op, call.nbytes, call.world, extra=call.extra)
                 if call.in_switch or c.mechanism != "multimem"]
        result = run_search(system, cands, top=top)
        out.append({"ops": ops, "op": call.op, "bytes": call.nbytes, "world": call.world,
                    "ranked": [{"label": p.schedule.label(), "time_s": p.time_s,
                                "bound_s": p.bound_s} for p in result.ranked[:top]],
                    "candidates": result.candidates, "simulated": result.simulated})
    return {"program": program.name, "system": system.name, "calls": out}


def print_search(found: dict) -> None:
    for entry in found["calls"]:
        table(f"{entry['op']} {format_bytes(entry['bytes'])} over {entry['world']} ranks "
              f"({', '.join(entry['ops'])}) on {found['system']}: {entry['candidates']} "
              f"candidates, {entry['simulated']} simulated",
              ["schedule", "time", "bound"],
              [[r["label"], format_time(r["time_s"]), format_time(r["bound_s"])]
               for r in entry["ranked"]])
