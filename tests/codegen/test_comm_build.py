"""codegen stage 3 for the rooted, split-size, send/recv and epilogue kernels: one library per
op and mechanism compiles for sm_90a (in parallel, through the content-hash cache: PKSIM_CACHE,
else a per-session temporary directory; the sources are those validation.prepare.comm builds,
so a cache shared with it builds each once), their narrow instances (worlds up to 8, the ones
validated) have no stack, and the C entry checks split sizes before any CUDA call. Needs nvcc,
not a GPU."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import codegen
from codegen.build import compile_many, find_nvcc
from hwmodels.catalog import load_system
from hwmodels.errors import CompileError
from validation.prepare.comm import library_schedule
from validation.suites.comm_suite import LibraryVariant

NVCC = find_nvcc()
pytestmark = [pytest.mark.nvcc,
              pytest.mark.skipif(NVCC is None, reason="nvcc not found: generated kernels cannot be built")]

# One per op and mechanism (the epilogue kernels once per mechanism, each reduce op once).
MATRIX = [
    LibraryVariant("reduce", "direct", "tma"), LibraryVariant("reduce", "two-shot", "register"),
    *[LibraryVariant(op, "direct", m) for op in ("gather", "scatter", "all-to-all-v", "all-gather-v",
                                          "send-recv")
      for m in ("tma", "register", "copy-engine")],
    LibraryVariant("reduce-scatter-v", "direct", "tma"), LibraryVariant("reduce-scatter-v", "direct", "register"),
    LibraryVariant("all-reduce", "two-shot", "tma", "max", "scale-bias"),
    LibraryVariant("all-reduce", "direct", "register", "avg"),
    LibraryVariant("reduce-scatter", "direct", "register", "min", "bias"),
]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    env = os.environ.get("PKSIM_CACHE")
    cache = Path(env) if env else tmp_path_factory.mktemp("kernel-cache")
    src = tmp_path_factory.mktemp("generated")
    system = load_system("h200-virtual")
    jobs, plans = [], []
    for v in MATRIX:
        e = codegen.emit(system, library_schedule(v), None, src)
        jobs.append((e.source, codegen.options_for(e.plan)))
        plans.append(e.plan)
    return {v: (plan, res) for v, plan, res in zip(MATRIX, plans, compile_many(jobs, cache=cache))}


@pytest.mark.parametrize("v", MATRIX, ids=lambda v: v.tag)
def test_builds_without_warnings_and_without_stack(builds, v):
    plan, res = builds[v]
    if isinstance(res, CompileError):
        pytest.fail(f"{v.tag}: {res}\ncommand: {' '.join(res.command)}\n{res.stderr[-4000:]}")
    log = json.loads((res.parent / "build.json").read_text())
    assert "warning" not in log["log"].lower(), log["log"][-3000:]
    if v.mechanism == "copy-engine":
        return
    # the narrow instances (kernel<T, false>: worlds up to PKC_INLINE_RANKS), both dtypes
    narrow = {name: k["stack"] for name, k in log["kernels"].items()
              if plan.kernel in name and "Lb0E" in name}
    assert len(narrow) == 2 and set(narrow.values()) == {0}, narrow


def test_split_sizes_are_checked_before_any_cuda_call(builds):
    import ctypes
    from hwmodels.errors import ValidationError
    from validation.runtime.collectives import ABI_VERSION, Library, PkcArgs
    plan, res = builds[LibraryVariant("all-to-all-v", "direct", "copy-engine")]
    lib = Library(res)
    assert lib.manifest["op"] == "all-to-all-v"
    a = PkcArgs(abi_version=ABI_VERSION, world=2, rank=-1, dtype=1, count=10, phase_end=-1,
                device_sync=1)
    r = lib.requirements(a)
    # world 2 takes a table all the same: header 16 B, 4 x 2 pointers, 3 x 2 x 2 split words
    assert (r.in_count, r.out_count, r.table_bytes) == (10, 10, 16 + 64 + 96)
    bufs = (ctypes.c_void_p * 2)(16, 32)
    a.in_, a.out, a.flags = [ctypes.cast(bufs, ctypes.c_void_p).value] * 3
    with pytest.raises(ValidationError, match="split sizes needs a device peer table of 176"):
        lib.launch(a)
    a.table, a.table_bytes = 4096, 176          # never read by the checks (nor by copy engines)
    with pytest.raises(ValidationError, match="takes 4 split sizes"):
        lib.launch(a)
    splits = (ctypes.c_ulonglong * 4)(3, 4, 9, 2)       # rank 0 sends 3 + 4, receives 3 + 9
    a.splits, a.num_splits = ctypes.cast(splits, ctypes.c_void_p).value, 4
    with pytest.raises(ValidationError, match="rank 0 receives 12 elements, more than count = 10"):
        lib.launch(a)
