"""The published judge (validation/published/judge.py, pages.py, ratchet.py) and its CI
ratchet: every judged entry's median and p90 |error| per size band, and NCCL's logged picks
reproduced, may not get worse than validation/published/ratchet.toml (rewrite it on purpose:
python -m validation.published.ratchet --write)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pksim_cli.main import cli
from validation.published import ratchet
from validation.published.corpus import load_corpus
from validation.published.judge import BANDS, band_of, judge
from validation.published.pages import as_dict, markdown, write_pages


@pytest.fixture(scope="module")
def reports():
    return judge()


def test_no_multi_gpu_prediction_got_worse(reports):
    worse = ratchet.compare(ratchet.values(reports), ratchet.read())
    assert not worse, worse[0] + (f" (and {len(worse) - 1} more)" if len(worse) > 1 else "")


def test_ratchet_compare_names_entry_band_and_both_numbers():
    lines = ratchet.compare({"e": {"1-64MiB.median": 12.5, "picks_matched": 2}},
                            {"e": {"1-64MiB.median": 10.0, "picks_matched": 3}})
    assert lines == ["e band 1-64MiB.median: |error| 12.5 % > ratchet 10.0 %",
                     "e: NCCL picks reproduced 2, ratchet 3"]
    assert ratchet.up_half_pct(0.1234) == 12.5 and ratchet.up_half_pct(0.12) == 12.0


def test_every_entry_is_judged_or_says_why(reports):
    assert [r.name for r in reports] == [e.name for e in load_corpus()]
    for r in reports:
        if r.role == "primitive":
            assert r.rows == 0 and "not judged" in r.reason
        for c in r.curves:
            for p in c.points:
                assert (p.predicted_s is not None) != (p.reason is not None), (r.name, c.label)


def test_bands_and_the_curves_a_to_e(reports):
    assert [band_of(b) for b in (64 * 1024 - 1, 64 * 1024, 1 << 20, 64 << 20, (64 << 20) + 1)] \
        == ["<64KiB", "64KiB-1MiB", "1-64MiB", "1-64MiB", ">64MiB"]
    by = {r.name: r for r in reports}
    assert by["h200-8gpu-allreduce-nvls-graph"].curves[0].launch == "graph"
    assert by["h200-8gpu-allreduce-nvls-eager"].curves[0].launch == "one-thread"
    assert by["h200-8gpu-allreduce-nvls-graph"].predicted == 24
    assert "not in bytes" in by["h100-6gpu-allreduce-vllm24111"].curves[0].points[0].reason
    assert by["gb200-nvl72-partitions-allreduce-nccl1801"].system is None
    helion = {c.label: c for c in by["h100-8gpu-allreduce-oneshot-helion245"].curves}
    assert helion["helion_1shot"].algorithm == "direct"


def test_logged_picks_reproduced(reports):
    picks = [p for r in reports for p in r.picks]
    assert len(picks) == 11 and all(p.match for p in picks)


def test_pages_and_json(reports, tmp_path):
    d = as_dict(reports)
    json.dumps(d)
    assert set(d["entries"][0]["bands"]) == {name for name, _lo, _hi in BANDS}
    assert "## h200-8gpu-allreduce-nvls-graph" in markdown(reports)
    one = [r for r in reports if r.name == "h200-8gpu-allreduce-nvls-eager"]
    files = write_pages(one, tmp_path)
    assert files[0].name == "published.md" and files[1].suffix == ".png"
    with pytest.raises(Exception, match="--force"):
        write_pages(one, tmp_path)


def test_cli_published_refuses_to_overwrite(tmp_path):
    out = tmp_path / "pub"
    (out).mkdir()
    (out / "published.md").write_text("x")
    res = CliRunner().invoke(cli, ["validate", "--published", "-o", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
    res = CliRunner().invoke(cli, ["validate", "--published", "--write-docs", "-o", str(out)])
    assert res.exit_code == 2


def test_forced_algorithm_and_protocol(reports):
    # NVIDIA/nccl PR #2343 forced Ring/LL128 (NCCL_ALGO, NCCL_PROTO): the model's pick over
    # the remaining entries is ring/LL128 too, not its free choice (ring/Simple at 1 GiB)
    by = {r.name: r for r in reports}
    for c in by["b200-2gpu-allreduce-ring-ll128-nccl-pr2343"].curves:
        assert [p.label for p in c.points] == ["nccl/ring/LL128"]
    # the Megatron series force Ring on all-gather / reduce-scatter: ring at every size
    for c in by["h100-8gpu-ag-rs-symmetric-megatron-pr5596"].curves:
        assert all(p.label.startswith("nccl/ring/") for p in c.points if p.label)


def test_bound_rows_and_stated_launch(reports):
    # nccl-tests#333: "under 8 us" (at-most): a prediction below the bound is no error
    from validation.published.judge import Point
    assert Point(1024, 8e-6, 4e-6, qualifier="at-most").error == 0.0
    assert Point(1024, 8e-6, 10e-6, qualifier="at-most").error == pytest.approx(0.25)
    assert Point(1024, 8e-6, 4e-6, qualifier="at-least").error == pytest.approx(-0.5)
    assert Point(1024, 8e-6, 10e-6, qualifier="at-least").error == 0.0
    by = {r.name: r for r in reports}
    gb = by["gb200-4gpu-allreduce-small-nccl-tests333"].curves[0].points[0]
    assert gb.qualifier == "at-most" and gb.predicted_s < gb.measured_s and gb.error == 0.0
    # curve F: one process drives the 8 B200s, mode not stated: nccl-tests' default, one
    # thread without a CUDA graph
    f = by["b200-8gpu-allreduce"].curves[0]
    assert f.launch == "one-thread" and "nccl-tests' default" in f.note


def test_versus_table_in_the_pages(reports, tmp_path):
    from validation.published.judge import versus
    rows = versus(("dgx-h100",), (256 << 20,))
    assert len(rows) == 1 and rows[0]["same_busiest_group"]
    assert rows[0]["pk"]["busiest_group"] == rows[0]["nccl"]["busiest_group"] == "nvlink"
    page = markdown(reports[:1], rows)
    assert "## pk against NCCL from 64 MiB" in page and "| dgx-h100 | 256 |" in page
    assert as_dict(reports[:1], rows)["versus_nccl"][0]["system"] == "dgx-h100"
