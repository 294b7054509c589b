"""``pksim pkb solve``: one solution file per ParallelKernelBench problem, in PKB's layout
(``<out>/<stem>_cuda.py``, the reference's ``solution(...)`` signature: PKB's
``run_local.py --solution cuda --solutions-dir <out>`` runs them), and an index
``pksim-pkb.json`` of what each one runs and what the program's plan predicts.

What a solution runs follows the plan ``pksim predict --program`` calls best on the system:
where that plan fuses a GEMM with its collective into a generated kernel pksim.torch can call
(gemm-rs, ag-gemm, gemm-ar on a plain matrix product), the solution is that kernel alone;
everywhere else the reference's compute runs as written in torch and each of its collectives on
CUDA tensors runs as pksim.torch's generated kernel (``pksim.pkb.runtime``). The plan's other
rewrites are generated where ``pksim.pkb.folds`` makes them (an all-reduce and the division
after it, as one generated kernel with the average's epilogue); the others (a collective folding
the copies or other element-wise work next to it, in-network multimem kernels) are predicted
but not generated; the index says so per problem.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from pksim import __version__
from pksim.pkb.folds import folded_source, program_folds
from pksim.pkb.predict import predict_solution
from pksim.pkb.problems import BACKEND, NO_PROGRAM, PkbProblem
from pksim_core.programs.load import load_program
from pksim_core.programs.predict import predict_program

INDEX = "pksim-pkb.json"
# The fused kernels a solution calls in place of the whole reference, by problem: the programs
# whose best plan fuses the reference's one GEMM with its one collective (a plain matmul of the
# inputs); the fused tasks of other plans (a convolution's implicit GEMM, ring attention's
# output projection) sit inside compute that pksim.torch does not generate.
WHOLE_PROBLEM_KERNELS = {16: "gemm-rs"}
_DIST_CALL = re.compile(r"\bdist\.([a-z_]+)\(")


@dataclass(frozen=True)
class Planned:
    problem: PkbProblem
    program: str | None
    kernel: str | None            # the fused kernel that is the whole solution, if any
    prediction: dict | None
    not_generated: tuple[str, ...]   # the plan's rewrites the solution runs otherwise
    calls: tuple[str, ...]        # the reference's torch.distributed calls, by name
    folds: tuple[str, ...] = ()   # the folds the solution makes (pksim.pkb.folds), one a site


def plan_for(problem: PkbProblem, system_name: str) -> Planned:
    """The plan of the problem's first covering program, and what the solution runs of it."""
    text = problem.path.read_text()
    calls = tuple(sorted(set(_DIST_CALL.findall(text))))
    sites = folded_source(text)[1]
    folds = tuple(f"{label} (reference line {n})" for n, label in sites)
    if not problem.programs:
        return Planned(problem, None, None, None, (), calls, folds)
    name = problem.programs[0]
    system = load_system(system_name)
    pred = predict_program(system, load_program(name))
    fused = [t for t in pred.best.tasks if t["kind"] == "fused"]
    kernel = WHOLE_PROBLEM_KERNELS.get(problem.id)
    if kernel is not None and not any(t["label"].startswith(kernel + " ") for t in fused):
        kernel = None              # the plan does not fuse it: run the reference
    others = tuple(f"{t['name']}: {t['label']}" for t in fused
                   if kernel is None or not t["label"].startswith(kernel + " "))
    d = pred.to_dict(timeline=False)
    keep = {k: d[k] for k in ("baseline_s", "best_s", "baseline_steady_s", "best_steady_s",
                              "steady_speedup", "speedup")}
    if kernel is not None and all(t["kind"] != "comm" for t in pred.best.tasks):
        # the solution is the plan's fused kernel alone: the best plan is what it runs
        keep.update(solution_steady_s=pred.best.steady_s, solution_unserved=[])
    else:
        program = load_program(name)
        folded = frozenset(program_folds(program)) if sites else frozenset()
        if len(folded) < len(sites):        # a site the program does not show: count none
            folded = frozenset()
        sol = predict_solution(system, program, folded)
        keep.update(solution_steady_s=sol.steady_s, solution_unserved=list(sol.unserved),
                    generated_calls=sol.calls, kernel_faster_than_nccl=sol.kernel_faster,
                    folded_ops=sorted(folded))
        if folded:     # what the same solution without the fold is predicted to take
            keep["solution_unfolded_steady_s"] = predict_solution(system, program).steady_s
    keep["solution_speedup"] = keep["baseline_steady_s"] / keep["solution_steady_s"]
    keep["best_tasks"] = [{"name": t["name"], "kind": t["kind"], "label": t["label"]}
                          for t in pred.best.tasks if t["kind"] != "compute"]
    return Planned(problem, name, kernel, keep, others, calls, folds)


def render(p: Planned, system_name: str) -> str:
    pr = p.problem
    if p.kernel:
        runs = (f"the fused {p.kernel} kernel of pksim.torch on the reference's inputs (the "
                f"plan's {p.kernel}); none of the reference runs")
    else:
        runs = ("the reference's compute in torch; its collectives on CUDA tensors as "
                "pksim.torch's generated kernels")
        if p.folds:
            runs += ("; folded into the generated collective (its average's epilogue): "
                     + ", ".join(p.folds))
    if p.program:
        plan = (f"pksim predict --program {p.program} --system {system_name}: baseline "
                f"{p.prediction['baseline_steady_s'] * 1e6:.1f} us, this solution "
                f"{p.prediction['solution_steady_s'] * 1e6:.1f} us (pksim.pkb.predict), pksim's "
                f"best plan {p.prediction['best_steady_s'] * 1e6:.1f} us per back-to-back call")
    else:
        plan = f"no program models this problem: {NO_PROGRAM.get(pr.id, 'none written')}"
    gap = "".join(f"\n    {g}" for g in p.not_generated) or " none"
    return f'''"""ParallelKernelBench {pr.id} ({pr.stem}), written by `pksim pkb solve` (pksim {__version__}).

Runs {runs}.
Plan: {plan}.
Predicted but not generated (run as torch + a generated collective):{gap}
"""
import torch  # noqa: F401  (the reference's defaults may name it)

from pksim.pkb.runtime import Solution

_solution = Solution(__file__, {pr.stem!r}, {p.kernel!r})


def solution({pr.params}):
    return _solution({pr.call})
'''


def solve(problems: list[PkbProblem], out_dir: str | Path, system_name: str,
          force: bool = False) -> Path:
    """Write every problem's solution and the index; returns the index's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pr in problems:
        target = out / f"{pr.stem}_{BACKEND}.py"
        if target.exists() and not force:
            raise ConfigError(f"{target} exists: use --force to overwrite, or --out another folder")
        p = plan_for(pr, system_name)
        target.write_text(render(p, system_name))
        rows.append({"id": pr.id, "stem": pr.stem, "file": target.name, "program": p.program,
                     "kernel": p.kernel, "prediction": p.prediction,
                     "not_generated": list(p.not_generated), "reference_calls": list(p.calls),
                     "folds": list(p.folds),
                     "no_program": NO_PROGRAM.get(pr.id) if not p.program else None})
    index = out / INDEX
    index.write_text(json.dumps({"system": system_name, "pksim": __version__,
                                 "backend": BACKEND, "problems": rows}, indent=1) + "\n")
    return index
