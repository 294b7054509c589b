"""A schedule's label names it: within a search no two candidates share one, tables
never show two identical rows, and ``--schedule LABEL`` picks that exact schedule."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from pksim_cli.main import cli
from pksim_core.search import fused_space, space


def run(args):
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("system, op, nbytes", [("gb200-nvl72", "all-reduce", 1 << 30),
                                                ("dgx-h100", "all-gather", 64 << 20),
                                                ("dgx-h100", "all-to-all", 1 << 20)])
def test_collective_labels_are_unique_in_the_space(system, op, nbytes):
    cands = space(load_system(system), op, nbytes)
    labels = [c.label() for c in cands]
    assert len(set(labels)) == len(set(cands))


def test_fused_labels_are_unique_in_the_space():
    cands = fused_space(load_system("dgx-h100"), "gemm-rs", {"m": 8192, "n": 8192, "k": 4096})
    assert len({c.label() for c in cands}) == len(set(cands))
    assert {"intra-sm/direct/tma", "intra-sm/direct/tma/chunk1048576"} <= {c.label() for c in cands}


def test_peer_order_and_chunk_in_the_label():
    s = space(load_system("dgx-h100"), "all-reduce", 1 << 30, algorithms=("two-shot",),
              mechanisms=("tma",), comm_sms=(32,))
    assert sorted(c.label() for c in s) == ["two-shot/tma/32sm", "two-shot/tma/32sm/sequential"]


SEARCHES = [
    ["--system", "gb200-nvl72", "--op", "all-reduce", "--bytes", "1GiB", "--top", "5"],
    ["--system", "dgx-h100", "--op", "gemm-rs", "--m", "8192", "--n", "8192", "--k", "4096",
     "--top", "6"],
]


@pytest.mark.parametrize("args", SEARCHES)
def test_search_rows_differ_and_schedule_label_reproduces_them(args):
    result = run(["search", *args, "--json"])
    assert result.exit_code == 0, result.output
    ranked = json.loads(result.output)["ranked"]
    labels = [p["label"] for p in ranked]
    assert len(set(labels)) == len(labels), labels
    base = args[:-2]                                        # without --top N
    for p in ranked[:3]:
        again = run(["predict", *base, "--schedule", p["label"], "--json"])
        assert again.exit_code == 0, again.output
        got = json.loads(again.output)
        assert got["schedule"] == p["schedule"]
        assert got["time_s"] == pytest.approx(p["time_s"], rel=1e-12)


def test_unknown_schedule_label_is_one_line():
    result = run(["predict", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
                  "--schedule", "nonsense/tma/3sm"])
    assert result.exit_code == 2
    assert result.output.startswith("pksim: error: --schedule 'nonsense/tma/3sm'")
    assert len(result.output.strip().splitlines()) == 1


def test_codegen_schedule_label_emits_that_schedule(tmp_path):
    label = "two-shot/tma/32sm/sequential"
    result = run(["codegen", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "64MiB",
                  "--schedule", label, "-o", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.output)
    assert manifest["schedule"]["peer_order"] == "sequential"
    assert manifest["schedule"]["comm_sms"] == 32 and manifest["schedule"]["algorithm"] == "two-shot"
