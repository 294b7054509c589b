"""``pksim pkb``: ParallelKernelBench problems solved with pksim's generated kernels.

    pksim pkb solve  --pkb PATH [--out DIR] [--system dgx-h100] [--problems 1-8,16]
    pksim pkb check  --pkb PATH [--solutions DIR] [--results FILE] [--trials 5] [--time]
    pksim pkb report --solutions DIR --results FILE [-o docs/pkb.md]

``--pkb`` is a user's ParallelKernelBench checkout (no PKB code ships with pksim); solutions
go to ``<pkb>/solutions_pksim`` by default, as ``{stem}_cuda.py`` (PKB's run_local.py runs
them with ``--solution cuda --solutions-dir``)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from hwmodels.errors import ConfigError
from pksim_cli.output import emit_json
from pksim.pkb import check as pkb_check
from pksim.pkb import dryrun as pkb_dryrun
from pksim.pkb import report as pkb_report
from pksim.pkb.problems import parse_ids
from pksim.pkb.problems import problems as find_problems
from pksim.pkb.solve import INDEX, solve as pkb_solve

_PKB = click.option("--pkb", "pkb", required=True, type=click.Path(file_okay=False),
                    help="A ParallelKernelBench checkout (its reference/ and utils/).")
_PROBLEMS = click.option("--problems", default=None, metavar="IDS",
                         help="Problem ids, e.g. 1-8,16 (default: all).")


def _solutions(pkb: str, solutions: str | None) -> Path:
    return Path(solutions) if solutions else Path(pkb) / "solutions_pksim"


@click.group()
def pkb() -> None:
    """ParallelKernelBench: write solutions, check them against PKB's references, report."""


@pkb.command()
@_PKB
@click.option("--out", "out_dir", default=None, help="Solutions folder (default <pkb>/solutions_pksim).")
@click.option("--system", "system_name", default="dgx-h100", show_default=True,
              help="System whose plans the solutions follow.")
@_PROBLEMS
@click.option("--force", is_flag=True, help="Overwrite existing solution files.")
@click.option("--json", "as_json", is_flag=True, help="Print the index as JSON.")
def solve(pkb: str, out_dir: str | None, system_name: str, problems: str | None,
          force: bool, as_json: bool) -> None:
    """Write one solution per problem, following pksim's best plan."""
    found = _problems_of(pkb, problems)
    index = pkb_solve(found, _solutions(pkb, out_dir), system_name, force)
    if as_json:
        emit_json(json.loads(index.read_text()))
        return
    click.echo(f"{len(found)} solutions in {index.parent} (index {index.name})")


@pkb.command()
@_PKB
@click.option("--solutions", default=None, help="Solutions folder (default <pkb>/solutions_pksim).")
@click.option("--results", default="pkb-results.jsonl", show_default=True,
              help="Results file (JSON lines; problems already in it are skipped).")
@_PROBLEMS
@click.option("--world", type=int, default=8, show_default=True, help="Ranks (processes).")
@click.option("--trials", type=int, default=5, show_default=True, help="Trials of fresh inputs.")
@click.option("--deadline-s", type=float, default=120.0, show_default=True,
              help="A problem still running after this many seconds fails.")
@click.option("--budget-s", type=float, default=None, help="Stop (resumably) after this many seconds.")
@click.option("--time", "time_it", is_flag=True, help="Also time reference and solution as PKB does.")
@click.option("--warmup", type=int, default=500, show_default=True, help="--time: warm-up iterations.")
@click.option("--iters", type=int, default=100, show_default=True, help="--time: timed iterations.")
@click.option("--prebuild/--no-prebuild", default=True, show_default=True,
              help="Build every kernel the ranks may ask for first (nvcc on every core).")
@click.option("--dry-run", is_flag=True,
              help="On the CPU: the kernels emulated by gloo exchanges (pksim.pkb.dryrun); no GPU.")
def check(pkb: str, solutions: str | None, results: str, problems: str | None, world: int,
          trials: int, deadline_s: float, budget_s: float | None, time_it: bool, warmup: int,
          iters: int, prebuild: bool, dry_run: bool) -> None:
    """Run every solution and PKB's reference (world ranks, trials), compare as PKB does."""
    for name, value, low in (("--world", world, 2), ("--trials", trials, 1), ("--iters", iters, 1),
                             ("--warmup", warmup, 0)):
        if value < low:
            raise ConfigError(f"{name} must be at least {low}, got {value}")
    found = _problems_of(pkb, problems)
    todo = pkb_check.problem_dicts(found, _solutions(pkb, solutions))
    if not todo:
        raise ConfigError(f"no solution files in {_solutions(pkb, solutions)} (run pksim pkb solve first)")
    if dry_run:
        rows = pkb_dryrun.run(todo, Path(results), str(Path(pkb).resolve()), world, trials,
                              deadline_s, budget_s, say=click.echo)
    else:
        rows = pkb_check.run(todo, Path(results), str(Path(pkb).resolve()), world, trials,
                             deadline_s, time_it, warmup, iters, budget_s, say=click.echo,
                             prebuild=prebuild)
    click.echo(f"{sum(r['ok'] for r in rows)}/{len(rows)} correct now; results in {results}")


def _problems_of(pkb: str, ids: str | None):
    return find_problems(pkb, parse_ids(ids))


@pkb.command()
@click.option("--solutions", required=True, type=click.Path(file_okay=False),
              help="The solutions folder (its pksim-pkb.json index).")
@click.option("--results", required=True, type=click.Path(dir_okay=False), help="pksim pkb check's results.")
@click.option("-o", "--out", default="docs/pkb.md", show_default=True, help="The report.")
@click.option("--pkb-commit", default="unknown", help="The ParallelKernelBench commit checked.")
def report(solutions: str, results: str, out: str, pkb_commit: str) -> None:
    """Write docs/pkb.md from the check's results and the solutions' index."""
    index = Path(solutions) / INDEX
    if not index.is_file():
        raise ConfigError(f"--solutions {solutions}: no {INDEX} (run pksim pkb solve)")
    if not Path(results).is_file():
        raise ConfigError(f"--results {results}: no such file")
    click.echo(pkb_report.write(index, Path(results), Path(out), pkb_commit))
