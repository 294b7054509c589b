"""pksim_core.kernel_contract against the CUDA headers that state the same numbers (parsed, so
the two cannot drift), and its derived tables."""
from __future__ import annotations

import math
import re

from hwmodels.resources import kernels_dir
from pksim_core import algorithms
from pksim_core import kernel_contract as kc

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
    # one NVLink domain: the largest the catalogue models (gb200-nvl576)
    assert kc.MAX_RANKS == kc.FUSED_MAX_RANKS == 576


def test_run_time_sizing_constants_match_the_abi_header():
    assert kc.INLINE_RANKS == _define("collectives/abi.h", "PKC_INLINE_RANKS")
    assert kc.SET_SLOTS == _define("collectives/abi.h", "PKC_SET_SLOTS")
    assert kc.TMA_MAX_SOURCES == _define("collectives/abi.h", "PKC_TMA_MAX_SOURCES")
    assert kc.BARRIER_FLAGS == _define("collectives/abi.h", "PKC_BARRIER_FLAGS")
    assert kc.TABLE_HEADER_BYTES == _define("collectives/abi.h", "PKC_TABLE_HEADER_BYTES")
    # the dissemination barrier uses 2 + ceil(log2 world) counters: 12 at 576 ranks
    assert 2 + math.ceil(math.log2(kc.MAX_RANKS)) <= kc.BARRIER_FLAGS


def _struct(header: str, name: str) -> str:
    text = (KERNELS / header).read_text()
    m = re.search(rf"^struct {name}\b.*?^}};", text, re.M | re.S)
    assert m, f"{header}: no struct {name}"
    return m.group(0)


def test_world_sums_and_power_of_two_algorithms_match_the_kernels():
    # every (op, algorithm) whose kernel sums every rank's buffer says so (sources = world,
    # which the host refuses for TMA past TMA_MAX_SOURCES), and no other does
    for r in algorithms.kernels():
        body = _struct(f"collectives/{r.header}", r.cpp_struct)
        sums_world = re.search(r"sources\(int world\) \{ return world; \}", body) is not None
        assert sums_world == r.world_sum, r.key
        # recursive halving / doubling: power-of-two worlds (rhd_base world_ok)
        assert r.power_of_two == (f"struct {r.cpp_struct} : rhd_base" in body), r.key
        # blocks that wait on other ranks' between phases: the rings and rhd_base's pairs
        waits = "kSync = sync_kind::ring;" in body or f"struct {r.cpp_struct} : rhd_base" in body
        assert r.waits == waits, r.key
    assert "power_of_two(world)" in _struct("collectives/rhd.cuh", "rhd_base")
    assert algorithms.keys(power_of_two=True) == (
        ("all-gather", "rhd"), ("reduce-scatter", "rhd"), ("all-reduce", "rhd"))


def test_fused_threads_and_copy_stages_match_the_kernels():
    # gemm.cuh: THREADS = 128 * (1 + CONSUMERS): a producer and CONSUMERS warpgroups
    assert _constexpr("gemm/gemm.cuh", "THREADS") == "128 * (1 + CONSUMERS)"
    assert kc.FUSED_THREADS == 128 * (1 + int(_constexpr("gemm/gemm.cuh", "CONSUMERS")))
    # the gather's stages (copy_stages; the TMA pull has its own, pull_stages)
    stages = _struct("fused/comm.cuh", "copy_stages")
    assert int(re.search(r"kStages = (\d+);", stages).group(1)) == kc.FUSED_COPY_STAGES
    factors = [int(x) for x in re.search(r"kStageBytes = ([^;]+);", stages).group(1).split("*")]
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


def test_epilogue_kernels_and_split_ops_match_the_kernels():
    # every reducing kernel that takes a reduce op and an epilogue is its plain algorithm
    # without copy engines (epilogue.cuh: `using X_ep = sm_only_of<X>`), whose struct sums
    # every rank's buffer in one move through the config's policy (moves.cuh,
    # reduce_from_ranks / reduce_ranks_to_ranks<C>), in the header codegen names
    assert set(kc.EPILOGUE_KERNELS) == set(algorithms.keys(world_sum=True))
    ep_text = (KERNELS / "collectives/epilogue.cuh").read_text()
    for r in algorithms.ROWS:
        if not r.reduces:
            continue
        body = _struct(f"collectives/{r.header}", r.cpp_struct)
        assert re.search(r"reduce_(from_ranks|ranks_to_ranks)<C", body), r.key
        assert "sources(int world) { return world; }" in body
        # an extended kernel takes the reduce op itself; the others have an epilogue form
        assert r.extended != bool(r.epilogue_kernel), r.key
        if r.epilogue_kernel:
            name = f"{r.op.replace('-', '_')}_{r.epilogue_kernel}"
            assert f"using {name} = sm_only_of<{r.cpp_struct}>;" in ep_text, name
    # the reduce ops and epilogues are the config's pkc::op_<name> / pkc::ep_<name>
    text = (KERNELS / "collectives/epilogue.cuh").read_text()
    for name in kc.REDUCE_OPS:
        assert re.search(rf"^struct op_{name}\b", text, re.M), name
    for name in kc.EPILOGUES:
        assert re.search(rf"^struct ep_{name.replace('-', '_')}\b", text, re.M), name
    # the split-size ops read their sizes from the table: split_words of each layout
    varsize = (KERNELS / "collectives/varsize.cuh").read_text()
    assert "return 3 * num_splits(world);" in _struct("collectives/varsize.cuh", "split_matrix")
    assert "return 2 * num_splits(world);" in _struct("collectives/varsize.cuh", "split_vector")
    assert set(kc.SPLIT_OPS) == {"all-to-all-v", "all-gather-v", "reduce-scatter-v", "send-recv"}
    assert "struct all_to_all_v_direct : algorithm_defaults, split_matrix" in varsize
    assert algorithms.find("send-recv", "direct").cpp_struct == "all_to_all_v_direct"


