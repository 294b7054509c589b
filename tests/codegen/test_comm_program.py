"""``pksim codegen --program``: the kernels of a program's communication (codegen/program.py).
No nvcc needed."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import codegen
from codegen.program import emit_program, program_kernels
from hwmodels.catalog import load_system
from pksim_cli.main import cli
from pksim_core.programs.costs import kernel_call, pk_call
from pksim_core.programs.load import load_program
from pksim_core.workloads import varsize_ops

H100 = load_system("dgx-h100")


def test_each_comm_op_gets_its_kernel():
    by_op = {k.op: k for k in program_kernels(H100, load_program("importance-sampling-loss"))}
    # min and max all-reduces run the epilogue kernels with the op in their config
    for name, op in (("all_reduce_min", "min"), ("all_reduce_max", "max")):
        s = by_op[name].schedule
        assert s.op == "all-reduce" and dict(s.extra) == {"reduce_op": op}
        assert s.algorithm in ("direct", "two-shot") and s.mechanism != "copy-engine"
    # the ring attention's batches: send-recv with its two sends to the next rank, k and v of
    # 16 x 2 x 8 x 64 = 16384 bf16 elements each: 32768 elements from each rank to the next
    ring = program_kernels(H100, load_program("ring-attention"))
    assert {k.schedule.op for k in ring} == {"send-recv"}
    assert varsize_ops.matrix("send-recv", ring[0].schedule.extra, 8, 0) == [
        [32768 if q == (p + 1) % 8 else 0 for q in range(8)] for p in range(8)]
    # MoE dispatch and combine: the all-to-all-v kernel (splits at run time)
    moe = {k.op: k for k in program_kernels(H100, load_program("moe-ep-balanced"))}
    assert moe["dispatch"].schedule.op == "all-to-all-v" and moe["dispatch"].prediction


@pytest.mark.parametrize("name", ["ring-attention", "hyena-conv1d-halo", "moe-ep-balanced",
                                  "sam-iou-suppression"])
def test_the_emitted_split_kernels_are_what_predict_program_costs(name):
    # the -v and send-recv kernels: codegen --program emits the schedule pksim's best costs,
    # with the same prediction (both from the kernel's phases at the program's splits)
    program = load_program(name)
    checked = 0
    for k in program_kernels(H100, program):
        call = kernel_call(program, program.op(k.op))
        if call is None:
            continue
        pk = pk_call(H100, call)
        assert k.schedule == pk.schedule and k.prediction.time_s == pk.time_s, k.op
        checked += 1
    assert checked


def test_emit_program_writes_each_kernel_once_and_an_index(tmp_path):
    units, index = emit_program(H100, load_program("ring-attention"), tmp_path, codegen.emit)
    data = json.loads(index.read_text())
    assert len(units) == 1 and len(data["kernels"]) == 7
    assert {r["source"] for r in data["kernels"]} == {units[0].source.name}
    text = units[0].source.read_text()     # send-recv's entry on all-to-all-v's kernel struct
    assert 'int pk_send_recv_direct_reg(' in text and "pkc::all_to_all_v_direct;" in text


def test_cli_program_and_its_errors(tmp_path):
    r = CliRunner().invoke(cli, ["codegen", "--program", "moe-ep-balanced", "--system",
                                 "dgx-h100", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "dispatch" in r.output and (tmp_path / "program-moe-ep-balanced.json").is_file()
    again = CliRunner().invoke(cli, ["codegen", "--program", "moe-ep-balanced", "--system",
                                     "dgx-h100", "-o", str(tmp_path)])
    assert again.exit_code == 2 and "exists" in again.output
    mixed = CliRunner().invoke(cli, ["codegen", "--program", "moe-ep-balanced", "--op", "reduce",
                                     "--system", "dgx-h100", "-o", str(tmp_path / "x")])
    assert mixed.exit_code == 2 and "drop --op" in mixed.output
    none = CliRunner().invoke(cli, ["codegen", "--system", "dgx-h100", "-o", str(tmp_path / "y")])
    assert none.exit_code == 2 and "--op is required" in none.output


@pytest.mark.parametrize("args", [
    ["--op", "reduce", "--bytes", "16MiB", "--world", "4", "--root", "3"],
    ["--op", "all-to-all-v", "--world", "2", "--splits", "3,5;7,9"],
    ["--op", "send-recv", "--peers", "+1,-1", "--bytes", "1MiB"],
    ["--op", "all-reduce", "--bytes", "1MiB", "--reduce-op", "avg", "--epilogue", "bias"],
])
def test_cli_emits_the_new_ops(tmp_path, args):
    r = CliRunner().invoke(cli, ["codegen", "--system", "h200-virtual-calibrated", *args,
                                 "--json", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["schedule"]["op"] == args[1] and data["prediction"]["time_s"] > 0
    if "--splits" in args:      # the -v form's buffer: rank 1 sends 7 + 9 = 16 bf16 elements
        assert data["schedule"]["shape"]["bytes"] == 32
    if "--reduce-op" in args:
        assert "pkc::op_avg" in open(data["files"]["source"]).read()
