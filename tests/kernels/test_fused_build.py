"""The fused GEMM + communication kernels (kernels/fused) compile for sm_90a, one generated
source per (op, overlap, algorithm) on h100-nvl256 at a world of 16, 32, 72 or 256 (each
source holds the narrow and the wide instance: every world runs on it), and their C ABI
matches validation/runtime/fused.py. PKSIM_KERNEL_MATRIX=full (make test-kernels) builds every
one at every one of those worlds (issue #31's acceptance).

Runs in CI without a GPU: it needs nvcc only (skipped, with the reason, when nvcc is not found).
Every source comes from codegen.fused (the path `pksim codegen --op gemm-rs ...` takes) and is
built through codegen.build's content-hash cache ($PKSIM_CACHE, else a per-session temporary
directory), with -Xptxas -v. Checked: no compiler warnings, no register spills, the exported
symbols, the struct sizes against ctypes, and that bad arguments come back as PKC_BAD_ARGUMENT
with a message from ctypes calls that never reach CUDA (the checks precede every CUDA call and
the library links the CUDA runtime statically, so it loads without a driver). The kernels run
on a GPU through validation/run/fused.py.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from codegen import fused
from codegen.build import compile_many, find_nvcc
from hwmodels.catalog import load_system
from hwmodels.resources import kernels_dir
from pksim_core.schedule import Schedule

NVCC = find_nvcc()
pytestmark = [pytest.mark.nvcc,
              pytest.mark.skipif(NVCC is None, reason="nvcc not found (not on PATH, no $NVCC, no "
                                 "/usr/local/cuda/bin/nvcc): the sm_90a fused kernels cannot be built")]

# (op, overlap, algorithm, mechanism, world): one per op x overlap x algorithm x mechanism
# (the inter-SM pull-reduce by TMA and by registers), plus the compile-only in-network, on
# h100-nvl256 (sm_90a) at the worlds of issue #31
VARIANTS = [("gemm-rs", "intra-sm", "direct", "tma"), ("gemm-rs", "inter-sm", "direct", "register"),
            ("gemm-rs", "inter-sm", "direct", "tma"),
            ("ag-gemm", "inter-sm", "direct", "tma"), ("ag-gemm", "intra-sm", "direct", "tma"),
            ("gemm-ar", "intra-sm", "direct", "tma"),
            ("gemm-ar", "inter-sm", "two-shot", "register"),
            ("gemm-ar", "inter-sm", "two-shot", "tma"),
            ("gemm-ar", "inter-sm", "in-network", "multimem")]
WORLDS = (16, 32, 72, 256)
FULL = os.environ.get("PKSIM_KERNEL_MATRIX") == "full"
MATRIX = ([v + (w,) for v in VARIANTS for w in WORLDS] if FULL else
          [v + (WORLDS[i % len(WORLDS)],) for i, v in enumerate(VARIANTS)])
# ptxas spills known and accepted (bytes of spill stores at most, per kernel name fragment):
# none since the intra-SM ops lay their tiles out per owner (D65).
SPILLS_ACCEPTED: dict[str, int] = {}
SYMBOLS = ["pkf_requirements", "pkf_manifest", "pkf_abi_version", "pkf_args_size",
           "pkf_reqs_size", "pkc_read_error"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    env = os.environ.get("PKSIM_CACHE")
    cache = Path(env) if env else tmp_path_factory.mktemp("fused-cache")
    src = tmp_path_factory.mktemp("fused-src")
    jobs, plans = [], []
    system = load_system("h100-nvl256")
    for op, overlap, alg, mech, world in MATRIX:
        s = Schedule(op=op, shape=(("k", 2048), ("m", 8192), ("n", 8192)), world=world,
                     overlap=overlap, algorithm=alg, mechanism=mech,
                     comm_sms=2 if overlap == "inter-sm" else 1)
        e = fused.emit(system, s, None, src)
        opts = fused.build_options(e.plan)
        jobs.append((e.source, replace(opts, extra=("-Xptxas", "-v"))))
        plans.append(e.plan)
    results = compile_many(jobs, cache=cache)
    out = {}
    for plan, res in zip(plans, results):
        if isinstance(res, Exception):
            pytest.fail(f"{plan.entry}: {res}\n{getattr(res, 'stderr', '')[-3000:]}")
        log = json.loads((res.parent / "build.json").read_text())["log"]
        out[(plan.op, plan.overlap, plan.algorithm, plan.mechanism, plan.world)] = (plan, res, log)
    return out


def test_headers_documented():
    for p in sorted((kernels_dir() / "fused").glob("*")):
        text = p.read_text()
        first = text.splitlines()[0]
        assert first.startswith((f"// fused/{p.name}:", f"/* fused/{p.name}:")), p.name
        assert "#pragma once" in text or "#ifndef PKF_ABI_H" in text


def test_compiles_without_warnings_or_spills(builds):
    for (plan, res, log) in builds.values():
        assert "warning" not in log.lower(), f"{plan.entry}:\n{log}"
        report = json.loads((res.parent / "build.json").read_text())["kernels"]  # ptxas -v
        assert report, f"{plan.entry}: no ptxas report"
        spilled = {name: k["spill_stores"] for name, k in report.items()
                   if (k["spill_stores"], k["spill_loads"]) != (0, 0)
                   and not any(frag in name and k["spill_stores"] <= most
                               for frag, most in SPILLS_ACCEPTED.items())}
        assert spilled == {}, plan.entry
        # both instances: narrow (world <= 8, parameters in the kernel parameter) and wide
        assert sum(plan.kernel in name for name in report) == 2, sorted(report)
        assert "Potential Performance Loss" not in log, f"{plan.entry}:\n{log}"


def test_symbols_and_abi(builds):
    from validation.runtime.fused import PkfArgs, PkfReqs
    for (plan, lib, _) in builds.values():
        if shutil.which("nm"):
            out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                                 text=True, check=True).stdout
            for name in SYMBOLS + [plan.entry]:
                assert re.search(rf"\bT {name}$", out, re.M), f"{name} not exported by {lib.name}"
        d = ctypes.CDLL(str(lib))
        d.pkf_args_size.restype = d.pkf_reqs_size.restype = ctypes.c_size_t
        assert d.pkf_args_size() == ctypes.sizeof(PkfArgs)
        assert d.pkf_reqs_size() == ctypes.sizeof(PkfReqs)
        d.pkf_manifest.restype = ctypes.c_char_p
        m = json.loads(d.pkf_manifest().decode())
        assert (m["op"], m["overlap"], m["entry"]) == (plan.op, plan.overlap, plan.entry)


def test_bad_arguments_are_refused_before_cuda(builds):
    from validation.runtime.fused import ABI_VERSION, FusedLib, PkfArgs
    from validation.run.fused import bad_argument_statuses
    for (plan, lib, _) in builds.values():
        rows = bad_argument_statuses(FusedLib(lib), PkfArgs, ABI_VERSION)
        assert rows and all(r["ok"] for r in rows), (plan.entry, rows)
