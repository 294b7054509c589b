"""codegen stage 3: the generated sources compile, and the libraries' C interface matches
validation/runtime/collectives.py. Needs nvcc (skipped cleanly without it), not a GPU.

CI builds one translation unit per (op x mechanism) for sm_90a, and the register two-shot
all-reduce (CI_EXTRA), in parallel, through the content-hash cache (PKSIM_CACHE, else a
per-session temporary directory); each TU instantiates fp32 and bf16. PKSIM_KERNEL_MATRIX=full
(make test-kernels) builds every (op x algorithm x mechanism) for every target nvcc supports
among sm_90a, sm_100a and sm_103a.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import pytest

import codegen
from pksim.kernel_contract import IN_NETWORK_STREAMED_OPS
from codegen.build import BuildOptions, cache_key, compile_many, compile_source, find_nvcc, ptxas_report
from codegen.plan import ARCHS, KERNELS, mechanisms
from hwmodels.catalog import load_system
from hwmodels.errors import CompileError
from hwmodels.resources import device_dir, kernels_dir
from pksim.schedule import Schedule

NVCC = find_nvcc()
pytestmark = [pytest.mark.nvcc,
              pytest.mark.skipif(NVCC is None, reason="nvcc not found: generated kernels cannot be built")]
FULL = os.environ.get("PKSIM_KERNEL_MATRIX") == "full"

# One algorithm per (op, mechanism) in CI, chosen so that every algorithm is built once.
CI_MATRIX = {
    ("all-gather", "tma"): "direct", ("all-gather", "register"): "ring",
    ("all-gather", "copy-engine"): "direct", ("all-gather", "multimem"): "in-network",
    ("reduce-scatter", "tma"): "ring", ("reduce-scatter", "register"): "direct",
    ("reduce-scatter", "copy-engine"): "ring", ("reduce-scatter", "multimem"): "in-network",
    ("all-reduce", "tma"): "two-shot", ("all-reduce", "register"): "ring",
    ("all-reduce", "copy-engine"): "direct", ("all-reduce", "multimem"): "in-network",
    ("all-to-all", "tma"): "direct", ("all-to-all", "register"): "direct",
    ("all-to-all", "copy-engine"): "direct",
    ("broadcast", "tma"): "direct", ("broadcast", "register"): "direct",
    ("broadcast", "copy-engine"): "direct", ("broadcast", "multimem"): "in-network",
}
# Built in CI besides: the register two-shot all-reduce sits at the 128-register cap of its
# 512 threads, where the form of one expression moved its pointer sets onto the stack (56 B in
# fp32 with pkc::peer written as `rank + k >= world`).
CI_EXTRA = [("all-reduce", "two-shot", "register")]
# The streamed in-network kernels' emulated build (-DPKC_EMULATE_MULTIMEM=1: peer loads and
# stores in place of multimem, runnable as virtual ranks), beside their multimem build.
EMULATED = [(op, "in-network", "multimem-emulated") for op in IN_NETWORK_STREAMED_OPS]
SYSTEM_FOR_ARCH = {"sm_90a": "dgx-h100", "sm_100a": "dgx-b200", "sm_103a": "hgx-b300"}


def supported_archs() -> list[str]:
    out = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout
    return [a for a in ARCHS if f"compute_{a[3:-1]}" in out.split()]


def matrix() -> list[tuple[str, str, str, str]]:
    if not FULL:
        return [(op, alg, mech, "sm_90a") for (op, mech), alg in CI_MATRIX.items()] + \
            [(op, alg, mech, "sm_90a") for op, alg, mech in CI_EXTRA + EMULATED]
    return [(op, alg, mech, arch) for arch in supported_archs() for (op, alg) in KERNELS
            for mech in mechanisms(alg)] + \
        [(op, alg, mech, arch) for arch in supported_archs() for op, alg, mech in EMULATED]


def _schedule(op, alg, mech):
    extra = (("multimem", "emulated"),) if mech == "multimem-emulated" else ()
    return Schedule(op=op, shape=(("bytes", 1 << 20),), world=8, algorithm=alg,
                    mechanism="multimem" if extra else mech, comm_sms=16, extra=extra)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    env = os.environ.get("PKSIM_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture(scope="module")
def builds(tmp_path_factory, cache):
    src = tmp_path_factory.mktemp("generated")
    jobs, keys = [], []
    for op, alg, mech, arch in matrix():
        e = codegen.emit(load_system(SYSTEM_FOR_ARCH[arch]), _schedule(op, alg, mech), None,
                         src / arch)
        jobs.append((e.source, codegen.options_for(e.plan)))
        keys.append((op, alg, mech, arch))
    results = compile_many(jobs, cache=cache)
    return dict(zip(keys, results))


def _ids():
    return [f"{op}-{alg}-{mech}-{arch}" for op, alg, mech, arch in matrix()]


@pytest.mark.parametrize("key", matrix(), ids=_ids())
def test_generated_kernel_builds(builds, key):
    res = builds[key]
    if isinstance(res, CompileError):
        pytest.fail(f"{key}: {res}\ncommand: {' '.join(res.command)}\n{res.stderr[-4000:]}")
    assert res.is_file() and res.suffix == ".so"
    log = (res.parent / "build.json").read_text().lower()
    assert "warning" not in log, f"{key}: nvcc warnings:\n{log[-3000:]}"


SM_KEYS = [k for k in matrix() if k[2] in ("tma", "register")]


@pytest.mark.parametrize("key", SM_KEYS, ids=[f"{op}-{alg}-{mech}-{arch}" for op, alg, mech, arch in SM_KEYS])
def test_generated_sm_kernels_have_no_stack(builds, tmp_path, key):
    """A grid whose threads have a stack starts slower the more blocks it has (block_moves:
    a 4 KiB register copy on 132 blocks 5.1 us without, 6.4 us with a 72 B stack); ptxas
    held some generated kernels to 64-80 registers and spilled 8-24 B until they were
    declared one block an SM (docs/decisions.md D17). Both dtypes, from the build's ptxas -v
    report."""
    res = builds[key]
    if isinstance(res, CompileError):
        pytest.skip(f"{key} did not build")
    op, alg, mech, arch = key
    kernel = codegen.emit(load_system(SYSTEM_FOR_ARCH[arch]), _schedule(op, alg, mech), None,
                          tmp_path).plan.kernel
    report = json.loads((res.parent / "build.json").read_text())["kernels"]
    mine = {name: k for name, k in report.items() if kernel in name}
    assert len(mine) == 2, f"{kernel}: expected its fp32 and bf16 instances in {sorted(report)}"
    assert {name: k["stack"] for name, k in mine.items()} == {name: 0 for name in mine}


def test_ptxas_report_reads_registers_stack_and_spills():
    log = """ptxas info    : Compiling entry function '_Z1kIfEvv' for 'sm_90a'
