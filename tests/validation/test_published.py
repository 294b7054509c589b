"""The published-measurement corpus (validation/published): every shipped entry loads, its
printed algbw/busbw agree with its time by the nccl-tests formulas, strict loading errors,
the nccl-tests / TUNING parser on synthesised fixtures, and ``pksim validate --published --add``."""
from __future__ import annotations

import tomllib
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from hwmodels.errors import ConfigError
from pksim_cli.main import cli
from validation.published.checks import entry_problems, flagged_rows, half_unit, row_problems
from validation.published.corpus import (CORPUS_DIR, find_entry, list_entries, load_corpus,
                                         load_entry, parse_entry)
from validation.published.nccl_tests import parse_nccl_tests, parse_tuning

DATA = Path(__file__).parent / "data"
AR_LOG = DATA / "nccl_tests_allreduce_graph_synth.txt"
AG_LOG = DATA / "nccl_tests_allgather_old_synth.txt"
TUNING_LOG = DATA / "nccl_tuning_synth.log"
CURVE_A = CORPUS_DIR / "h200-8gpu-allreduce-nvls-graph.toml"


def raw(path: Path = CURVE_A) -> dict:
    return tomllib.loads(path.read_text(), parse_float=Decimal)


# ---- the shipped corpus ----------------------------------------------------------------------

def test_every_shipped_entry_loads_with_its_role():
    entries = load_corpus()
    assert len(entries) == len(list_entries()) >= 25
    roles = {e.role for e in entries}
    assert roles == {"judge", "primitive", "tuner-log"}
    kinds = {"judge": ("curve", "points"), "primitive": ("primitive",),
             "tuner-log": ("tuner-log",)}
    for e in entries:
        assert e.name == e.path.stem and e.kind in kinds[e.role]
        assert e.series or e.tuner


def test_curves_agree_with_the_nccl_tests_formulas():
    problems = [str(p) for e in load_corpus() for p in entry_problems(e)]
    assert problems == []
    # No row of nccl-model.md needed an "inconsistent" note: the transcriptions agree.
    assert [r for e in load_corpus() for r in flagged_rows(e)] == []


def test_the_check_catches_a_transcription_error():
    # curve A at 1 MiB: 1048576 B / 11.13 us = 94.21 GB/s (printed 94.18, from the unrounded
    # time); x 2*7/8 = 164.8 (printed 164.82). A swapped digit must fail.
    e = find_entry("h200-8gpu-allreduce-nvls-graph")
    row = next(r for r in e.series[0].rows if r.bytes == 1 << 20)
    assert row_problems(row, "all_reduce", 8) == []
    bad = type(row)(row.size_key, row.size, {**row.values, "busbw_GBps": Decimal("146.82")})
    assert "busbw 146.82" in row_problems(bad, "all_reduce", 8)[0]
    bad = type(row)(row.size_key, row.size, {**row.values, "time_us": Decimal("11.31")})
    assert "algbw 94.18" in row_problems(bad, "all_reduce", 8)[0]
    # all_gather: busbw = algbw * 7/8 (curve D at 1 MiB: 25.04 -> 21.91)
    d = find_entry("h200-8gpu-allgather-eager")
    row = next(r for r in d.series[0].rows if r.bytes == 1 << 20)
    assert row_problems(row, "all_gather", 8) == []
    assert row_problems(row, "all_reduce", 8)      # the wrong factor (2*7/8) fails


def test_half_unit_follows_printed_digits():
    assert half_unit(Decimal("5.70")) == pytest.approx(0.005)
    assert half_unit(Decimal("10171")) == pytest.approx(0.5)


def test_numbers_are_copied_exactly_and_units_converted_once():
    a = find_entry("h200-8gpu-allreduce-nvls-graph")
    assert a.role == "judge" and a.launch["mode"] == "graph" and a.nccl_version == "2.30.4"
    rows = {r.bytes: r for r in a.series[0].rows}
    assert len(rows) == 24 and str(rows[32768].values["time_us"]) == "5.70"
    assert rows[32768].time_s == pytest.approx(5.70e-6)
    assert rows[1 << 30].gbps("busbw_GBps") == pytest.approx(482.40e9)
    assert "algbw_GBps" not in rows[256].values          # only the time is quoted: no invention
    b = find_entry("h200-8gpu-allreduce-nvlsoff-graph")
    assert b.environment["nvls"] == "off" and b.environment["vars"]["NCCL_NVLS_ENABLE"] == "0"
    h = find_entry("h100-8gpu-allreduce-oneshot-helion245")
    first = h.series[0].rows[0]
    assert first.bytes == 8192 and first.size == 4096      # 4k bf16 elements = 8 KiB
    s = find_entry("h100-allreduce-custom-sglang2904")
    assert s.series[0].rows[0].bytes is None and s.series[0].rows[0].time_s == pytest.approx(9.5e-6)


