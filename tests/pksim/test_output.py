"""Plain output made for reading: three significant figures in one unit per column, text
left and numbers right, no cell ever cut whatever the terminal, and predict's guessed figures
summarised by how much each moves the prediction (pksim.sensitivity)."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from hwmodels.units import Seconds, format_time, significant, time_unit
from pksim.cli.main import cli
from pksim.cli.output import table
from pksim.search import best
from pksim.sensitivity import swings


@pytest.mark.parametrize("value, text", [(2.0, "2.00"), (3.9624, "3.96"), (82.83, "82.8"),
                                         (0.805, "0.805"), (3962.47, "3962"), (9.996, "10.0"),
                                         (99.96, "100"), (0.0099996, "0.0100"), (0, "0")])
def test_three_significant_figures_trailing_zeros_kept(value, text):
    assert significant(value) == text


def test_one_unit_for_a_set_of_times():
    assert time_unit([19.3e-6, 3.96e-3]) == ("us", 1e-6)       # the smallest decides
    assert time_unit([1.1e-3, 2.37e-3]) == ("ms", 1e-3)
    assert time_unit(0.9999e-3) == ("ms", 1e-3)               # reads 1.00 ms, not 1000 us
    assert format_time(2e-3) == "2.00 ms" and format_time(805e-6, "ms") == "0.805 ms"


def _columns(text: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and row cells of a rich table, with their padding kept."""
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    rows = [line for line in text.splitlines() if line.startswith("│")]
    split = lambda line, sep: line.strip(sep).split(sep)              # noqa: E731
    return split(header, "┃"), [split(r, "│") for r in rows]


def test_table_one_unit_per_column_text_left_numbers_right(capsys):
    table("t", ["schedule", "time", "speed-up"],
          [["in-network/multimem/32sm/chunk524288", Seconds(3.96e-3), "1.03x"],
           ["rhd/tma/16sm", Seconds(19.3e-6), "0.96x"], ["ring", Seconds(None), "-"]])
    header, rows = _columns(capsys.readouterr().out)
    assert [h.strip() for h in header] == ["schedule", "time (us)", "speed-up"]
    assert [r[1].strip() for r in rows] == ["3960", "19.3", "-"]
    assert rows[1][0].startswith(" rhd/tma/16sm ")              # text: left
    assert rows[1][1].endswith(" 19.3 ") and rows[1][2].endswith(" 0.96x ")   # numbers: right


@pytest.mark.parametrize("columns", ["40", "100", "300"])
def test_labels_are_never_cut_whatever_the_terminal(columns):
    result = CliRunner().invoke(cli, ["search", "--system", "dgx-h100", "--op", "all-reduce",
                                      "--bytes", "1GiB", "--top", "3"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    assert "in-network/multimem/32sm/chunk524288" in result.output
    assert result.output == CliRunner().invoke(
        cli, ["search", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1GiB",
              "--top", "3"]).output


def test_predict_prints_every_time_in_one_unit():
    result = CliRunner().invoke(cli, ["predict", "--system", "dgx-h100", "--op", "all-reduce",
                                      "--bytes", "1GiB"])
    times = re.findall(r"(\d+(?:\.\d+)?) (us|ms|ns)\b", result.output)
    assert {unit for _, unit in times} == {"ms"}
    assert all(len(v.replace(".", "").lstrip("0")) >= 3 for v, _ in times), times


def test_sensitivity_closed_form():
    """1 MiB all-reduce on dgx-h100 (in-network, 13.3 us): the stream launch (2.16 us,
    assumed) is paid once, so 20 % of it moves the time by 0.432 us either way; the NVLink
    latency (310 ns, estimate) is crossed on 6 hops of the critical path: 6 x 62 ns."""
    p = best(load_system("dgx-h100"), "all-reduce", 1 << 20)
    found = {s.key: s for s in swings("dgx-h100", (), p)}
    launch = found["gpu.sync.stream_launch_us"]
    assert launch.value == pytest.approx(2.16) and launch.tag == "assumed"
    assert launch.high_s - p.time_s == pytest.approx(0.2 * 2.16e-6, rel=1e-9)
    assert p.time_s - launch.low_s == pytest.approx(0.2 * 2.16e-6, rel=1e-9)
    latency = found["gpu.nvlink.latency_ns"]
    assert latency.high_s - p.time_s == pytest.approx(6 * 0.2 * 310e-9, rel=1e-9)
    ranked = list(found.values())
    assert ranked[0].key == "gpu.sync.stream_launch_us"       # the largest change first
    assert [s.change(p.time_s) for s in ranked] == sorted(
        (s.change(p.time_s) for s in ranked), reverse=True)
    # an efficiency at 0.85 cannot go 20 % higher (at most 1): that side is not simulated
    assert found["domain.switch_tier.0.reduction_efficiency"].high_s is None


def test_predict_summarises_guessed_figures_and_never_lists_an_override():
    args = ["predict", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
            "--set", "gpu.nvlink.latency_ns=400"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assumed = next(line for line in result.output.splitlines() if "assumed" in line)
    assert "gpu.nvlink.latency_ns" not in assumed and "--explain" in assumed
    assert len(assumed) < 300
    assert re.search(r"assumed +\d+ guessed figures; the most it moves at -20 % / \+20 %: "
                     r"gpu.sync.stream_launch_us -3.\d % / \+3.\d %", assumed), assumed
    assert "  set       gpu.nvlink.latency_ns=400" in result.output
    explained = CliRunner().invoke(cli, args + ["--explain"]).output
    count = int(re.search(r"assumed +(\d+) guessed", assumed).group(1))
    assert sum(line.startswith("│ ") for line in explained.splitlines()) == count
