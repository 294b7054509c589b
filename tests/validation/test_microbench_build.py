"""The CUDA microbenchmarks (validation/microbench/*.cu) compile for sm_90a.

Runs in CI without a GPU: it only needs nvcc (skipped, with the reason, when
nvcc is not found).  All programs are compiled once, in parallel, through the
suite's own driver (`run.py --build-only`, the exact flags used on the GPU);
~30 s on 2 cores.  A second test runs the driver with no visible GPU and
checks that every benchmark fails cleanly and is recorded, not crashed.
"""
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwmodels.resources import microbench_dir

MB = microbench_dir()
RUN_PY = MB / "run.py"
SOURCES = sorted(p.stem for p in MB.glob("*.cu"))
EXPECTED = {"hbm_copy", "sm_copy", "tma_copy", "tma_reduce", "launch_latency", "flag_latency", "atomics",
            "block_moves", "signal_chain", "epilogue_moves", "fused_pull", "gemm_store_add"}


def _load_driver():
    spec = importlib.util.spec_from_file_location("microbench_run", RUN_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DRIVER = _load_driver()
NVCC = DRIVER.find_nvcc()

needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc not found (not on PATH, no $NVCC, no /usr/local/cuda/bin/nvcc): "
                         "the sm_90a microbenchmark build cannot be checked")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("microbench")
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(RUN_PY), "--out", str(out), "--build-only"],
                          capture_output=True, text=True, timeout=900)
    seconds = time.time() - t0
    print(f"\nmicrobench build: {len(SOURCES)} programs in {seconds:.1f} s\n{proc.stdout}{proc.stderr}")
    doc = json.loads((out / "microbench.json").read_text())
    return {"out": out, "proc": proc, "doc": doc, "seconds": seconds}


def test_all_sources_present():
    assert EXPECTED <= set(SOURCES), f"missing: {EXPECTED - set(SOURCES)}"
    assert (MB / "torch_bench.py").exists()


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.parametrize("name", SOURCES)
def test_compiles_for_sm90a(build_dir, name):
    builds = {b["name"]: b for b in build_dir["doc"]["builds"]}
    assert name in builds, f"{name} was not built: {build_dir['proc'].stdout}{build_dir['proc'].stderr}"
    b = builds[name]
    assert b["ok"], f"nvcc failed for {name}.cu:\n{b['log_tail']}"
    assert Path(b["binary"]).is_file()
    assert "warning" not in b["log_tail"].lower(), f"nvcc warnings for {name}.cu:\n{b['log_tail']}"


@pytest.mark.nvcc
@needs_nvcc
def test_build_only_exit_status_and_cache(build_dir):
    assert build_dir["proc"].returncode == 0, build_dir["proc"].stdout + build_dir["proc"].stderr
    again = subprocess.run([sys.executable, str(RUN_PY), "--out", str(build_dir["out"]), "--build-only"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0
    doc = json.loads((build_dir["out"] / "microbench.json").read_text())
    assert all(b["cached"] for b in doc["builds"]), "second build should reuse every binary"


@pytest.mark.nvcc
@needs_nvcc
def test_runs_fail_cleanly_without_gpu(build_dir):
    # No visible GPU: every benchmark must fail fast, be recorded with its
    # stderr, and the driver must finish with a summary (no traceback).
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(RUN_PY), "--out", str(build_dir["out"]), "--quick",
                           "--timeout-s", "60", "--budget-s", "200"],
                          capture_output=True, text=True, timeout=400, env=env)
    assert "Traceback" not in proc.stdout + proc.stderr
    doc = json.loads((build_dir["out"] / "microbench.json").read_text())
    assert doc["complete"]
    runs = {r["bench"]: r for r in doc["runs"]}
    assert set(SOURCES) <= set(runs)
    for name, r in runs.items():
        assert r["status"] == "failed", (name, r)
        assert r["stderr_tail"].strip(), f"{name}: failure without a reason"
    assert proc.returncode == 1
    assert "benchmark" in proc.stdout and "results:" in proc.stdout


# The kernels each benchmark of the generated kernels' routines times, by a part of their
# mangled name in ptxas' report: a grid whose threads have a stack starts slower (tests/codegen/test_build.py,
# test_generated_sm_kernels_have_no_stack), and the generated kernels have none, so the
# primitives the model is fitted on must not either (block_moves' TMA copy had 32 B until
# 2026-12-04, when its kernels were declared one block an SM as the generated ones are).
TIMED_KERNELS = {"block_moves": "move_kernel", "signal_chain": "chain_kernel", "epilogue_moves": "ep_kernel",
                 "gemm_store_add": "gemm_kernel", "fused_pull": "pull_kernelILi0E"}


def _ptxas_kernels(build_dir, name):
    from codegen.build import ptxas_report
    log = (build_dir["out"] / "logs" / f"{name}.build.log").read_text()
    return {fn: k for fn, k in ptxas_report(log).items() if "registers" in k}


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.parametrize("name", sorted(TIMED_KERNELS))
def test_timed_kernels_have_no_stack(build_dir, name):
    kernels = {fn: k for fn, k in _ptxas_kernels(build_dir, name).items()
               if TIMED_KERNELS[name] in fn}
    assert kernels, f"{name}: no kernel matching {TIMED_KERNELS[name]!r} in its ptxas report"
    assert {fn: k["stack"] for fn, k in kernels.items()} == {fn: 0 for fn in kernels}


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.xfail(strict=True, reason="fused_pull's all-reduce kernel spills 44 B to a 40 B "
                   "stack at 168 registers (CUDA 13.0) where the generated gemm-ar inter-SM "
                   "kernel running the same routine has none; its fit residual is 3.4 % "
                   "(docs/VALIDATION.md), left as is")
def test_fused_pull_all_reduce_kernel_has_no_stack(build_dir):
    kernels = {fn: k for fn, k in _ptxas_kernels(build_dir, "fused_pull").items()
               if "pull_kernelILi1E" in fn}
    assert len(kernels) == 1
    assert [k["stack"] for k in kernels.values()] == [0]
