"""``pksim run``: build a generated collective, run it on this machine's GPU with random
inputs, check every rank against torch, time it, and print predicted vs measured."""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import click

import codegen as cg
from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes, format_time
from pksim_cli.codegen import _choose_from, schedule_options
from pksim_cli.output import emit_json
from pksim_core.plots import check_writable
from validation.environment import require
from validation.runtime import reference
from validation.runtime.collectives import Collective, Library, VirtualRanks, time_calls
from validation.runtime.library import ensure_eager_loading


@click.command()
@schedule_options(default_system="h200-virtual")
@click.option("--virtual", is_flag=True,
              help="Virtual ranks: every rank on this process's GPU, in one launch.")
@click.option("--iters", type=int, default=20, show_default=True, help="Timed calls (median).")
@click.option("--warmup", type=int, default=3, show_default=True, help="Untimed calls first.")
@click.option("--blocks-per-rank", type=int, default=0,
              help="Override the generated blocks per rank (0: the schedule's).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("-o", "--output", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Keep the generated source here (default: a temporary directory).")
@click.option("--out", "out_alias", default=None, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def run(virtual: bool, iters: int, warmup: int, blocks_per_rank: int, seed: int,
        out_dir: str | None, out_alias: str | None, as_json: bool, **kw) -> None:
    """Build, check and time one collective on the GPU (predicted on --system)."""
    if not virtual:
        raise ConfigError("pksim run needs --virtual; ranks in separate processes run under "
                          "torchrun: torchrun --nproc_per_node=N -m validation.run.collectives "
                          "--ipc --cases CASES.json --out RESULTS.jsonl")
    if iters < 1:
        raise ConfigError(f"--iters must be at least 1, got {iters}")
    if warmup < 0:
        raise ConfigError(f"--warmup must be at least 0, got {warmup}")
    if blocks_per_rank < 0:
        raise ConfigError(f"--blocks-per-rank must be at least 0 (0: the schedule's), got "
                          f"{blocks_per_rank}")
    system, sched, pred = _choose_from(kw, runnable_only=True)   # bad input first, no GPU
    require("run --virtual")  # before anything is built
    out_dir = out_dir or out_alias
    if out_dir:
        check_writable(out_dir)
    ensure_eager_loading()  # before anything initialises CUDA

    work = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="pksim-run-"))
    emitted = cg.emit(system, sched, pred, work)
    lib = Library(cg.build(emitted.source))
    count = reference.count_for_bytes(sched.op, sched.world, sched.dim("bytes"), sched.dtype)
    ranks = VirtualRanks(sched.world)
    coll = Collective(lib, ranks, count, sched.dtype, root=sched.root,
                      blocks_per_rank=blocks_per_rank)
    reference.fill_inputs(coll.inputs(), seed)
    coll.run()
    res = reference.check(sched.op, sched.dtype, sched.world, count, coll.inputs(), coll.outputs(),
                          sched.root)
    guards = coll.guards_intact()
    times = time_calls(coll, iters, warmup)
    med = statistics.median(times)
    nbytes = reference.nccl_bytes(sched.op, sched.world, count, sched.dtype)
    import torch
    device = torch.cuda.get_device_name()
    out = {"schedule": sched.to_dict(), "label": sched.label(), "system": system.name,
           "device": device, "count": count, "bytes": nbytes,
           "correct": res.ok and guards, "max_err": res.max_err, "detail": res.detail,
           "predicted_s": pred.time_s if pred else None, "measured_median_s": med,
           "times_s": times,
           "method": f"CUDA events, median of {iters}, L2 flushed (256 MiB write) before each",
           "predicted_over_measured": pred.time_s / med if pred else None,
           "algbw_GBps": nbytes / med / 1e9, "source": str(emitted.source)}
    if as_json:
        emit_json(out)
    else:
        click.echo(f"{sched.op} {format_bytes(nbytes)} {sched.dtype}, {sched.world} virtual ranks on "
                   f"{device}: {sched.label()}")
        click.echo(f"  correct    {'yes' if out['correct'] else 'NO: ' + (res.detail or 'guard bytes overwritten')}"
                   f"   (max |error| {res.max_err:.3g})")
        click.echo(f"  predicted  {format_time(pred.time_s) if pred else 'n/a (not modelled)'} "
                   f"on {system.name}")
        click.echo(f"  measured   {format_time(med)} (median of {iters}, cold L2)   "
                   f"algbw {out['algbw_GBps']:.1f} GB/s")
        if pred:
            click.echo(f"  ratio      predicted / measured = {out['predicted_over_measured']:.2f}")
    if not out["correct"]:
        raise SystemExit(1)