def test_tuner_log_and_primitives():
    t = find_entry("h200-8gpu-nccl-2.30.4-tuning-log").tuner
    cells = {(c.coll, c.algo, c.proto): (c.latency_us, c.algbw_GBps) for c in t.table}
    assert cells[("AllReduce", "NVLS", "Simple")] == (Decimal("25.0"), Decimal("272.0"))
    assert cells[("AllGather", "Ring", "Simple")] == (Decimal("32.2"), Decimal("411.4"))
    picks = {(c.bytes, c.nvls): (c.algo, c.proto) for c in t.choices}
    assert picks[(4194304, "default")] == ("NVLS", "SIMPLE")
    assert picks[(33554432, "off")] == ("RING", "LL128")
    assert t.channels["nvls"] == 16
    prim = [e for e in load_corpus() if e.role == "primitive"]
    assert {e.name for e in prim} == {"pk-nvlink-mechanism-bandwidth",
                                       "pk-nvlink-granularity-and-sms", "pk-sync-latency"}
    sync = find_entry("pk-sync-latency")
    assert [r.time_s for s in sync.series for r in s.rows] == pytest.approx([64e-9, 832e-9])


def test_find_entry_by_name_or_path_and_unknown():
    assert find_entry(str(CURVE_A)).name == CURVE_A.stem
    with pytest.raises(ConfigError, match="unknown corpus entry 'nope'"):
        find_entry("nope")


# ---- strict loading ---------------------------------------------------------------------------

def _edit(doc: dict, dotted: str, value=None, delete=False) -> dict:
    node = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if delete:
        del node[parts[-1]]
    elif isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value
    return doc


@pytest.mark.parametrize("dotted, value, delete, message", [
    ("launch.mood", "graph", False, "unknown key 'launch.mood'"),
    ("system.gpu", None, True, "missing key 'system.gpu'"),
    ("launch.mode", "cuda-graph", False, "launch.mode = 'cuda-graph': not one of"),
    ("system.gpus", "8", False, "system.gpus = '8': expected an integer"),
    ("series.0.rows.3.time_us", Decimal("-5.07"), False, "must not be negative"),
    ("series.0.rows.3.time_us", Decimal("NaN"), False, "not a finite number"),
    ("series.0.rows.3.bytes", 512, False, "series.0.rows.3.bytes = 512: duplicate size"),
    ("series.0.rows.3.bytes", 100, False, "series.0.rows.3.bytes = 100: unsorted size"),
    ("series.0.rows.3.speed", 1, False, "unknown key 'series.0.rows.3.speed'"),
    ("role", "primitive", False, "role = 'primitive': a curve entry has role 'judge'"),
    ("conventions", None, True, "missing table [conventions]"),
])
def test_strict_loading_errors_name_file_key_and_value(dotted, value, delete, message):
    doc = _edit(raw(), dotted, value, delete)
    with pytest.raises(ConfigError) as info:
        parse_entry(doc, CURVE_A)
    text = str(info.value)
    assert message in text and str(CURVE_A) in text and "\n" not in text


def test_bad_toml_file_and_name_mismatch(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="broken.toml: not valid TOML"):
        load_entry(bad)
    other = tmp_path / "other-name.toml"
    other.write_text(CURVE_A.read_text())
    with pytest.raises(ConfigError, match="must be the file name 'other-name'"):
        load_entry(other)


# ---- the parser on the synthesised fixtures ---------------------------------------------------

def test_parse_recent_all_reduce_output():
    run = parse_nccl_tests(AR_LOG.read_text())
    assert run.op == "all_reduce" and run.nccl_version == "2.30.4"
    assert run.header == {"nThread": 1, "nGpus": 8, "warmup": 50, "iters": 100, "graph": 10}
    assert run.launch_mode == "graph" and run.processes == "one" and run.gpu == "NVIDIA H200"
    assert len(run.devices) == 8 and len(run.rows) == 8
    r = run.rows[1]
    assert (r.bytes, r.count, r.dtype, r.redop, r.root) == (32768, 8192, "float", "sum", -1)
    assert str(r.out_of_place.time_us) == "5.70" and r.out_of_place.wrong == "N/A"
    assert r.in_place.busbw_GBps == Decimal("10.07")


def test_parse_old_output_without_redop_and_root():
    run = parse_nccl_tests(AG_LOG.read_text())
    assert run.nccl_version is None and run.launch_mode is None   # no version line, no graph:
    assert run.processes == "per-gpu" and run.header["nGpus"] == 1
    r = run.rows[0]
    assert (r.bytes, r.dtype, r.redop, r.root) == (65536, "float", None, None)
    assert r.out_of_place.algbw_GBps == Decimal("1.78") and r.in_place.wrong == "0e+00"


