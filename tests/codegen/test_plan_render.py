"""codegen stages 1 and 2 (plan, render, emit) and the golden sources. No nvcc needed.

Golden files: tests/codegen/golden/<name>.cu are the exact text rendered for a few fixed
schedules with a fixed prediction; regenerate them with PKSIM_UPDATE_GOLDEN=1 after an
intended change, and review the diff.
"""
from __future__ import annotations

import json
import re

import pytest

import codegen
from codegen.plan import RUNNABLE_MECHANISMS, make_plan, mechanisms
from codegen.render import render
from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from pksim_core import algorithms
from pksim_core.prediction import Prediction
from pksim_core.schedule import Schedule
from tests.codegen.golden_sources import check_golden

H200V = load_system("h200-virtual")
H100 = load_system("dgx-h100")
NVL72 = load_system("gb200-nvl72")


def sched(op="all-reduce", alg="two-shot", mech="tma", world=8, nbytes=1 << 30, **kw):
    return Schedule(op=op, shape=(("bytes", nbytes),), world=world, algorithm=alg, mechanism=mech,
                    comm_sms=kw.pop("comm_sms", 16), **kw)


def fixed_prediction(s: Schedule, system: str) -> Prediction:
    return Prediction(schedule=s, system=system, time_s=1.234e-3, bound_s=1.0e-3,
                      bound_resource="hbm", alpha_beta_s=1.1e-3, breakdown={"hbm": 1.0e-3},
                      link_util=0.0, nbytes=s.dim("bytes"))


