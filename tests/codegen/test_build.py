"""codegen stage 3: the generated sources compile, and the libraries' C interface matches
validation/runtime/collectives.py. Needs nvcc (skipped cleanly without it), not a GPU.

CI builds one translation unit per (op, algorithm), each on a system and world of the domains
issue #31 names (gb200-nvl72, vr-nvl144 and gb200-nvl576 at their full domain and at 16 and
32 ranks; dgx-h100 for sm_90a), chosen so that every mechanism and every target (sm_90a,
sm_100a, and the newest nvcc offers for vr-nvl144) is built; besides, the register two-shot
all-reduce at sm_90a (CI_EXTRA) and the emulated in-network kernels. Through the content-hash
cache (PKSIM_CACHE, else a per-session temporary directory), in parallel; each TU instantiates
fp32 and bf16, each narrow (world <= 8) and wide. PKSIM_KERNEL_MATRIX=full (make test-kernels)
builds every (op x algorithm x mechanism) for every target, and `pksim codegen --build` of
every collective on those three systems at 16, 32 ranks and the full domain.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import codegen
from pksim_cli.main import cli
from pksim_core import algorithms
from pksim_core.kernel_contract import IN_NETWORK_STREAMED_OPS, emit_reason
from codegen.build import BuildOptions, cache_key, compile_many, compile_source, find_nvcc, ptxas_report
from codegen.plan import ARCHS, OPS, mechanisms
from hwmodels.catalog import load_system
from hwmodels.errors import CompileError
from hwmodels.resources import device_dir, kernels_dir
from pksim_core.schedule import Schedule

NVCC = find_nvcc()
pytestmark = [pytest.mark.nvcc,
              pytest.mark.skipif(NVCC is None, reason="nvcc not found: generated kernels cannot be built")]
FULL = os.environ.get("PKSIM_KERNEL_MATRIX") == "full"

# One build per (op, algorithm) in CI: (mechanism, system, world). Every mechanism, every
# target and the worlds 8, 16, 32, 72 and 576 appear; the kernels take the world at run time,
# so one build serves every world of its system (the full matrix builds the rest).
CI_MATRIX = {
    ("all-gather", "direct"): ("tma", "gb200-nvl72", 72),
    ("all-gather", "ring"): ("register", "gb200-nvl576", 576),
    ("all-gather", "rhd"): ("tma", "gb200-nvl576", 32),
    ("all-gather", "in-network"): ("multimem", "gb200-nvl72", 72),
    ("reduce-scatter", "direct"): ("register", "vr-nvl144", 72),
    ("reduce-scatter", "ring"): ("tma", "dgx-h100", 8),
    ("reduce-scatter", "rhd"): ("register", "gb200-nvl72", 16),
    ("reduce-scatter", "in-network"): ("multimem", "dgx-h100", 8),
    ("all-reduce", "direct"): ("copy-engine", "dgx-h100", 8),
    ("all-reduce", "two-shot"): ("tma", "dgx-h100", 8),
    ("all-reduce", "ring"): ("copy-engine", "gb200-nvl72", 32),
    ("all-reduce", "rhd"): ("tma", "vr-nvl144", 32),
    ("all-reduce", "in-network"): ("multimem", "gb200-nvl576", 576),
    ("all-to-all", "direct"): ("register", "gb200-nvl576", 576),
    ("broadcast", "direct"): ("copy-engine", "gb200-nvl72", 16),
    ("broadcast", "in-network"): ("multimem", "dgx-h100", 8),
}
# Built in CI besides: the register two-shot all-reduce sits at the 128-register cap of its
# 512 threads, where the form of one expression moved its pointer sets onto the stack (56 B in
# fp32 with pkc::peer written as `rank + k >= world`).
CI_EXTRA = [("all-reduce", "two-shot", "register", "dgx-h100", 8)]
# The streamed in-network kernels' emulated build (-DPKC_EMULATE_MULTIMEM=1: peer loads and
# stores in place of multimem, runnable as virtual ranks), beside their multimem build.
EMULATED = [(op, "in-network", "multimem-emulated", "dgx-h100", 8) for op in IN_NETWORK_STREAMED_OPS]
# The full matrix's system per target (vr-nvl144: the newest target nvcc offers).
SYSTEM_FOR_ARCH = {"sm_90a": "dgx-h100", "sm_100a": "gb200-nvl72", "sm_103a": "hgx-b300",
                   "newest": "vr-nvl144"}
DOMAINS = ("gb200-nvl72", "vr-nvl144", "gb200-nvl576")


def supported_archs() -> list[str]:
    out = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout
    return [a for a in ARCHS if f"compute_{a[3:-1]}" in out.split()] + ["newest"]


def _world(op, alg, mech, system) -> int:
    """16 ranks (the wide instance), or 8 where the kernel sums every rank's buffer with TMA
    or copy engines or the system's domain holds fewer GPUs (dgx-h100)."""
    if load_system(system).domain.gpus_per_domain < 16:
        return 8
    s = _schedule(op, alg, mech, 16)
    return 16 if emit_reason(load_system(system), s) is None else 8


