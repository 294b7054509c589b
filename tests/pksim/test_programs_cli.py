"""The CLI on programs: predict / search / trace --program, programs list / show / report,
--json in seconds, one-line errors with exit code 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli


def run(args):
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("args", [["programs"], ["programs", "list"], ["programs", "show"],
                                  ["programs", "report"]])
def test_help(args):
    result = run(args + ["--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_programs_list_and_show_json():
    rows = json.loads(run(["programs", "list", "--json"]).output)
    row = next(r for r in rows if r["name"] == "gemm-reducescatter")
    assert row["covers"] == [16] and row["collectives"] == 1
    shown = json.loads(run(["programs", "show", "gemm-reducescatter", "--json"]).output)
    assert shown["ops"][1]["comm_bytes"] == 2 * 1024 * 1024
    assert shown["tensors"]["C"]["shape"] == [1024, 1024]


def test_predict_program_json():
    result = run(["predict", "--program", "gemm-reducescatter", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["system"] == "dgx-h100"
    for key in ("baseline_s", "best_s", "roofline_s", "baseline_pct_of_roofline",
                "best_pct_of_roofline", "speedup", "ops", "best_tasks", "roofline_terms_s"):
        assert key in out
    assert out["best_s"] <= out["baseline_s"] and out["roofline_s"] <= out["best_s"]
    assert out["speedup"] == pytest.approx(out["baseline_s"] / out["best_s"])
    assert out["ops"][0]["comm_bytes"] is None                  # null: a GEMM sends nothing


def test_predict_program_table_and_search(tmp_path):
    text = run(["predict", "--program", "allreduce", "--system", "gb200-nvl72"]).output
    assert "% of roofline" in text and "gb200-nvl72" in text
    found = json.loads(run(["search", "--program", "allreduce", "--top", "2", "--json"]).output)
    assert found["calls"][0]["op"] == "all-reduce" and len(found["calls"][0]["ranked"]) == 2


def test_trace_program(tmp_path):
    path = tmp_path / "t.json"
    result = run(["trace", "--program", "layernorm-backward", "-o", str(path)])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"baseline (PyTorch + NCCL)", "pksim's best"}
    again = run(["trace", "--program", "layernorm-backward", "-o", str(path)])
    assert again.exit_code == 2 and "--force" in again.output


def test_report_writes_table_data_and_plot(tmp_path):
    result = run(["programs", "report", "-o", str(tmp_path), "--system", "dgx-h100",
                  "--program", "allreduce", "--program", "gemm-allreduce", "--date", "2026-12-04"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.md").read_text()
    assert "| gemm-allreduce | 13 |" in text and "CPU, no GPU, 2026-12-04" in text
    assert (tmp_path / "roofline-share.png").is_file()
    rows = json.loads((tmp_path / "results.json").read_text())["programs"]
    assert [r["program"] for r in rows] == ["allreduce", "gemm-allreduce"]


@pytest.mark.parametrize("args, message", [
    (["predict", "--program", "nope"], "unknown program 'nope'"),
    (["predict", "--program", "/no/such.toml"], "no such file"),
    (["predict", "--program", "allreduce", "--op", "all-reduce"], "leave out --op"),
    (["predict", "--program", "allreduce", "--bytes", "1MiB"], "leave out --bytes"),
    (["predict", "--program", "allreduce", "--impl", "nccl"], "leave out --impl"),
    (["predict", "--program", "allreduce", "--system", "nope"], "unknown system 'nope'"),
    (["programs", "show", "nope"], "unknown program 'nope'"),
    (["programs", "report", "--program", "nope"], "not a shipped program"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run(args)
    assert result.exit_code == 2
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and message in lines[0], result.output


def test_a_bad_program_file_names_file_op_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nworld = 8\n[tensors]\nx = { shape = [8] }\n'
                    '[[op]]\nname = "ar"\nkind = "all-reduce"\ninput = "x"\nreduce = "prod"\n')
    result = run(["predict", "--program", str(path)])
    assert result.exit_code == 2
    assert f"{path}: op 'ar': reduce 'prod'" in result.output


def test_predict_without_op_or_program_is_a_usage_error():
    result = run(["predict", "--system", "dgx-h100", "--bytes", "1MiB"])
    assert result.exit_code == 2 and "--op" in result.output
