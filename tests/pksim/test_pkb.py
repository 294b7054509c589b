"""pksim pkb without a GPU: a ParallelKernelBench checkout made here (two stand-in references,
no PKB code), the signatures read from it, the solutions written, the report rendered."""
from __future__ import annotations

import ast
import gzip
import json

import pytest
from click.testing import CliRunner

from hwmodels.errors import ConfigError
from pksim_cli.main import cli
from pksim.pkb import report
from pksim.pkb.problems import NO_PROGRAM, parse_ids, problems

REFS = {
    "16_gemm_reducescatter.py": "import torch\nimport torch.distributed as dist\n\n"
        "@torch.no_grad()\ndef solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:\n"
        "    return A_local\n",
    "4_reduce.py": "import torch\nimport torch.distributed as dist\n\n"
        "def solution(tensor: torch.Tensor, dst: int = 0, *, op=None, **kw):\n"
        "    dist.reduce(tensor, dst=dst)\n    return tensor\n",
    "56_ring_attention_pp.py": "import torch.distributed as dist\n\ndef solution(q, k, *rest):\n"
        "    return q\n",
}


@pytest.fixture
def pkb(tmp_path):
    ref = tmp_path / "reference"
    ref.mkdir()
    for name, text in REFS.items():
        (ref / name).write_text(text)
    return tmp_path


def test_signatures_are_read_without_importing(pkb):
    found = {p.id: p for p in problems(pkb)}
    assert sorted(found) == [4, 16, 56]
    assert found[16].params == "A_local, B_local" and found[16].call == "A_local, B_local"
    assert found[4].params == "tensor, dst=0, *, op=None, **kw"
    assert found[4].call == "tensor, dst, op=op, **kw"
    assert found[56].params == "q, k, *rest" and found[56].programs == ()
    assert found[16].programs == ("gemm-reducescatter",)


def test_problem_ids_and_bad_input():
    assert parse_ids("1-3,7, 5") == [1, 2, 3, 5, 7]
    assert parse_ids(None) is None
    with pytest.raises(ConfigError, match="'x' is neither an id nor a range"):
        parse_ids("1,x")


def test_missing_checkout_and_missing_problems(pkb, tmp_path):
    with pytest.raises(ConfigError, match="no reference/ folder"):
        problems(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"--problems: \[9\] are not in"):
        problems(pkb, [4, 9])


def test_solve_writes_pkb_layout_following_the_plan(pkb):
    out = pkb / "solutions_pksim"
    res = CliRunner().invoke(cli, ["pkb", "solve", "--pkb", str(pkb), "--json"])
    assert res.exit_code == 0, res.output
    index = json.loads(res.output)
    rows = {r["id"]: r for r in index["problems"]}
    assert rows[16]["kernel"] == "gemm-rs" and rows[16]["file"] == "16_gemm_reducescatter_cuda.py"
    assert rows[4]["kernel"] is None and rows[4]["reference_calls"] == ["reduce"]
    assert rows[56]["program"] is None and rows[56]["no_program"] == NO_PROGRAM[56]
    assert rows[16]["prediction"]["best_steady_s"] < rows[16]["prediction"]["baseline_steady_s"]
    text = (out / "4_reduce_cuda.py").read_text()
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))
    assert fn.name == "solution" and ast.unparse(fn.args) == "tensor, dst=0, *, op=None, **kw"
    assert "Solution(__file__, '4_reduce', None)" in text
    assert "Solution(__file__, '16_gemm_reducescatter', 'gemm-rs')" in (out / "16_gemm_reducescatter_cuda.py").read_text()
    again = CliRunner().invoke(cli, ["pkb", "solve", "--pkb", str(pkb)])
    assert again.exit_code == 2 and "exists: use --force" in again.output


def test_the_report_counts_only_what_the_results_say(pkb, tmp_path):
    CliRunner().invoke(cli, ["pkb", "solve", "--pkb", str(pkb)])
    results = tmp_path / "r.jsonl"
    rows = [{"id": 4, "stem": "4_reduce", "ok": True, "world": 8,
             "device": {"gpus": ["H100"], "gpu_uuids": ["GPU-1234"]},
             "trials": [{"trial": t, "ok": True, "max_abs_diff": t / 4, "why": ""} for t in range(5)],
             "tally": {"reduce": 5}, "reference_adaptations": {"reduce_keeps": 5}},
            {"id": 16, "stem": "16_gemm_reducescatter", "ok": False, "world": 8,
             "errors": ["rank 0: CommError: x"]}]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "pkb.md"
    res = CliRunner().invoke(cli, ["pkb", "report", "--solutions", str(pkb / "solutions_pksim"),
                                   "--results", str(results), "-o", str(out), "--pkb-commit", "abc"])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "Checked: 2 of 3 problems; correct (every trial on every rank within atol = rtol = 1e-2): 1." in text
    assert "| 4 | reduce | yes | 5/5 | 0 0.25 0.5 0.75 1 | torch compute; generated: reduce x5 |" in text
    assert "device H100 (GPU-1234)" in text
    assert "| 56 | ring_attention_pp | not run |" in text
    assert "- 16 16_gemm_reducescatter: rank 0: CommError: x" in text
    assert "- not checked (no result in the file): 56" in text
    assert "ParallelKernelBench commit `abc`" in text
    assert "the ranks other than dst keep their tensor" in text
    assert report.read_rows(results)[0]["id"] == 4
    packed = tmp_path / "r.jsonl.gz"
    packed.write_bytes(gzip.compress(results.read_bytes()))
    assert report.read_rows(packed) == report.read_rows(results)


@pytest.mark.parametrize("args", [["pkb"], ["pkb", "solve"], ["pkb", "check"], ["pkb", "report"]])
def test_help(args):
    res = CliRunner().invoke(cli, args + ["--help"])
    assert res.exit_code == 0 and "Usage:" in res.output


def test_check_refuses_bad_options_in_one_line(pkb):
    res = CliRunner().invoke(cli, ["pkb", "check", "--pkb", str(pkb), "--trials", "0"])
    assert res.exit_code == 2 and res.output.strip() == "pksim: error: --trials must be at least 1, got 0"
    res = CliRunner().invoke(cli, ["pkb", "check", "--pkb", str(pkb)])
    assert res.exit_code == 2 and "no solution files in" in res.output


def test_reduce_ops_and_reference_paths(pkb, monkeypatch):
    from enum import Enum

    from pksim.pkb.runtime import reference_path
    from pksim.pkb.shim import _op
    from pksim.torch.errors import CommError

    class RedOpType(Enum):
        SUM = 0
        MAX = 1
    assert [_op(None), _op(RedOpType.SUM), _op(RedOpType.MAX)] == ["sum", "sum", "max"]
    sol = pkb / "solutions_pksim" / "4_reduce_cuda.py"
    assert reference_path(str(sol), "4_reduce") == pkb / "reference" / "4_reduce.py"
    monkeypatch.setenv("PKB_ROOT", str(pkb / "nowhere"))
    with pytest.raises(CommError, match="no reference at .*set PKB_ROOT"):
        reference_path(str(sol), "4_reduce")
