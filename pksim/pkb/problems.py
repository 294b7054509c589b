"""A ParallelKernelBench checkout as pksim reads it (no PKB code ships in this project): its
problems (``reference/<id>_<name>.py``), each reference's ``solution(...)`` signature (read
with ``ast``, never imported here), and the shipped program that models each problem with the
plan ``pksim predict --program`` calls best for it.

PKB's layout: ``reference/`` holds the references, ``utils/input_output_tensors.py`` makes each
rank's inputs (``create_input_tensor``), a candidate solution is ``{stem}_{backend}.py`` with the
reference's signature (``scripts/worker.py`` loads it and calls ``solution(*inputs)``)."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from hwmodels.errors import ConfigError
from pksim_core.programs.load import list_programs, load_program

BACKEND = "cuda"          # the PKB backend whose harness runs these solutions (NCCL + CUDA)
NO_PROGRAM = {
    56: "ring attention in a two-stage pipeline (PKB's inputs: 2 stages x 4 context-parallel ranks): "
        "the second stage's ranks wait for the first stage's whole attention block before their "
        "ring starts, and back to back the stages overlap calls; a program is one rank's ops on "
        "its own streams and its sendrecv costs the transfer only, so it can state neither the "
        "wait on another rank's compute nor the overlap of stages",
    61: "Gaussian splatting: the all-to-all splits are the number of Gaussians inside each "
        "camera's frustum (bincount of the projection's camera ids), different for every rank "
        "and trial, and the projection, packing and tile work are gathers and boolean masks of "
        "data-dependent length; a program's splits and tensor sizes are constants",
    62: "spherical DISCO convolution: its contraction multiplies a sparse COO psi (PKB's inputs "
        "at world 8: 1,536 non-zeros of 3 x 128 x 8,192) by the input 256 times in a Python "
        "loop, each product followed by torch.roll of the whole expanded input; programs have "
        "no sparse-matmul kind, and a dense gemm would price each product about 2,000 times "
        "too high (3,145,728 entries for 1,536 non-zeros)",
    64: "GNN neighbour sampling: each hop walks the seed nodes in a Python loop of .item() reads "
        "and deduplicates them with numpy on the host, and its seven all-to-alls move the "
        "sampled neighbourhoods, whose sizes come from the random graph of every trial; a "
        "program's splits are constants and its host-sync op counts reads, not a loop's kernels",
    78: "tiled VAE decode: tiles are dealt round-robin after sorting, their shapes gathered as "
        "objects, the all-to-all sizes taken from those shapes, and the blends are Python loops "
        "of one-row kernels over the overlap; the tile counts per rank and the loops' lengths "
        "depend on the inputs' shape and rank, which a program's constants cannot follow",
}


@dataclass(frozen=True)
class PkbProblem:
    id: int
    stem: str
    path: Path
    params: str              # the signature's parameters, annotations dropped
    call: str                # the arguments that pass them on
    programs: tuple[str, ...]


def _signature(path: Path) -> tuple[str, str]:
    """(parameters, call arguments) of the module-level ``solution`` of a reference file."""
    tree = ast.parse(path.read_text(), str(path))
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution"), None)
    if fn is None:
        raise ConfigError(f"{path}: no module-level def solution(...)")
    a = fn.args
    params, call = [], []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(pos, defaults):
        params.append(arg.arg + (f"={ast.unparse(default)}" if default is not None else ""))
        call.append(arg.arg)
    if a.vararg:
        params.append(f"*{a.vararg.arg}")
        call.append(f"*{a.vararg.arg}")
    elif a.kwonlyargs:
        params.append("*")
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(arg.arg + (f"={ast.unparse(default)}" if default is not None else ""))
        call.append(f"{arg.arg}={arg.arg}")
    if a.kwarg:
        params.append(f"**{a.kwarg.arg}")
        call.append(f"**{a.kwarg.arg}")
    return ", ".join(params), ", ".join(call)


def covering_programs() -> dict[int, tuple[str, ...]]:
    """problem id -> the shipped programs that cover it."""
    out: dict[int, list[str]] = {}
    for name in list_programs():
        for pid in load_program(name).covers:
            out.setdefault(int(pid), []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def problems(pkb: str | Path, only: list[int] | None = None) -> list[PkbProblem]:
    """The problems of a PKB checkout (``only``: those ids), in id order."""
    root = Path(pkb)
    ref = root / "reference"
    if not ref.is_dir():
        raise ConfigError(f"--pkb {pkb}: no reference/ folder (a ParallelKernelBench checkout has one)")
    covers = covering_programs()
    found = []
    for path in sorted(ref.glob("*.py")):
        m = re.match(r"^(\d+)_", path.name)
        if not m:
            continue
        pid = int(m.group(1))
        if only is not None and pid not in only:
            continue
        params, call = _signature(path)
        found.append(PkbProblem(pid, path.stem, path, params, call, covers.get(pid, ())))
    if only is not None:
        missing = sorted(set(only) - {p.id for p in found})
        if missing:
            raise ConfigError(f"--problems: {missing} are not in {ref}")
    return sorted(found, key=lambda p: p.id)


def parse_ids(text: str | None) -> list[int] | None:
    """'1,2,5-9' -> [1, 2, 5, 6, 7, 8, 9]; None -> None (every problem)."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out += list(range(lo, hi + 1))
            elif part:
                out.append(int(part))
        except ValueError:
            raise ConfigError(f"--problems {text!r}: {part!r} is neither an id nor a range a-b") from None
    return sorted(set(out))
