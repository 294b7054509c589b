"""Plain output made for reading: three significant figures in one unit per column, text
left and numbers right, no cell ever cut whatever the terminal, and predict's guessed figures
summarised by how much each moves the prediction (pksim_core.sensitivity)."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from hwmodels.catalog import load_system
from hwmodels.units import Seconds, format_time, significant, time_unit
from pksim_core import plots
from pksim_cli.main import cli
from pksim_core.gantt import explain, gantt
from pksim_cli.output import table
from pksim_core.search import best
from pksim_core.sensitivity import swings


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
    """1 MiB all-reduce on dgx-h100 (in-network): the stream launch (3.423 us, assumed, carried
    from h200-calibrated: D71) is paid once, so 20 % of it moves the time by 0.6846 us either way; the NVLink
    latency (310 ns, estimate) is crossed on 6 hops of the critical path: 6 x 62 ns."""
    p = best(load_system("dgx-h100"), "all-reduce", 1 << 20)
    found = {s.key: s for s in swings("dgx-h100", (), p)}
    launch = found["gpu.sync.stream_launch_us"]
    assert launch.value == pytest.approx(3.423) and launch.tag == "assumed"
    assert launch.high_s - p.time_s == pytest.approx(0.2 * 3.423e-6, rel=1e-9)
    assert p.time_s - launch.low_s == pytest.approx(0.2 * 3.423e-6, rel=1e-9)
    latency = found["gpu.nvlink.latency_ns"]
    assert latency.high_s - p.time_s == pytest.approx(6 * 0.2 * 310e-9, rel=1e-9)
    ranked = list(found.values())
    assert ranked[0].key == "gpu.sync.stream_launch_us"       # the largest change first
    assert [s.change(p.time_s) for s in ranked] == sorted(
        (s.change(p.time_s) for s in ranked), reverse=True)
    # an efficiency at 0.85 cannot go 20 % higher (at most 1): that side is not simulated
    assert found["domain.switch_tier.0.reduction_efficiency"].high_s is None


@pytest.mark.parametrize("system, op, nbytes", [("dgx-h100", "all-reduce", 1 << 20),
                                                ("gb200-nvl72", "all-gather", 64 << 20),
                                                ("dgx-b200", "reduce-scatter", 4 << 10)])
def test_screened_sensitivity_names_what_the_full_check_names(system, op, nbytes):
    """predict's summary screens (every figure at +20 %, the other side for the three that
    move it most): it prints the same three figures, with the same times, as checking both
    sides of every figure does, at half the simulations."""
    p = best(load_system(system), op, nbytes)
    full = swings(system, (), p)
    screened = swings(system, (), p, screen=3)
    assert [(s.key, s.low_s, s.high_s) for s in screened[:3]] == \
        [(s.key, s.low_s, s.high_s) for s in full[:3]]
    assert len(screened) == len(full)
    assert sum(s.low_s is not None for s in screened) <= 3 + sum(
        s.high_s is None and s.low_s is not None for s in full)


def test_predict_summarises_guessed_figures_and_never_lists_an_override():
    args = ["predict", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "1MiB",
            "--set", "gpu.nvlink.latency_ns=400"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assumed = next(line for line in result.output.splitlines() if "assumed" in line)
    assert "gpu.nvlink.latency_ns" not in assumed and "--explain" in assumed
    assert len(assumed) < 300
    assert re.search(r"assumed +\d+ guessed figures; the most it moves at -20 % / \+20 %: "
                     r"gpu.sync.stream_launch_us -4.\d % / \+4.\d %", assumed), assumed
    assert "  set       gpu.nvlink.latency_ns=400" in result.output
    explained = CliRunner().invoke(cli, args + ["--explain"]).output
    count = int(re.search(r"assumed +(\d+) guessed", assumed).group(1))
    assert sum(line.startswith("│ ") for line in explained.splitlines()) == count


# ---- plots: legends that match the marks, every series named, titles that say what is drawn
def _points(systems_times: dict[str, list[float]], impl: str = "pk") -> list[dict]:
    return [{"panel": "p", "system": s, "impl": impl, "x": x, "x_label": "M", "bar": s,
             "time_s": t} for s, times in systems_times.items()
            for x, t in zip((1024, 4096), times)]


def test_time_legend_shows_each_systems_marker_and_impls_by_line_style():
    fig = plots.by_group(_points({"a": [1.0, 2.0], "b": [3.0, 4.0]})
                         + _points({"a": [2.0, 3.0]}, "nccl"), "time_s", "t", "title")
    legend = fig.legends[0]
    handles = dict(zip([t.get_text() for t in legend.get_texts()], legend.legend_handles))
    drawn = {line.get_color(): line.get_marker() for line in fig.axes[0].get_lines()}
    assert handles["a"].get_marker() == drawn[handles["a"].get_color()]     # as on the plot
    assert handles["a"].get_marker() != handles["b"].get_marker()
    assert handles["nccl"].get_marker() in ("None", "", None)               # impl: line style
    assert handles["nccl"].get_linestyle() == "--"


def test_identical_series_are_drawn_once_and_named_together():
    fig = plots.by_group(_points({"a": [1.0, 2.0], "b": [1.0, 2.0], "c": [1.5, 3.0]}),
                         "time_s", "t", "title")
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2                          # a (standing for b) and c
    assert [t.get_text() for t in ax.texts] == ["a ≈ b"]


def test_roofline_title_says_which_lines_it_draws():
    points = [{"system": "s", "impl": "pk", "size_bytes": 1 << 30, "busbw_GBps": 400.0}]
    far = plots.roofline(points, {"s": {"nvlink_GBps": 450.0, "alpha_s": 5e-6}}, "r")
    assert "no latency slope" in far.axes[0].get_title()
    points[0]["size_bytes"] = 1024
    near = plots.roofline(points, {"s": {"nvlink_GBps": 450.0, "alpha_s": 5e-6}}, "r")
    assert "dashed: latency slope" in near.axes[0].get_title()
    assert any(line.get_linestyle() == "--" for line in near.axes[0].get_lines())


def test_gantt_names_each_run_once_and_explains_its_phases():
    events = [{"run": run, "track": f"rank 0 / lane {i}", "name": "x", "group": group,
               "start_s": i * 1e-6, "end_s": (i + 1) * 1e-6}
              for run in ("pk two-shot/tma/16sm", "nccl nvls/Simple")
              for i, group in enumerate(("rs", "ag+rs", "rs+ag", "kar"))]
    fig = gantt(events, "g")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels.count("rank 0 / lane 0") == 2 and not any("two-shot" in x for x in labels)
    assert [t.get_text().strip() for t in ax.texts] == ["pk two-shot/tma/16sm",
                                                       "nccl nvls/Simple"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "kar: the generated all-reduce kernel's phases (loads, sums, stores)" in legend
    assert sum(x.startswith(("ag+rs", "rs+ag")) for x in legend) == 1       # one phase
    assert explain("nvls-copy").startswith("nvls-copy: NCCL NVLS")
