"""codegen: Schedule -> CUDA translation unit + manifest -> shared library.

Named stages, each dumpable (STYLE.md 9):

    schedule --make_plan--> Plan --render--> source --compile_source--> binary
                (plan.py)          (render.py)            (build.py, cached by content)

API used by the CLI and the tests alike:

* ``emit(system, schedule, prediction=None, out_dir=...)`` writes ``<op>-<key>.cu`` and
  ``<op>-<key>.json`` (schedule, prediction, plan, build options, the exact nvcc command)
  and returns their paths;
* ``build(path)`` compiles a ``.cu`` written by ``emit`` (options from its manifest) and
  returns the ``.so`` path; a failed nvcc raises CompileError(message, command, stderr).

Fused GEMM + communication schedules (gemm-rs, ag-gemm, gemm-ar) go through the same stages
in ``codegen.fused`` (FusedPlan, its renderer, kernels/fused); ``emit`` and ``options_for``
dispatch to it.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from codegen import fused
from codegen.build import BuildOptions, compile_source, write_unit
from codegen.manifest import Emitted, read_manifest, unit_manifest
from codegen.plan import KernelPlan, make_plan
from codegen.render import render
from hwmodels.system import System
from pksim_core.schedule import Schedule

__all__ = ["Emitted", "emit", "build", "make_plan", "render", "options_for", "Plan", "BuildOptions",
           "read_manifest"]


def options_for(plan: KernelPlan) -> BuildOptions:
    if isinstance(plan, fused.FusedPlan):
        return fused.build_options(plan)
    return BuildOptions(arch=plan.arch, defines=plan.defines)


def emit(system: System, schedule: Schedule, prediction: Any = None, out_dir: str | Path = ".",
         command: str = "") -> Emitted:
    """Write the translation unit and its manifest for ``schedule`` on ``system``."""
    if schedule.op in fused.OPS:
        return fused.emit(system, schedule, prediction, out_dir, command)
    plan = make_plan(system, schedule)
    source, manifest = write_unit(out_dir, plan.name, render(plan, prediction, command),
                                  options_for(plan), unit_manifest(system, schedule, prediction,
                                                                   plan))
    return Emitted(source, manifest, plan)


def build(path: str | Path, cache: Path | None = None, copy_to_dir: bool = False) -> Path:
    """Compile a generated ``.cu`` with the options of its manifest; returns the ``.so``."""
    p = Path(path)
    source = p if p.suffix == ".cu" else p.with_suffix(".cu")
    manifest = read_manifest(source)
    options = BuildOptions.from_dict(manifest["build_options"])
    lib = compile_source(source, options, cache)
    if copy_to_dir:
        dst = source.parent / lib.name
        shutil.copy2(lib, dst)
        return dst
    return lib
