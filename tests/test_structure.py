"""Guards on the shape of the code: no import cycle between project modules, no import from
a lower layer into a higher one (folders: hwmodels -> pksim_core -> codegen -> validation ->
pksim -> pksim_cli; inside pksim: the API -> pksim.torch -> pksim.pkb), no two folders that
import each other, no project import hidden inside a function, no module over 600 lines
(Python and CUDA sources alike), one class per class name, no model module named like a CUDA
source, the working tree under 15 MB (pages' length: tests/test_docs.py). Each fails with the
offenders listed (docs/design/layout.md, Code layout).

The one way a module is imported by a name it is given is a ``pksim_core.lazy.LazyTable`` (the
CLI's command table, the package's API attributes): its entries count here as imports of the
module that holds the table, at module level, so the cycle and layer guards see them; an
importlib call with a computed name anywhere but ``pksim_core.lazy`` fails (docs/design/layout.md, Code
layout)."""
from __future__ import annotations

import ast
import importlib
import subprocess
from pathlib import Path

import pytest

from pksim_core.lazy import LazyTable

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hwmodels", "pksim_core", "codegen", "validation", "pksim", "pksim_cli")
# One layer per top-level folder, in this order (docs/design/layout.md). pksim holds the Python
# API (on the model), pksim.torch (calls generated kernels: codegen, validation.runtime) and
# pksim.pkb (ParallelKernelBench solutions on pksim.torch), in that order inside its layer.
LAYERS = {"hwmodels": 0, "pksim_core": 1, "codegen": 2, "validation": 3, "pksim": 4,
          "pksim_cli": 5}
SUBLAYERS = {"pksim.torch": 1, "pksim.pkb": 2}       # the rest of pksim: 0
# Libraries imported where they are used: optional ones (the simulator runs without them) and
# heavy ones no simulation needs (scipy: the calibration's fit; matplotlib: plots; rich:
# tables and progress bars), so that a command loads only what it uses.
LAZY_ALLOWED = {"torch", "dask", "distributed", "matplotlib", "scipy", "rich"}
LAZY_LOADER = "pksim_core.lazy"          # the one module that imports by a computed name
MAX_MODULE_LINES = 600
MAX_TREE_BYTES = 15 * 1024 * 1024
GENERATED = ("tests/golden/", "tests/codegen/golden/")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if ".venv" not in p.parts}


def layer(module: str) -> tuple[int, int]:
    """(the folder's layer, the place inside it)."""
    sub = next((n for s, n in SUBLAYERS.items() if module == s or module.startswith(s + ".")), 0)
    return LAYERS[module.split(".")[0]], sub


class _Imports(ast.NodeVisitor):
    """(target module, line, inside a function) of every import, literal importlib call and
    ``LazyTable({...})`` entry; ``computed``: the lines of importlib calls whose name is not a
    literal."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path]):
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules, self.depth, self.found, self.computed = modules, 0, [], []
        self.tables = 0

    def _add(self, name: str, line: int) -> None:
        self.found.append((name, line, self.depth > 0))

    def visit_FunctionDef(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_Import(self, node):
        for a in node.names:
            self._add(a.name, node.lineno)

    def visit_ImportFrom(self, node):
        base = node.module or ""
        if node.level:
            up = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            base = ".".join(up + ([node.module] if node.module else []))
        for a in node.names:
            sub = f"{base}.{a.name}"
            self._add(sub if sub in self.modules else base, node.lineno)

    def visit_Call(self, node):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("import_module", "__import__") and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                self._add(node.args[0].value, node.lineno)
            else:
                self.computed.append(node.lineno)
        if name == "LazyTable":
            self._lazy_table(node)
        self.generic_visit(node)

    def _lazy_table(self, node: ast.Call) -> None:
        table = node.args[0] if node.args else None
        if not isinstance(table, ast.Dict) or not all(
                isinstance(v, ast.Constant) and isinstance(v.value, str) for v in table.values):
            raise AssertionError(f"line {node.lineno}: a LazyTable is a dict literal of "
                                 f"'module:attribute' strings")
        self.tables += bool(table.values)
        for value in table.values:
            self.found.append((value.value.partition(":")[0], value.lineno, False))


def _visited() -> dict[str, _Imports]:
    modules = project_modules()
    out = {}
    for mod, path in modules.items():
        v = _Imports(mod, path.name == "__init__.py", modules)
        v.visit(ast.parse(path.read_text(), str(path)))
        out[mod] = v
    return out


def imports() -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, inside a function) over the project's modules."""
    return [(mod, name, line, inner) for mod, v in _visited().items()
            for name, line, inner in v.found]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


def test_no_import_cycle_between_project_modules():
    modules = project_modules()
    edges: dict[str, set[str]] = {}
    for src, dst, _, _ in imports():
        if dst in modules and dst != src:
            edges.setdefault(src, set()).add(dst)
    assert _cycles(edges) == []


def test_no_upward_import():
    modules = project_modules()
    up = [f"{src}:{line} imports {dst}" for src, dst, line, _ in imports()
          if dst in modules and layer(dst) > layer(src)]
    assert up == []


