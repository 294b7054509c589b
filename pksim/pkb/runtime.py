"""What a solution written by ``pksim pkb solve`` runs.

``Solution(__file__, stem, kernel, system)`` finds the problem's reference next to the solution
(``<pkb>/reference/<stem>.py``, the solutions folder being one level below the checkout;
``$PKB_ROOT`` overrides), loads it as a module of its own and puts a ``PksimDist`` in place of
its ``dist``: the reference's compute runs as written, its collectives on CUDA tensors run on
pksim.torch's generated kernels, and the folds of ``pksim.pkb.folds`` (an all-reduce and the
division after it, as one generated kernel) are made in its text as it loads. A problem whose plan runs a fused GEMM kernel instead
(``kernel``, one of ``FUSED``) runs that kernel on the reference's inputs and none of the
reference.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from pksim.pkb.folds import folded_source
from pksim.pkb.shim import PksimDist, replace_dist
from pksim.torch.errors import CommError


def _gemm_rs(shim: PksimDist, a_local, b_local):
    """PKB 16: the row-parallel linear layer, C = sum_r A_r @ B_r reduce-scattered by rows."""
    return shim.comm().gemm_rs(a_local.contiguous(), b_local.contiguous())


FUSED = {"gemm-rs": _gemm_rs}


def reference_path(solution_file: str, stem: str) -> Path:
    root = os.environ.get("PKB_ROOT")
    base = Path(root) if root else Path(solution_file).resolve().parents[1]
    path = base / "reference" / f"{stem}.py"
    if not path.is_file():
        raise CommError(f"pksim solution {stem}: no reference at {path} (set PKB_ROOT to the "
                        f"ParallelKernelBench checkout)")
    return path


def load_reference(path: Path, name: str, fold: bool = False):
    """The reference at ``path`` as module ``name``; with ``fold``, its text with the folds of
    pksim.pkb.folds made (compiled under the reference's own file name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    if not fold:
        spec.loader.exec_module(mod)
        return mod
    text, mod.__pksim_folds__ = folded_source(path.read_text())
    exec(compile(text, str(path), "exec"), mod.__dict__)
    return mod


class Solution:
    """The callable behind a generated solution file (see the module)."""

    def __init__(self, solution_file: str, stem: str, kernel: str | None = None,
                 system: str | None = None):
        self.file, self.stem, self.kernel, self.system = solution_file, stem, kernel, system
        self.shim: PksimDist | None = None
        self.module: Any = None

    def _ready(self) -> None:
        if self.shim is not None:
            return
        import torch.distributed as dist
        self.shim = PksimDist(dist, self.system)
        if self.kernel is None:
            self.module = load_reference(reference_path(self.file, self.stem),
                                         f"pksim_pkb_reference_{self.stem}", fold=True)
            replace_dist(self.module, self.shim)

    def __call__(self, *args, **kwargs):
        self._ready()
        if self.kernel is not None:
            return FUSED[self.kernel](self.shim, *args, **kwargs)
        return self.module.solution(*args, **kwargs)
