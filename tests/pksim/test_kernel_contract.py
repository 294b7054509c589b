"""pksim.kernel_contract against the CUDA headers that state the same numbers (parsed, so
the two cannot drift), and its derived tables."""
from __future__ import annotations

import re

from hwmodels.resources import kernels_dir
from pksim import kernel_contract as kc

KERNELS = kernels_dir()


def _define(header: str, name: str) -> int:
    m = re.search(rf"^#define\s+{name}\s+(\d+)", (KERNELS / header).read_text(), re.M)
    assert m, f"{header}: no #define {name}"
    return int(m.group(1))


def _constexpr(header: str, name: str) -> str:
    m = re.search(rf"constexpr\s+\w+(?:\s+\w+)?\s+{name}\s*=\s*([^;]+);",
                  (KERNELS / header).read_text())
    assert m, f"{header}: no constexpr {name}"
    return m.group(1).strip()


def test_max_ranks_match_the_abi_headers():
    assert kc.MAX_RANKS == _define("collectives/abi.h", "PKC_MAX_RANKS")
    assert kc.FUSED_MAX_RANKS == _define("fused/abi.h", "PKF_MAX_RANKS")


def test_fused_threads_and_copy_stages_match_the_kernels():
    # gemm.cuh: THREADS = 128 * (1 + CONSUMERS): a producer and CONSUMERS warpgroups
    assert _constexpr("gemm/gemm.cuh", "THREADS") == "128 * (1 + CONSUMERS)"
    assert kc.FUSED_THREADS == 128 * (1 + int(_constexpr("gemm/gemm.cuh", "CONSUMERS")))
    assert int(_constexpr("fused/comm.cuh", "kStages")) == kc.FUSED_COPY_STAGES
    factors = [int(x) for x in _constexpr("fused/comm.cuh", "kStageBytes").split("*")]
    assert factors[0] * factors[1] == kc.FUSED_COPY_STAGE_BYTES


def test_copy_engine_reduction_block_matches_the_kernel():
    assert int(_constexpr("collectives/collective.cuh", "kCeReduceThreads")) == \
        kc.CE_REDUCE_THREADS
    assert kc.CE_REDUCE_BLOCK_BYTES == 32 * 1024


def test_fused_variants_and_virtual_baselines():
    assert ("gemm-ar", "inter-sm", "in-network", "multimem") not in kc.FUSED_VARIANTS
    assert all(kc.implemented(*v) for v in kc.FUSED_VARIANTS)
    assert kc.VIRTUAL_BASELINE["gemm-rs"] == ("reduce-scatter", "direct", "register")
    assert set(kc.VIRTUAL_BASELINE) == set(kc.FUSED_CODEGEN_OPS)