def test_folders_are_layers():
    # the folder-level graph: every edge from a folder to one strictly below it
    modules = project_modules()
    edges = {(src.split(".")[0], dst.split(".")[0]) for src, dst, _, _ in imports()
             if dst in modules and src.split(".")[0] != dst.split(".")[0]}
    assert {e for e in edges if LAYERS[e[1]] >= LAYERS[e[0]]} == set()
    assert set(LAYERS) == set(PACKAGES) and len(set(LAYERS.values())) == len(LAYERS)
    assert ("pksim_cli", "validation") in edges and ("validation", "pksim_core") in edges


def _class_names() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for mod, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(mod)
    return found


def test_one_class_per_class_name():
    names = _class_names()
    assert len(names) > 100           # the guard sees the classes
    assert {n: mods for n, mods in names.items() if len(mods) > 1} == {}


def test_no_model_module_named_like_a_cuda_source():
    cuda = {p.name.split(".")[0] for p in (ROOT / "kernels").rglob("*") if p.suffix in (".cu", ".cuh")}
    assert {"collective", "moves", "tma"} <= cuda
    model = {p.stem for p in (ROOT / "pksim_core").rglob("*.py")} | \
        {p.name for p in (ROOT / "pksim_core").rglob("*") if p.is_dir() and p.name != "__pycache__"}
    assert sorted(model & cuda) == []


def test_no_import_inside_a_function_but_optional_dependencies():
    modules = project_modules()
    inner = [f"{src}:{line} imports {dst}" for src, dst, line, lazy in imports()
             if lazy and (dst in modules or dst.split(".")[0] in PACKAGES
                          or dst.split(".")[0] not in LAZY_ALLOWED)]
    assert inner == []


def test_modules_are_imported_by_literal_names_but_in_the_lazy_loader():
    computed = [f"{mod}:{line}" for mod, v in _visited().items() if mod != LAZY_LOADER
                for line in v.computed]
    assert computed == []


def test_lazy_tables_name_modules_and_attributes_that_exist():
    # every entry of every LazyTable resolves (the command table is data, checked as imports)
    holders = [mod for mod, v in _visited().items() if v.tables]
    assert set(holders) >= {"pksim", "pksim_cli.main", "pksim_cli.programs"}
    tables = [(mod, value) for mod in holders
              for value in vars(importlib.import_module(mod)).values()
              if isinstance(value, LazyTable)]
    assert len([t for _, t in tables if t.names()]) == sum(v.tables for v in _visited().values())
    missing = [f"{mod}: {name}" for mod, table in tables for name in table.names()
               if table.load(name) is None]
    assert missing == []


def _outside_the_project(path: Path) -> bool:
    """A build folder or a hidden one (.venv, .git, a developer's .dev copies): not project code."""
    parts = path.relative_to(ROOT).parts
    return "build" in parts or any(part.startswith(".") for part in parts)


def _python_files() -> list[Path]:
    files = [p for p in ROOT.rglob("*.py") if not _outside_the_project(p)]
    return [p for p in files if not str(p.relative_to(ROOT)).startswith(GENERATED)]


def test_no_module_over_the_line_budget():
    long = {str(p.relative_to(ROOT)): n for p in _python_files()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def _cuda_files() -> list[Path]:
    """Every CUDA / C++ source of the project (kernels, microbenchmarks, device drivers, tests)."""
    return [p for p in ROOT.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".cpp")
            and not _outside_the_project(p)]


def test_no_cuda_source_over_the_line_budget():
    files = _cuda_files()
    assert len(files) > 40           # the guard sees the kernels
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_working_tree_is_small():
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    total = sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())
    assert total < MAX_TREE_BYTES, f"tracked files hold {total / 2**20:.1f} MiB"


def test_the_guards_see_what_they_guard():
    # a two-module cycle and a three-module one, beside an acyclic edge
    edges = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "x": {"y"}, "y": {"z"}, "z": {"x"}}
    assert _cycles(edges) == [["a", "b"], ["x", "y", "z"]]
    # an import inside a function and a literal importlib call are both seen, with their depth
    tree = ast.parse("import os\ndef f():\n    from pksim_core import schedule\n"
                     "    importlib.import_module('hwmodels.sm')\n")
    v = _Imports("pksim_cli.x", False, {"pksim_core.schedule": ROOT})
    v.visit(tree)
    assert v.found == [("os", 1, False), ("pksim_core.schedule", 3, True), ("hwmodels.sm", 4, True)]
    # a LazyTable's entries are imports at module level; a computed importlib name is seen
    tree = ast.parse("T = LazyTable({'run': 'pksim_cli.run:run'})\n"
                     "def f(n):\n    importlib.import_module(n)\n")
    v = _Imports("pksim_cli.main", False, {})
    v.visit(tree)
    assert v.found == [("pksim_cli.run", 1, False)] and v.computed == [3]
    assert layer("pksim_cli.main") > layer("pksim.pkb.solve") > layer("pksim.torch.comm") > \
        layer("pksim.api.predict") > layer("validation.report.data") > layer("codegen.plan") > \
        layer("pksim_core.collective_model") > layer("hwmodels.fluid")