GOLDEN_CASES = {
    "all-reduce-two-shot-tma": (H200V, sched()),
    "all-gather-ring-register": (H200V, sched("all-gather", "ring", "register", world=4)),
    "reduce-scatter-direct-copy-engine": (H200V, sched("reduce-scatter", "direct", "copy-engine",
                                                       peer_order="sequential")),
    "all-reduce-in-network-multimem": (H100, sched("all-reduce", "in-network", "multimem",
                                                   nbytes=64 << 20)),
    # the streamed kernel at 132 SMs, its chunk from the schedule, the emulated build selected
    "all-gather-in-network-multimem-emulated": (
        H100, sched("all-gather", "in-network", "multimem", comm_sms=132, chunk_bytes=1 << 20,
                    extra=(("multimem", "emulated"),))),
    # a full NVLink domain past 8 ranks (the wide instance reads the peer table), sm_100a
    "all-reduce-two-shot-register-w72": (NVL72, sched("all-reduce", "two-shot", "register",
                                                      world=72, comm_sms=8)),
    "reduce-scatter-rhd-tma-w64": (NVL72, sched("reduce-scatter", "rhd", "tma", world=64,
                                                comm_sms=4)),
    # two domains: the NVLink part (a ring over each domain), NCCL's part in the manifest
    "all-reduce-hierarchical-register-2x72": (NVL72, sched("all-reduce", "hierarchical",
                                                           "register", world=144, domains=2)),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_sources(name):
    system, s = GOLDEN_CASES[name]
    text = render(make_plan(system, s), fixed_prediction(s, system.name))
    check_golden(name, text)


def test_every_kernel_maps_and_renders_the_four_parts():
    for op, alg in (r.key for r in algorithms.kernels()):
        for mech in mechanisms(alg, op):
            system = H100 if mech == "multimem" else H200V
            plan = make_plan(system, sched(op, alg, mech))
            text = render(plan)
            parts = ["// ---- config", "// ---- globals", "// ---- kernel", "// ---- host entry point"]
            positions = [text.index(p) for p in parts]
            assert positions == sorted(positions), f"{plan.kernel}: parts out of order"
            assert f'extern "C" int {plan.entry}(const pkc_args* a' in text
            assert "pkc::check_args<config, algorithm>(a, rep)" in text
            # both dtypes in one TU, each as a narrow (world <= 8) and a wide instance
            for t in ("__nv_bfloat16", "float"):
                if mech != "copy-engine":
                    assert f"<{t}, false>" in text and f"<{t}, true>" in text, plan.kernel
            # world is a run-time argument: no world size baked into the source
            assert not re.search(r"world\s*=\s*\d", text)
            assert f"kBlocksPerRank = {plan.blocks_per_rank};" in text


def test_algorithm_and_mechanism_mapping():
    assert make_plan(H200V, sched("all-reduce", "direct", "register")).struct == \
        "pkc::all_reduce_one_shot"
    assert make_plan(H200V, sched("all-reduce", "ring", "copy-engine")).kernel == \
        "all_reduce_ring_copy_engine"
    assert make_plan(H200V, sched("all-to-all", "direct", "tma")).header == \
        "collectives/all_to_all.cuh"
    mm = make_plan(H100, sched("broadcast", "in-network", "multimem"))
    assert mm.defines == (("PK_ENABLE_MULTIMEM", "1"),)
    assert "#error" in render(mm) and "refuse_multimem" in render(mm)
    seq = make_plan(H200V, sched("all-gather", "direct", "tma", peer_order="sequential"))
    assert seq.staggered is False and "kStaggered = false" in render(seq)
    assert make_plan(load_system("dgx-b200"), sched()).arch == "sm_100a"
    assert make_plan(load_system("hgx-b300"), sched()).arch == "sm_103a"
    assert set(RUNNABLE_MECHANISMS) == {"tma", "register", "copy-engine"}


@pytest.mark.parametrize("system,schedule,why", [
    (H200V, sched(impl="nccl", protocol="Simple"), "NCCL"),
    (H200V, sched("all-to-all", "rhd"), "no rhd all-to-all kernel"),
    (H200V, sched(alg="rhd", mech="copy-engine"), "rhd all-reduce runs on tma, register"),
    (H200V, sched("all-to-all", "pairwise"), "no pairwise"),
    (H200V, sched(mech="multimem"), "not multimem"),
    (H100, sched(alg="in-network", mech="tma"), "not tma"),
    (load_system("dgx-h100"), sched(world=4, chunk_bytes=1 << 20), "chunk"),
    (H200V, sched(overlap="inter-sm"), "fused"),
    (H200V, sched(dtype="fp8"), "bf16 and fp32"),
    (load_system("dgx-a100"), sched(), "sm_80"),
    (load_system("gb200-nvl576"), sched(world=600), "2..576 ranks"),
    # a TMA or copy-engine sum stages at most 8 sources; registers take any number
    (NVL72, sched(world=16), "TMA sum takes at most 8 sources"),
    (NVL72, sched("reduce-scatter", "direct", "copy-engine", world=9), "copy-engine reduction"),
    (NVL72, sched(alg="rhd", mech="register", world=72), "power-of-two world, not 72"),
    # several domains: only the hierarchical schedule splits into NVLink + NCCL parts
    (NVL72, sched(alg="ring", mech="register", world=144, domains=2), "hierarchical schedule"),
    (NVL72, sched("all-to-all", "hierarchical", "register", world=144, domains=2),
     "hierarchical"),
])
def test_infeasible_schedules_say_why(system, schedule, why):
    with pytest.raises(InfeasibleError, match=why):
        make_plan(system, schedule)


def test_a_system_later_than_blackwell_gets_the_newest_target_nvcc_offers():
    # vr-nvl144 (rubin) has no public target: the newest of kernel_contract.TARGETS that nvcc
    # lists (sm_103a with CUDA 13.0; the last of them without nvcc), named in the plan
    plan = make_plan(load_system("vr-nvl144"), sched(world=72, mech="register"))
    assert plan.arch in ("sm_100a", "sm_103a") and "rubin" in plan.arch_note
    assert plan.arch in plan.arch_note and plan.arch_note in render(plan)


def test_world_sized_at_run_time_up_to_a_domain():
    # 576 ranks on one domain: one plan, the world a run-time argument (no fixed array of ranks)
    plan = make_plan(load_system("gb200-nvl576"), sched("all-gather", "ring", "tma", world=576))
    text = render(plan)
    assert plan.world == 576 and "PKC_MAX_RANKS" not in text and "[8]" not in text
    assert "pkc::peers<T, kWide>" in text and "bool kWide" in text


def test_hierarchical_manifest_names_the_nccl_part(tmp_path):
    system, s = GOLDEN_CASES["all-reduce-hierarchical-register-2x72"]
    m = json.loads(codegen.emit(system, s, None, tmp_path).manifest.read_text())
    assert m["plan"]["world"] == 72 and m["plan"]["domains"] == 2
    assert m["plan"]["kernel"] == "all_reduce_ring_reg"          # the NVLink part: a ring
    assert m["scale_out"] == {"impl": "nccl", "op": "all-reduce", "ranks": 2,
                              "communicator": m["scale_out"]["communicator"], "emitted": False}
    # phases [0, 72) is the ring's reduce-scatter, then NCCL, then [72, 143): 2 x 72 - 1 phases
    assert "[0, 72)" in m["calls"][0] and "NCCL" in m["calls"][1] and "[72, 143)" in m["calls"][2]


def test_emit_writes_source_and_manifest(tmp_path):
    s = sched("reduce-scatter", "ring", "tma", world=4)
    pred = fixed_prediction(s, H200V.name)
    e = codegen.emit(H200V, s, pred, tmp_path)
    assert e.source.name == f"reduce-scatter-{s.key()}.cu"
    assert e.manifest.name == f"reduce-scatter-{s.key()}.json"
    m = json.loads(e.manifest.read_text())
    assert Schedule.from_dict(m["schedule"]) == s
    assert m["prediction"]["time_s"] == pytest.approx(1.234e-3)
    assert m["entry"] == "pk_reduce_scatter_ring_tma"
    cmd = m["nvcc_command"]
    assert "-gencode=arch=compute_90a,code=sm_90a" in cmd and "-shared" in cmd
    assert cmd[-1].endswith(e.source.name) and m["build_options"]["arch"] == "sm_90a"
    assert "predicted 1.23 ms on h200-virtual" in e.source.read_text()


def test_plan_is_dumpable_and_frozen():
    plan = make_plan(H200V, sched())
    d = plan.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["smem_bytes"] == 4 * 32768 + 128      # four 32 KiB TMA stages + alignment
    with pytest.raises(Exception):
        plan.threads = 1  # type: ignore[misc]


def test_streamed_in_network_plan_takes_chunk_and_sms_from_the_schedule():
    from pksim_core.collective_model import build
    from pksim_core.kernel_contract import in_network_chunk_bytes
    s = sched("all-reduce", "in-network", "multimem", comm_sms=132)
    plan = make_plan(H100, s)
    assert plan.blocks_per_rank == 132 and plan.chunk_bytes == in_network_chunk_bytes(132)
    # the model's schedule names the same chunk, and codegen takes it as it is
    modelled = build(H100, s).schedule
    assert modelled.chunk_bytes == plan.chunk_bytes
    assert make_plan(H100, modelled).chunk_bytes == plan.chunk_bytes
    text = render(plan)
    assert f"kChunkBytes = {plan.chunk_bytes};" in text and "kBlocksPerRank = 132;" in text
    assert plan.defines == (("PK_ENABLE_MULTIMEM", "1"),) and not plan.emulated
    emu = make_plan(H100, s.with_(extra=(("multimem", "emulated"),)))
    assert emu.emulated and emu.defines == (("PKC_EMULATE_MULTIMEM", "1"),)
    assert emu.mechanism_label == "multimem-emulated"
    # the emulated build is the same source: only the switch differs
    assert render(emu).replace(emu.schedule_key, "K") == text.replace(plan.schedule_key, "K")
    for op in ("all-gather", "reduce-scatter"):
        assert make_plan(H100, sched(op, "in-network", "multimem")).chunk_bytes == 16 * 16384
    with pytest.raises(InfeasibleError, match="emulation"):
        make_plan(H100, sched("broadcast", "in-network", "multimem",
                              extra=(("multimem", "emulated"),)))
    with pytest.raises(InfeasibleError, match="chunk"):
        make_plan(H200V, sched(chunk_bytes=1 << 20))


def test_prepare_builds_and_checks_the_emulated_in_network_kernels(tmp_path):
    from validation.prepare.collectives import build_libs, emulated_cases, emulated_in_network
    from validation.runtime.reference import ELEM
    libs = build_libs(tmp_path, "h200-virtual", emulated_in_network(), build=False)
    sources = sorted((tmp_path / "src").glob("*.cu"))
    assert len(libs) == len(sources) == 3
    for src in sources:
        manifest = json.loads(src.with_suffix(".json").read_text())
        assert "-DPKC_EMULATE_MULTIMEM=1" in manifest["nvcc_command"]
        assert "PK_ENABLE_MULTIMEM" not in manifest["nvcc_command"]
    cases = emulated_cases(libs)
    assert {c["world"] for c in cases} == {2, 4, 8}
    assert {c["op"] for c in cases} == {"all-reduce", "reduce-scatter", "all-gather"}
    for c in cases:   # multimem moves whole 16-byte vectors
        assert c["count"] * ELEM[c["dtype"]] % 16 == 0 and c["mechanism"] == "multimem-emulated"
