"""The pk CUDA primitives (kernels/include/pk/) and their GPU tests (kernels/tests/) compile.

Runs in CI without a GPU: it only needs nvcc (skipped, with the reason, when nvcc is not
found). Every kernels/tests/*.cu is compiled and linked for sm_90a with the flags the GPU
runner (kernels/tests/run_tests.sh) uses, plus -Werror for all warnings and the host
compiler's -Wall -Wextra; all builds run once, in parallel (~30 s on 2 cores). Two more
translation units call every pk::multimem wrapper: with -DPK_ENABLE_MULTIMEM=1 it must compile
(ptxas accepts the multimem PTX), without it it must fail with the static_assert that names
the switch. The programs themselves are run on a GPU by run_tests.sh, not here.
"""
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hwmodels.resources import kernels_dir

INCLUDE = kernels_dir() / "include"
TESTS = kernels_dir() / "tests"
SOURCES = sorted(p.stem for p in TESTS.glob("*.cu"))
EXPECTED = {"test_pgl_ldst", "test_tma_store", "test_tma_reduce", "test_sync", "test_ce", "test_tensor_map"}
HEADERS = ["pk.cuh", "common.cuh", "pgl.cuh", "sync.cuh", "tma.cuh", "ldst.cuh", "multimem.cuh",
           "copy_engine.cuh", "host.cuh"]

ARCH = "-gencode=arch=compute_90a,code=sm_90a"
FLAGS = ["-O3", "-std=c++17", ARCH, "-I", str(INCLUDE), "-Werror", "all-warnings",
         "-Xcompiler", "-Wall,-Wextra"]

MULTIMEM_TU = r"""
#include "pk/pk.cuh"
__global__ void use_multimem(float* f, float4* f4, __nv_bfloat162* h, pk::multimem::bf16x8* h8,
                             unsigned* flag, float* out) {
  using namespace pk::multimem;
  const float a = ld_reduce_add(f);
  const float4 b = ld_reduce_add(f4);
  const __nv_bfloat162 c = ld_reduce_add(h);
  const bf16x8 d = ld_reduce_add(h8);
  st(f, a); st(f4, b); st(h, c); st(h8, d);
  red_add(f, a); red_add(f4, b); red_add(h, c); red_add(h8, d);
  signal_all(flag, 1u);
  out[threadIdx.x] = a + b.w + __bfloat162float(c.y) + __bfloat162float(d.h[3].x);
}
"""


def _find_nvcc():
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


NVCC = _find_nvcc()

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc not found (not on PATH, no $NVCC, no /usr/local/cuda/bin/nvcc): "
                                            "the sm_90a build of the pk primitives cannot be checked"),
]


def _compile(args):
    t0 = time.time()
    proc = subprocess.run([NVCC, *args], capture_output=True, text=True, timeout=600)
    return {"rc": proc.returncode, "log": proc.stdout + proc.stderr, "seconds": time.time() - t0}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    out = tmp_path_factory.mktemp("pk-build")
    (out / "multimem_tu.cu").write_text(MULTIMEM_TU)
    jobs = {name: [*FLAGS, "-o", str(out / name), str(TESTS / f"{name}.cu")] for name in SOURCES}
    jobs["multimem_on"] = [*FLAGS, "-DPK_ENABLE_MULTIMEM=1", "-c", "-o", str(out / "mm_on.o"),
                           str(out / "multimem_tu.cu")]
    jobs["multimem_off"] = [*FLAGS, "-c", "-o", str(out / "mm_off.o"), str(out / "multimem_tu.cu")]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = dict(zip(jobs, pool.map(_compile, jobs.values())))
    print(f"\npk build: {len(jobs)} translation units in {time.time() - t0:.1f} s")
    return {"out": out, "results": results}


def test_layout_present():
    assert EXPECTED <= set(SOURCES), f"missing tests: {EXPECTED - set(SOURCES)}"
    for h in HEADERS:
        text = (INCLUDE / "pk" / h).read_text()
        assert text.startswith(f"// pk/{h}:"), f"{h} must open with its header comment"
        assert "#pragma once" in text
    runner = TESTS / "run_tests.sh"
    assert os.access(runner, os.X_OK), "run_tests.sh must be executable"
    assert subprocess.run(["bash", "-n", str(runner)]).returncode == 0


@pytest.mark.parametrize("name", SOURCES)
def test_compiles_for_sm90a(builds, name):
    r = builds["results"][name]
    assert r["rc"] == 0, f"nvcc failed for kernels/tests/{name}.cu:\n{r['log'][-4000:]}"
    assert (builds["out"] / name).is_file()
    assert "warning" not in r["log"].lower(), f"warnings for {name}.cu:\n{r['log'][-4000:]}"


def test_multimem_compiles_when_enabled(builds):
    r = builds["results"]["multimem_on"]
    assert r["rc"] == 0, f"multimem wrappers do not compile with PK_ENABLE_MULTIMEM=1:\n{r['log'][-4000:]}"


def test_multimem_is_a_compile_error_when_disabled(builds):
    r = builds["results"]["multimem_off"]
    assert r["rc"] != 0, "calling pk::multimem without PK_ENABLE_MULTIMEM must not compile"
    assert "PK_ENABLE_MULTIMEM" in r["log"], r["log"][-4000:]