def test_parser_errors_are_one_line():
    with pytest.raises(ConfigError, match="no nccl-tests result rows"):
        parse_nccl_tests("# nThread 1\nhello\n", "x.log")
    text = AR_LOG.read_text().replace("  5.70  ", "  5.7x  ", 1)
    with pytest.raises(ConfigError, match=r"x.log:\d+: '5.7x' is not a number"):
        parse_nccl_tests(text, "x.log")
    with pytest.raises(ConfigError, match="no TUNING table"):
        parse_tuning("nothing here", "t.log")


def test_parse_tuning_log():
    t = parse_tuning(TUNING_LOG.read_text())
    cells = {(c, a, p): (lat, bw) for c, a, p, lat, bw in t.table}
    assert cells[("AllReduce", "Ring", "LL")] == (Decimal("15.0"), Decimal("80.6"))
    assert cells[("AllReduce", "NVLS", "Simple")] == (Decimal("25.0"), Decimal("272.0"))
    assert cells[("AllReduce", "NVLSTree", "Simple")][1] == 0
    assert len(t.table) == 21
    assert t.choices == (("AllReduce", 1024, "RING", "LL", 0, 0),
                         ("AllReduce", 131072, "RING", "LL", 0, 3),
                         ("AllReduce", 4194304, "NVLS", "SIMPLE", 0, 15))


# ---- pksim validate --published --add ----------------------------------------------------------

FULL = ["--system", "8x H200 SXM", "--source", "my run, 2026-09-01", "--nvls", "default"]


def run_cli(args):
    return CliRunner().invoke(cli, ["validate", "--published", *args])


def test_add_writes_an_entry_that_loads_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "my-h200-allreduce.toml"
    res = run_cli(["--add", str(AR_LOG), "--tuning", str(TUNING_LOG), *FULL, "-o", str(out)])
    assert res.exit_code == 0, res.output
    e = load_entry(out)
    assert e.name == "my-h200-allreduce" and e.role == "judge" and e.nccl_version == "2.30.4"
    assert e.launch["mode"] == "graph" and e.launch["processes"] == "one"
    assert e.system["gpus"] == 8 and [s.label for s in e.series] == ["out-of-place", "in-place"]
    assert entry_problems(e) == [] and len(e.tuner.choices) == 3
    before = out.read_text()
    res = run_cli(["--add", str(AR_LOG), *FULL, "-o", str(out)])
    assert res.exit_code == 2 and "exists (give --force" in res.output
    assert out.read_text() == before
    res = run_cli(["--add", str(AR_LOG), *FULL, "--name", "renamed", "--force", "-o", str(out)])
    assert res.exit_code == 2 and "must be the file name" in res.output
    res = run_cli(["--add", str(AR_LOG), *FULL, "--force", "-o", str(out)])
    assert res.exit_code == 0 and load_entry(out).tuner is None


@pytest.mark.parametrize("drop, option", [("--system", "--system"), ("--source", "--source"),
                                          ("--nvls", "--nvls")])
def test_add_missing_field_is_a_one_line_error(tmp_path, drop, option):
    args = list(FULL)
    i = args.index(drop)
    del args[i:i + 2]
    out = tmp_path / "e.toml"
    res = run_cli(["--add", str(AR_LOG), *args, "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and f"give {option}" in lines[0]


def test_add_old_log_needs_version_and_launch_mode(tmp_path):
    out = tmp_path / "ag.toml"
    res = run_cli(["--add", str(AG_LOG), *FULL, "-o", str(out)])
    assert res.exit_code == 2 and "give --nccl-version" in res.output
    res = run_cli(["--add", str(AG_LOG), *FULL, "--nccl-version", "2.18.3", "-o", str(out)])
    assert res.exit_code == 2 and "give --launch" in res.output
    res = run_cli(["--add", str(AG_LOG), *FULL, "--nccl-version", "2.18.3", "--launch", "eager",
                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    e = load_entry(out)
    assert e.conventions["op"] == "all_gather" and e.conventions["redop"] == "none"
    assert entry_problems(e) == []


def test_add_needs_published(tmp_path):
    # --published without --add is the judge: tests/validation/test_published_judge.py
    res = CliRunner().invoke(cli, ["validate", "--add", str(AR_LOG), "-o", str(tmp_path / "x.toml")])
    assert res.exit_code == 2 and "only apply with --published" in res.output
    res = CliRunner().invoke(cli, ["validate", "--help"])
    assert res.exit_code == 0 and "--published" in res.output and "--tuning" in res.output