def matrix() -> list[tuple[str, str, str, str, int]]:
    if not FULL:
        return [(op, alg, mech, system, w) for (op, alg), (mech, system, w) in CI_MATRIX.items()] \
            + CI_EXTRA + EMULATED
    out = []
    for arch in supported_archs():
        system = SYSTEM_FOR_ARCH[arch]
        for op, alg in (r.key for r in algorithms.kernels()):
            for mech in mechanisms(alg, op):
                out.append((op, alg, mech, system, _world(op, alg, mech, system)))
        out += [(op, alg, mech, system, 8) for op, alg, mech, _, _ in EMULATED]
    return out


def _schedule(op, alg, mech, world=8):
    extra = (("multimem", "emulated"),) if mech == "multimem-emulated" else ()
    return Schedule(op=op, shape=(("bytes", 1 << 20),), world=world, algorithm=alg,
                    mechanism="multimem" if extra else mech, comm_sms=16, extra=extra)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    env = os.environ.get("PKSIM_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture(scope="module")
def builds(tmp_path_factory, cache):
    src = tmp_path_factory.mktemp("generated")
    jobs, keys = [], []
    for key in matrix():
        op, alg, mech, system, world = key
        e = codegen.emit(load_system(system), _schedule(op, alg, mech, world), None, src / system)
        jobs.append((e.source, codegen.options_for(e.plan)))
        keys.append(key)
    results = compile_many(jobs, cache=cache)
    return dict(zip(keys, results))


def _id(key) -> str:
    op, alg, mech, system, world = key
    return f"{op}-{alg}-{mech}-{system}-w{world}"


def _ids():
    return [_id(k) for k in matrix()]


@pytest.mark.parametrize("key", matrix(), ids=_ids())
def test_generated_kernel_builds(builds, key):
    res = builds[key]
    if isinstance(res, CompileError):
        pytest.fail(f"{key}: {res}\ncommand: {' '.join(res.command)}\n{res.stderr[-4000:]}")
    assert res.is_file() and res.suffix == ".so"
    log = (res.parent / "build.json").read_text().lower()
    assert "warning" not in log, f"{key}: nvcc warnings:\n{log[-3000:]}"


SM_KEYS = [k for k in matrix() if k[2] in ("tma", "register")]


@pytest.mark.parametrize("key", SM_KEYS, ids=[_id(k) for k in SM_KEYS])
def test_generated_sm_kernels_have_no_stack(builds, tmp_path, key):
    """A grid whose threads have a stack starts slower the more blocks it has (block_moves:
    a 4 KiB register copy on 132 blocks 5.1 us without, 6.4 us with a 72 B stack); ptxas
    held some generated kernels to 64-80 registers and spilled 8-24 B until they were
    declared one block an SM (docs/decisions/D17.md). Both dtypes, from the build's ptxas -v
    report."""
    res = builds[key]
    if isinstance(res, CompileError):
        pytest.skip(f"{key} did not build")
    op, alg, mech, system, world = key
    kernel = codegen.emit(load_system(system), _schedule(op, alg, mech, world), None,
                          tmp_path).plan.kernel
    report = json.loads((res.parent / "build.json").read_text())["kernels"]
    mine = {name: k for name, k in report.items() if kernel in name}
    assert len(mine) == 4, (f"{kernel}: expected its fp32 and bf16, narrow and wide instances "
                            f"in {sorted(report)}")
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
    key = ("all-reduce", "two-shot", "tma", "dgx-h100", 8)   # a build of CI_MATRIX
    e = codegen.emit(load_system(key[3]), _schedule(*key[:3], key[4]), None, tmp_path)
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
    res = next((r for k, r in builds.items() if k[:3] == (op, alg, mech)), None)
    if res is None:
        pytest.skip(f"{op} {alg} {mech} is not in this matrix")
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
    from validation.runtime.library import as_pointer, host_array
    lib = _lib(builds, "all-reduce", "ring", "copy-engine")
    assert lib.manifest["op"] == "all-reduce" and lib.entry_name == "pk_all_reduce_ring_copy_engine"
    a = PkcArgs(abi_version=ABI_VERSION, world=4, rank=-1, dtype=1, count=1001, phase_end=-1,
                device_sync=1)
    r = lib.requirements(a)
    # ring copy-engine all-reduce: world slots of a chunk, each ceil(1001 / 4) x 2 bytes
    # rounded up to 16: 4 x 512; 2 x 4 - 1 phases; flags: the 32 of the barrier + one per block
    assert (r.in_count, r.out_count, r.scratch_bytes, r.phases) == (1001, 1001, 4 * 512, 7)
    assert r.num_flags == 32 + r.blocks_per_rank and r.table_bytes == 0
    # past 8 ranks the device peer table: a 16-byte header and 4 arrays of world pointers
    a.world = 72
    assert lib.requirements(a).table_bytes == 16 + 4 * 8 * 72
    a.world = 4
    bad = PkcArgs(abi_version=ABI_VERSION, world=1, rank=-1, dtype=1, count=10, phase_end=-1)
    with pytest.raises(ValidationError, match="world 1 is outside 2..576"):
        lib.launch(bad)
    ins, outs = host_array([16, 0, 0, 0]), host_array([0, 0, 0, 0])   # the other pointers NULL
    a.in_, a.out, a.flags = as_pointer(ins), as_pointer(outs), as_pointer(outs)
    with pytest.raises(ValidationError, match="rank 0: output buffer is NULL"):
        lib.launch(a)
    a.dtype = 7
    with pytest.raises(ValidationError, match="dtype 7"):
        lib.launch(a)
    # a TMA sum of every rank's buffer is refused past 8 ranks, before any CUDA call
    tma = _lib(builds, "all-reduce", "two-shot", "tma")
    with pytest.raises(ValidationError, match="TMA sum takes at most 8 sources"):
        tma.requirements(PkcArgs(abi_version=ABI_VERSION, world=16, rank=-1, dtype=1, count=64,
                                 phase_end=-1, device_sync=1))


def test_sanitizer_driver_builds(tmp_path):
    exe = tmp_path / "sanitize_collectives"
    proc = subprocess.run([NVCC, "-O2", "-std=c++17", "-I", str(kernels_dir()), "-o", str(exe),
                           str(device_dir() / "sanitize_collectives.cpp"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.skipif(not FULL, reason="the acceptance builds run under make test-kernels")
@pytest.mark.parametrize("system", DOMAINS)
@pytest.mark.parametrize("op", OPS)
def test_codegen_build_every_collective_on_the_domains(system, op, tmp_path):
    """Issue #31's acceptance: `pksim codegen --build` of every collective on gb200-nvl72,
    vr-nvl144 and gb200-nvl576 at 16, 32 ranks and the full domain."""
    for world in (16, 32, load_system(system).domain.gpus_per_domain):
        r = CliRunner().invoke(cli, ["codegen", "--system", system, "--op", op, "--bytes", "64MiB",
                                     "--world", str(world), "-o", str(tmp_path / f"w{world}"),
                                     "--build", "--json"])
        assert r.exit_code == 0, f"{system} {op} world {world}: {r.output[-3000:]}"
        data = json.loads(r.output)
        assert Path(data["files"]["library"]).is_file() and data["plan"]["world"] == world


def test_the_memory_a_case_needs_is_the_librarys_own(builds):
    """validation.runtime.memory writes out the kernels' scratch sizes for the cases --prepare
    leaves out: every built collective library gives the same inputs, outputs and scratch
    (its host requirements, no GPU), at worlds and counts that divide and do not."""
    from hwmodels.errors import ValidationError
    from validation.runtime import memory, reference
    from validation.runtime.collectives import ABI_VERSION, Library, PkcArgs
    checked = 0
    for (op, alg, mech, _system, _world), res in builds.items():
        if isinstance(res, Exception) or mech.startswith("multimem") or op not in (
                "all-gather", "reduce-scatter", "all-reduce", "all-to-all", "broadcast"):
            continue
        lib = Library(res)
        for world in (2, 3, 4, 8):
            for count in (1001, 4096):
                try:
                    r = lib.requirements(PkcArgs(abi_version=ABI_VERSION, world=world, rank=-1,
                                                 dtype=1, count=count, phase_end=-1,
                                                 device_sync=1))
                except ValidationError:
                    continue                     # a world this kernel refuses
                assert (r.in_count, r.out_count) == reference.counts(op, world, count)
                assert r.scratch_bytes == memory.scratch_bytes(op, alg, mech, count, world, 2), \
                    (op, alg, mech, world, count)
                checked += 1
    assert checked >= 20
