"""The intra-SM fused kernels' tile layout (kernels/fused/fused.cuh owner_tiles), checked on the
host: tests/kernels/fused_tiling.cu walks the tiles and sub-tiles the GEMM deals over many
(M, world, BM), through the same device functions the epilogues and prologues call, and checks
that every output row is stored once, from the right A row, and that no tile holds two
owners' rows (docs/decisions/D65.md). Needs nvcc only (no GPU)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from codegen.build import find_nvcc
from hwmodels.resources import kernels_dir

NVCC = find_nvcc()
SOURCE = Path(__file__).with_name("fused_tiling.cu")


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not found: the tiling check cannot be built")
def test_owner_tiles_store_every_row_once(tmp_path):
    exe = tmp_path / "fused_tiling"
    build = subprocess.run([str(NVCC), "-O1", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                            "-I", str(kernels_dir() / "include"), "-I", str(kernels_dir()),
                            "-o", str(exe), str(SOURCE)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert summary.startswith("owner tiles: ") and summary.endswith(" 0 failed"), run.stdout
    assert int(summary.split()[2]) > 1000