def test_loads_in_flight_of_the_plain_and_epilogue_register_sums():
    # the model's register op term (pksim_core.mechanisms.epilogue_time_per_B, D56) rests on this: the
    # plain sum keeps two vectors a source in flight up to REG_TWO_VECTOR_SOURCES sources
    # (moves_reg.cuh: reg_reduce_body<U = R::kRegVectors, ...>; moves.cuh: sum_policy's 2), one
    # beyond; the epilogue policy one (ep_policy's kRegVectors = 1)
    moves = (KERNELS / "collectives/moves_reg.cuh").read_text()
    n = kc.REG_TWO_VECTOR_SOURCES
    assert "constexpr int U = R::kRegVectors;" in moves
    assert re.search(rf"if \(src\.n <= {n}\) reg_reduce_body<U, {n}, {n}, ", moves)
    assert re.search(r"else reg_reduce_body<1, PKC_SET_SLOTS, ", moves)
    assert "kRegVectors = 2;" in _struct("collectives/moves.cuh", "sum_policy")
    assert "kRegVectors = 1;" in _struct("collectives/epilogue.cuh", "ep_policy")


# ---- what codegen can emit: the one source the search and codegen share -------------------
def _coll(op="all-reduce", alg="ring", mech="register", world=8, **kw):
    from pksim_core.schedule import Schedule
    return Schedule(op=op, shape=(("bytes", 1 << 26),), world=world, algorithm=alg,
                    mechanism=mech, comm_sms=8, **kw)


def test_emit_reason_at_scale_and_across_domains():
    from hwmodels.catalog import load_system
    nvl72, nvl576 = load_system("gb200-nvl72"), load_system("gb200-nvl576")
    # any world of one domain, every algorithm that runs there
    assert kc.emit_reason(nvl576, _coll(world=576)) is None
    assert kc.emit_reason(nvl72, _coll("all-gather", "direct", "tma", world=72)) is None
    # a TMA sum stages at most 8 sources: the two-shot at 16 ranks by TMA is refused, by
    # registers not
    assert "at most 8 sources" in kc.emit_reason(nvl72, _coll(alg="two-shot", mech="tma", world=16))
    assert kc.emit_reason(nvl72, _coll(alg="two-shot", world=16)) is None
    assert "power-of-two" in kc.emit_reason(nvl72, _coll(alg="rhd", world=72))
    assert kc.emit_reason(nvl72, _coll(alg="rhd", world=64)) is None
    # several domains: the hierarchical schedule's NVLink part (a ring over 72) is emitted
    assert kc.emit_reason(nvl72, _coll(alg="hierarchical", world=144, domains=2)) is None
    assert "hierarchical" in kc.emit_reason(nvl72, _coll(world=144, domains=2))
    # NCCL's own schedules are not pk kernels
    assert "NCCL" in kc.emit_reason(nvl72, _coll(impl="nccl"))


def test_emit_reason_of_fused_schedules_by_target():
    from hwmodels.catalog import load_system
    from pksim_core.schedule import Schedule

    def fused(world, overlap="intra-sm", alg="direct", mech="tma", comm=1):
        return Schedule(op="gemm-rs", shape=(("k", 1024), ("m", 8192), ("n", 8192)),
                        world=world, overlap=overlap, algorithm=alg, mechanism=mech,
                        comm_sms=comm)
    # the fused kernels' GEMM is Hopper's: sm_90a systems at any world of their domain
    assert kc.emit_reason(load_system("h100-nvl256"), fused(256)) is None
    assert "no sm_100a fused kernel" in kc.emit_reason(load_system("dgx-b200"), fused(8))
    # inter-SM on virtual ranks at 128: 132 // 128 = 1 SM a rank, none left for the GEMM
    assert "leave no GEMM SM" in kc.emit_reason(
        load_system("h200-virtual", ("domain.gpus_per_domain=128",)),
        fused(128, "inter-sm", "direct", "register", 2))
    assert kc.emittable_fields(load_system("dgx-b200"), fused(8))["emittable"] is False


def test_world_reason_of_wide_sums():
    assert kc.world_reason("all-reduce", "two-shot", "register", 576) is None
    assert kc.world_reason("all-reduce", "direct", "copy-engine", 9) is not None


def test_emit_reason_of_reduce_ops_and_epilogues():
    from hwmodels.catalog import load_system
    h200 = load_system("h200-virtual")
    assert kc.emit_reason(h200, _coll(alg="two-shot", mech="tma", extra=(("reduce_op", "max"),))) is None
    assert "reducing kernel" in kc.emit_reason(h200, _coll(extra=(("epilogue", "scale"),)))
    assert "copy engine cannot" in kc.emit_reason(
        h200, _coll(alg="two-shot", mech="copy-engine", extra=(("reduce_op", "avg"),)))
    assert "runs on tma, register" in kc.emit_reason(h200, _coll("reduce", "direct", "copy-engine"))
    assert kc.emit_reason(h200, _coll("send-recv", "direct", "copy-engine")) is None

