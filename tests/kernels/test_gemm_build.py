"""The Hopper GEMM (kernels/gemm) compiles for sm_90a, and its C ABI rejects bad arguments.

Runs in CI without a GPU: it needs nvcc only (skipped, with the reason, when nvcc is not
found). The library is built once through codegen.build (content-hash cache in a temporary
directory, with -Xptxas -v) exactly as validation/run/gemm.py builds it, plus the ptxas
report. Checked: no warnings, no register spills or stack frame in any kernel, the exported
symbols, and that every bad-argument status comes back from ctypes calls that never reach
CUDA (the checks precede any CUDA call, and the library links the CUDA runtime statically,
so it loads without a driver). The GEMM itself runs on a GPU through validation/run/gemm.py.
"""
import ctypes
import json
import re
import shutil
import subprocess

import pytest

from codegen.build import BuildOptions, compile_source, find_nvcc
from validation.run import gemm as gemm_bench

NVCC = find_nvcc()

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc not found (not on PATH, no $NVCC, no /usr/local/cuda/bin/nvcc): "
                                            "the sm_90a build of the GEMM cannot be checked"),
]

SYMBOLS = ["pk_gemm_bf16", "pk_gemm_bf16_ex", "pk_gemm_num_variants", "pk_gemm_variant_name",
           "pk_gemm_strerror", "pk_gemm_abi_version"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("gemm-build")
    opts = BuildOptions(defines=(("PK_GEMM_SOURCES", gemm_bench.sources_digest()),),
                        extra=("-Xptxas", "-v"))
    lib = compile_source(gemm_bench.source(), opts, cache)
    log = json.loads((lib.parent / "build.json").read_text())["log"]
    return lib, log


def test_headers_documented():
    for p in sorted(gemm_bench.gemm_dir().glob("*.cu*")):
        text = p.read_text()
        assert text.startswith(f"// gemm/{p.name}:"), f"{p.name} must open with its header comment"
        if p.suffix == ".cuh":
            assert "#pragma once" in text


def test_compiles_without_spills(built):
    lib, log = built
    assert "warning" not in log.lower(), log
    assert "Potential Performance Loss" not in log, log  # e.g. serialised wgmma
    report = json.loads((lib.parent / "build.json").read_text())["kernels"]  # ptxas -v per function
    assert any("gemm_kernel" in name for name in report), sorted(report)
    spilled = {name: k for name, k in report.items()
               if (k["stack"], k["spill_stores"], k["spill_loads"]) != (0, 0, 0)}
    assert spilled == {}


def test_symbols_exported(built):
    lib, _ = built
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                             text=True, check=True).stdout
        for name in SYMBOLS:
            assert re.search(rf"\bT {name}$", out, re.M), f"{name} not exported:\n{out}"
    handle = ctypes.CDLL(str(lib))
    for name in SYMBOLS:
        assert hasattr(handle, name)


def test_variants_listed(built):
    lib = gemm_bench.load_library(built[0])
    names = gemm_bench.variant_names(lib)
    assert names[0] == "128x256x64s4" and len(names) == lib.pk_gemm_num_variants() >= 2
    assert lib.pk_gemm_variant_name(len(names)) is None
    assert lib.pk_gemm_abi_version() == 1


def test_bad_arguments_return_their_status(built):
    lib = gemm_bench.load_library(built[0])
    for rec in gemm_bench.check_arguments(lib):
        assert rec["ok"], rec
        assert rec["message"] and rec["message"] != "unknown status"
    assert "multiple of 8" in lib.pk_gemm_strerror(-3).decode()
    assert "multiple of 8" in lib.pk_gemm_strerror(-4).decode()