ptxas info    : Function properties for _Z1kIfEvv
    16 bytes stack frame, 20 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 16 bytes cumulative stack size
ptxas info    : Function properties for _Z6helperv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"""
    assert ptxas_report(log) == {
        "_Z1kIfEvv": {"stack": 16, "spill_stores": 20, "spill_loads": 12, "registers": 128},
        "_Z6helperv": {"stack": 0, "spill_stores": 0, "spill_loads": 0}}


def test_cache_is_keyed_by_content(tmp_path, cache, builds):
    """The same source (one of the matrix's, emitted again elsewhere) is found in the cache
    the matrix filled: no second nvcc run."""
    key = ("broadcast", "direct", "register", "sm_90a")
    e = codegen.emit(load_system(SYSTEM_FOR_ARCH["sm_90a"]), _schedule(*key[:3]), None, tmp_path)
    opts = codegen.options_for(e.plan)
    text = e.source.read_text()
    assert cache_key(text, opts, NVCC) == cache_key(text, opts, NVCC)
    assert cache_key(text + "\n", opts, NVCC) != cache_key(text, opts, NVCC)
    assert cache_key(text, BuildOptions(arch="sm_100a"), NVCC) != cache_key(text, opts, NVCC)
    first = codegen.build(e.source, cache=cache)
    mtime = first.stat().st_mtime_ns
    assert first == builds[key]                      # the matrix's binary, reused
    assert codegen.build(e.source, cache=cache) == first and first.stat().st_mtime_ns == mtime


def test_failed_nvcc_raises_compile_error_with_command_and_stderr(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text("this is not CUDA;\n")
    with pytest.raises(CompileError) as info:
        compile_source(bad, BuildOptions(), cache=tmp_path / "cache")
    err = info.value
    assert err.command[0] == NVCC and str(bad) in err.command
    assert "error" in err.stderr.lower()
    assert "broken.cu" in str(err)


def _lib(builds, op, alg, mech):
    res = builds[(op, alg, mech, "sm_90a")]
    if isinstance(res, Exception):
        pytest.skip(f"{op} {alg} {mech} did not build")
    from validation.runtime.collectives import Library
    return Library(res)


def test_library_abi_matches_runtime_and_checks_arguments(builds):
    """Loaded with ctypes on a machine without a GPU: layouts, manifest, requirements of a
    copy-engine library (no kernel is touched), and the entry point's argument checks (which
    run before any CUDA call)."""
    from hwmodels.errors import ValidationError
    from validation.runtime.collectives import ABI_VERSION, PkcArgs
    lib = _lib(builds, "reduce-scatter", "ring", "copy-engine")
    assert lib.manifest["op"] == "reduce-scatter" and lib.entry_name == "pk_reduce_scatter_ring_copy_engine"
    a = PkcArgs(abi_version=ABI_VERSION, world=4, rank=-1, dtype=1, count=1001, phase_end=-1,
                device_sync=1)
    r = lib.requirements(a)
    # ring copy-engine reduce-scatter: world - 1 receive slots + one staging slot, each the
    # shard rounded up to 16 bytes: 4 x roundup(1001 x 2, 16) = 4 x 2016
    assert (r.in_count, r.out_count, r.scratch_bytes, r.phases) == (4004, 1001, 4 * 2016, 4)
    assert r.num_flags == 8 + r.blocks_per_rank
    bad = PkcArgs(abi_version=ABI_VERSION, world=1, rank=-1, dtype=1, count=10, phase_end=-1)
    with pytest.raises(ValidationError, match="world 1 is outside 2..8"):
        lib.launch(bad)
    a.in_[0] = 16  # the other pointers are NULL
    with pytest.raises(ValidationError, match="rank 0: output buffer is NULL"):
        lib.launch(a)
    a.dtype = 7
    with pytest.raises(ValidationError, match="dtype 7"):
        lib.launch(a)


def test_sanitizer_driver_builds(tmp_path):
    exe = tmp_path / "sanitize_collectives"
    proc = subprocess.run([NVCC, "-O2", "-std=c++17", "-I", str(kernels_dir()), "-o", str(exe),
                           str(device_dir() / "sanitize_collectives.cpp"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
