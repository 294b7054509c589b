"""codegen for the fused GEMM + communication ops (codegen.fused): plan, render, emit, golden
sources, the CLI path. No nvcc needed (tests/kernels/test_fused_build.py compiles them).

Golden files: tests/codegen/golden/fused-<op>-<overlap>.cu are the exact text rendered for one
fixed schedule per op with a fixed prediction; regenerate them with PKSIM_UPDATE_GOLDEN=1 after
an intended change, and review the diff.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import codegen
from codegen import fused
from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from pksim_cli.main import cli as cli_main
from pksim_core.prediction import Prediction
from pksim_core.schedule import Schedule
from tests.codegen.golden_sources import check_golden

H200V = load_system("h200-virtual")
H100 = load_system("dgx-h100")


def sched(op="gemm-rs", overlap="intra-sm", alg="direct", mech="tma", world=8, comm_sms=1,
          m=8192, n=8192, k=2048, **kw):
    return Schedule(op=op, shape=(("k", k), ("m", m), ("n", n)), world=world, overlap=overlap,
                    algorithm=alg, mechanism=mech, comm_sms=comm_sms, **kw)


def fixed_prediction(s: Schedule, system: str) -> Prediction:
    return Prediction(schedule=s, system=system, time_s=2.5e-3, bound_s=2.0e-3,
                      bound_resource="tensor", alpha_beta_s=2.2e-3, breakdown={"tensor": 2.0e-3},
                      link_util=0.0, compute_s=2.4e-3, baseline_s=3.0e-3, speedup=1.2)


GOLDEN_CASES = {
    "fused-gemm-rs-intra-sm": (H200V, sched()),
    "fused-ag-gemm-inter-sm": (H200V, sched("ag-gemm", "inter-sm", comm_sms=2, world=4)),
    "fused-ag-gemm-intra-sm": (H200V, sched("ag-gemm", "intra-sm", world=4)),
    "fused-gemm-ar-inter-sm": (H200V, sched("gemm-ar", "inter-sm", "two-shot", "register",
                                            comm_sms=2, peer_order="sequential")),
    # mechanism tma: the owners pull through TMA (kCopyTma, comm.cuh reduce_rect_tma; D54)
    "fused-gemm-rs-inter-sm-tma": (load_system("dgx-h100"), sched(overlap="inter-sm", comm_sms=16)),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_sources(name):
    system, s = GOLDEN_CASES[name]
    text = fused.render(fused.make_plan(system, s), fixed_prediction(s, system.name))
    check_golden(name, text)


def test_every_kernel_maps_and_renders_the_four_parts():
    for (op, overlap, alg), (template, mechs) in fused.KERNELS.items():
        for mech in mechs:
            system = H100 if mech == "multimem" else H200V
            plan = fused.make_plan(system, sched(op, overlap, alg, mech, comm_sms=2))
            text = fused.render(plan)
            parts = ["// ---- config", "// ---- globals", "// ---- kernel", "// ---- host entry point"]
            positions = [text.index(p) for p in parts]
            assert positions == sorted(positions), f"{plan.kernel}: parts out of order"
            assert f"using op = pkf::{template}<config>;" in text
            assert f'extern "C" int {plan.entry}(const pkf_args* a' in text
            assert "pkf::check_args<op, config>(a, rep)" in text
            assert not re.search(r"world\s*=\s*\d", text), "world is a run-time argument"
            assert f"kCommBlocks = {plan.comm_blocks};" in text
            assert plan.comm_blocks == (2 if overlap == "inter-sm" else 0)
            manifest = json.loads(json.loads(re.search(r"return (\".*\");", text).group(1)))
            assert manifest["entry"] == plan.entry and manifest["op"] == op
            assert ("#error" in text) == (mech == "multimem") == plan.compile_only


def test_the_inter_sm_schedules_pull_with_their_mechanism():
    # gemm-rs and gemm-ar inter-SM: the schedule's mechanism picks the pull's form, TMA
    # (config::kCopyTma = true: pull_reduce<kKind, true>, ops.cuh pull_op) or registers
    for op, alg in (("gemm-rs", "direct"), ("gemm-ar", "two-shot")):
        for mech, flag in (("tma", "true"), ("register", "false")):
            plan = fused.make_plan(H100, sched(op, "inter-sm", alg, mech, comm_sms=16))
            text = fused.render(plan)
            assert plan.copy_tma is (mech == "tma")
            assert f"static constexpr bool kCopyTma = {flag};" in text
            assert f"using op = pkf::{op.replace('-', '_')}_inter<config>;" in text


def test_plan_fields_follow_the_schedule():
    p = fused.make_plan(H200V, sched("ag-gemm", "inter-sm", mech="register", comm_sms=3,
                                     peer_order="sequential", tile=(256, 128, 64)))
    assert (p.bm, p.bn, p.bk, p.stages, p.epi_bufs) == (256, 128, 64, 4, 1)
    assert p.comm_blocks == 3 and p.staggered is False and p.copy_tma is False
    assert p.entry == "pk_ag_gemm_inter_sm" and p.arch == "sm_90a"
    d = p.to_dict()
    assert json.loads(json.dumps(d)) == d and d["compile_only"] is False
    mm = fused.make_plan(H100, sched("gemm-ar", "inter-sm", "in-network", "multimem"))
    assert mm.defines == (("PK_ENABLE_MULTIMEM", "1"),) and mm.kernel.endswith("_in_network")
    opts = fused.build_options(mm)
    assert dict(opts.defines)["PK_ENABLE_MULTIMEM"] == "1"
    assert len(dict(opts.defines)["PK_FUSED_SOURCES"]) == 16


@pytest.mark.parametrize("system,schedule,why", [
    (H200V, sched(overlap="none", mech="register"), "library GEMM and then the collective"),
    (H200V, sched("ag-gemm", "intra-sm", mech="register"), "intra-sm direct ag-gemm moves "
                                                             "data with tma, not register"),
    (H200V, sched("ag-gemm", "intra-sm", "ring"), "no intra-sm ring ag-gemm kernel"),
    (H200V, sched(overlap="inter-sm", mech="copy-engine", comm_sms=2),
     "moves data with tma, register, not copy-engine"),
    (H200V, sched("gemm-ar", "inter-sm", "direct", "register"), "no inter-sm direct gemm-ar"),
    (load_system("dgx-a100"), sched(), "no sm_80 fused kernel.*sm_90a"),
    (load_system("dgx-b200"), sched(), "no sm_100a fused kernel.*sm_90a"),
    (load_system("vr-nvl144"), sched(), "no rubin fused kernel"),
    (H200V, sched(dtype="fp8"), "bf16"),
    (H200V, sched(chunk_bytes=1 << 20), "chunk"),
    (H200V, sched(tile=(64, 64, 64)), "no GEMM config"),
    (H200V, sched(overlap="inter-sm", mech="register", comm_sms=16), "leave no GEMM SM"),
    (load_system("gb200-nvl72"), sched(world=16), "no sm_100a fused kernel"),
    (load_system("dgx-h100"), sched(world=600), "2..576 ranks"),
    (H200V, sched(impl="nccl", protocol="Simple"), "NCCL"),
])
def test_infeasible_schedules_say_why(system, schedule, why):
    with pytest.raises(InfeasibleError, match=why):
        fused.make_plan(system, schedule)


def test_emit_dispatches_fused_ops(tmp_path):
    s = sched("gemm-rs", "inter-sm", mech="register", comm_sms=2)
    e = codegen.emit(H200V, s, fixed_prediction(s, H200V.name), tmp_path)
    assert e.source.name == f"gemm-rs-{s.key()}.cu"
    m = json.loads(e.manifest.read_text())
    assert Schedule.from_dict(m["schedule"]) == s and m["entry"] == "pk_gemm_rs_inter_sm"
    assert m["plan"]["op_template"] == "gemm_rs_inter"
    assert codegen.options_for(e.plan) == fused.build_options(e.plan)
    assert "-gencode=arch=compute_90a,code=sm_90a" in m["nvcc_command"]
    assert "predicted 2.50 ms on h200-virtual" in e.source.read_text()


def test_cli_emits_a_fused_source(tmp_path):
    r = CliRunner().invoke(cli_main, ["codegen", "--system", "h200-virtual", "--op", "gemm-rs",
                                      "--m", "4096", "--n", "4096", "--k", "1024", "--world", "4",
                                      "--overlap", "intra-sm", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["plan"]["overlap"] == "intra-sm" and data["plan"]["world"] == 4
    assert Path(data["files"]["source"]).is_file()


@pytest.mark.parametrize("args,why", [
    (["--system", "dgx-a100", "--op", "gemm-rs", "--m", "64", "--n", "64", "--k", "64",
      "--world", "8", "--overlap", "intra-sm"], "sm_80"),
    (["--system", "h200-virtual", "--op", "ag-gemm", "--m", "64", "--n", "64", "--k", "64",
      "--world", "4", "--overlap", "intra-sm", "--mechanism", "register"],
     "implemented: inter-sm/direct/tma|register, intra-sm/direct/tma"),
    (["--system", "h200-virtual", "--op", "gemm-ar", "--m", "64", "--k", "64"], "needs --n"),
])
def test_cli_errors_are_one_line(tmp_path, args, why):
    r = CliRunner().invoke(cli_main, ["codegen", *args, "-o", str(tmp_path)])
    assert r.exit_code != 0
    assert why in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
