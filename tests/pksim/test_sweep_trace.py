"""``pksim sweep`` (nccl-tests layout, units, plots) and ``pksim trace`` (Chrome trace)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hwmodels.catalog import load_system
from pksim_core.runner import best_prediction
from pksim_core.study import Case
from pksim_core.trace import chrome_trace, tracks
from tests.pksim.helpers import one_line_error, run

PNG = b"\x89PNG\r\n\x1a\n"
SWEEP_COLUMNS = ["system", "op", "world", "size_bytes", "count", "type", "redop", "root",
                 "pk_time_s", "pk_algbw_GBps", "pk_busbw_GBps", "pk_label",
                 "nccl_time_s", "nccl_algbw_GBps", "nccl_busbw_GBps", "nccl_label",
                 "speedup", "size_B", "pk_schedule", "nccl_schedule"]    # the last: old names


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("command", ["sweep", "trace"])
def test_help(command):
    result = run([command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_sweep_nccl_tests_layout_and_units(tmp_path):
    out = tmp_path / "sweep"
    result = run(["sweep", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "4KiB:64KiB",
                  "--workers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "pk time (us)" in result.output and "nccl busbw" in result.output
    rows = read_csv(out / "sweep.csv")
    assert list(rows[0]) == SWEEP_COLUMNS
    assert [int(r["size_bytes"]) for r in rows] == [4096, 8192, 16384, 32768, 65536]
    for r in rows:
        assert r["type"] == "bfloat16" and r["redop"] == "sum" and r["root"] == "-1"
        assert int(r["count"]) == int(r["size_bytes"]) // 2 and r["world"] == "8"
        assert r["size_B"] == r["size_bytes"] and r["pk_schedule"] == r["pk_label"]
        time_s, algbw = float(r["pk_time_s"]), float(r["pk_algbw_GBps"])
        # algbw (GB/s) = bytes / time: size_bytes / time_s / 1e9
        assert algbw == pytest.approx(int(r["size_bytes"]) / time_s / 1e9, rel=1e-4)
        assert float(r["pk_busbw_GBps"]) == pytest.approx(algbw * 2 * 7 / 8, rel=1e-4)
        assert float(r["speedup"]) == pytest.approx(float(r["nccl_time_s"]) / time_s,
                                                    rel=1e-4)
        assert r["nccl_label"].startswith("nccl/")
    data = json.loads((out / "sweep.json").read_text())
    assert data["units"]["time_s"] == "seconds" and len(data["rows"]) == 5
    for stem in ("busbw", "time", "roofline"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG
        assert read_csv(out / f"{stem}.csv") and json.loads((out / f"{stem}.json").read_text())


def test_sweep_several_systems_and_a_shape_range(tmp_path):
    out = tmp_path / "s"
    result = run(["sweep", "--system", "dgx-h100,dgx-b200", "--op", "all-gather",
                  "--shape", "m=1024:4096", "--shape", "n=1024", "--impl", "pk", "--json",
                  "--workers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert {r["system"] for r in rows} == {"dgx-h100", "dgx-b200"}
    assert sorted({r["size_bytes"] for r in rows}) == [m * 1024 * 2 for m in (1024, 2048, 4096)]
    assert "nccl_time_s" not in read_csv(out / "sweep.csv")[0]
    points = json.loads((out / "busbw.json").read_text())
    assert {p["system"] for p in points} == {"dgx-h100", "dgx-b200"}


def test_sweep_errors(tmp_path):
    out = ["-o", str(tmp_path / "o"), "--workers", "1"]
    base = ["sweep", "--system", "dgx-h100", "--op", "all-reduce"]
    one_line_error(run(base + ["--bytes", "8GiB:1KiB"] + out), "ends below its start")
    one_line_error(run(base + ["--bytes", "lots"] + out), "cannot read size")
    one_line_error(run(base + out), "--bytes")
    one_line_error(run(["sweep", "--system", "nope", "--op", "all-reduce", "--bytes", "1KiB"]
                       + out), "unknown system 'nope'")
    one_line_error(run(base + ["--bytes", "1KiB", "--set", "gpu.hbm.nope=1"] + out),
                   "unknown key")
    one_line_error(run(base + ["--bytes", "1KiB", "--world", "9"] + out), "larger than")
    ok = run(base + ["--bytes", "1KiB", "--impl", "nccl"] + out)
    assert ok.exit_code == 0, ok.output
    one_line_error(run(base + ["--bytes", "1KiB", "--impl", "nccl"] + out), "exists", "--force")


def test_sweep_of_a_fused_op_over_a_shape_range(tmp_path):
    out = tmp_path / "g"
    result = run(["sweep", "--system", "dgx-h100", "--op", "ag-gemm", "--shape", "m=1024:2048",
                  "--shape", "n=1024", "--shape", "k=1024", "--workers", "1", "--json",
                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert [r["shape"] for r in rows] == ["m=1024 n=1024 k=1024", "m=2048 n=1024 k=1024"]
    assert all(r["pk_time_s"] <= r["nccl_time_s"] for r in rows)       # --json: seconds
    assert (out / "time.png").read_bytes()[:8] == PNG


def test_trace_file_loads_with_trace_events(tmp_path):
    path = tmp_path / "t.json"
    result = run(["trace", "--system", "dgx-h100", "--op", "all-reduce", "--bytes", "16MiB",
                  "--algorithm", "ring", "--mechanism", "tma", "--comm-sms", "16",
                  "--chunk-bytes", "512KiB", "-o", str(path), "--gantt"])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and "name" in e["args"]}
    assert {"rank 0", "links", "lane 0", "comm SMs (16, tma)", "nvl_out"} <= \
        {n.split("link ")[-1] for n in names}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(trace["otherData"]["time_s"] * 1e6, rel=0.02)
    assert (tmp_path / "t-gantt.png").read_bytes()[:8] == PNG
    one_line_error(run(["trace", "--system", "dgx-h100", "--op", "all-reduce", "--bytes",
                        "16MiB", "-o", str(path)]), "exists")
    one_line_error(run(["trace", "--system", "dgx-h100", "--op", "all-reduce", "--bytes",
                        "16MiB", "-o", str(tmp_path / "t.txt")]), "FILE.json")


def test_trace_tracks_per_rank_sm_group_and_link_class():
    system = load_system("dgx-h100")
    p = best_prediction(system, Case("ag", "all-gather", (("bytes", 1 << 20),), world=8),
                        "nccl", record=True)
    rows = tracks(system, p)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"lane", "sm-group", "link"}
    assert any(r["track"].startswith("rank 0 / NCCL channels") for r in rows)
    for track in {r["track"] for r in rows}:                   # no overlaps on a track
        spans = sorted((r["start_s"], r["end_s"]) for r in rows if r["track"] == track)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert chrome_trace(system, p)["otherData"]["schedule"].startswith("nccl/")


def _spans(trace: dict) -> tuple[list[dict], dict[tuple[int, int], str]]:
    events = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    return [e for e in events if e["ph"] == "X"], threads


def test_trace_of_a_fused_op_has_compute_comm_and_link_tracks(tmp_path):
    path = tmp_path / "gemm-rs.json"
    result = run(["trace", "--system", "dgx-h100", "--op", "gemm-rs", "--m", "8192", "--n",
                  "8192", "--k", "2048", "--overlap", "inter-sm", "--mechanism", "tma",
                  "--comm-sms", "16", "--chunk-bytes", "0", "-o", str(path), "--gantt"])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    spans, threads = _spans(trace)
    names = set(threads.values())
    assert {"compute SMs (116)", "comm SMs (16, tma)", "link nvl_out", "link nvl_in"} <= names
    compute = [e for e in spans if threads[(e["pid"], e["tid"])].startswith("compute")]
    comm = [e for e in spans if threads[(e["pid"], e["tid"])].startswith("comm")]
    # 8 ranks: a chunk of 8192 / 8 rows per peer (7 peers, then the own rows), each
    # 1024 / 128 x 8192 / 256 = 256 output tiles (256 / 116 = 2.2 waves), after the kernel
    # launch. The owners pull and sum their rows' partials once the own rows are computed
    # (pull_reduce), following that chunk's ceil(256 / 132) = 2 waves of tiles over the
    # rank's SMs: the own rows are 2 chunks of 128 tiles (1.1 waves), each pulled after it.
    assert [e["name"] for e in compute][0] == "kernel launch"
    assert [e["name"] for e in compute][1:] == [f"chunk {i}: GEMM 256 tiles (2.2 waves)"
                                                for i in range(7)] + \
        [f"chunk {i}: GEMM 128 tiles (1.1 waves)" for i in (7, 8)]
    assert [e["name"] for e in comm] == [f"reduce-scatter chunk {i}" for i in (7, 8)]
    assert all(e["cat"] in ("compute", "comm", "link") for e in spans)
    start = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    assert start == 0 and end - start == pytest.approx(trace["otherData"]["time_s"] * 1e6, rel=0.01)
    assert trace["otherData"]["shape"] == {"k": 2048, "m": 8192, "n": 8192}
    assert (tmp_path / "gemm-rs-gantt.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("op, shape", [
    ("gemm-ar", ["--m", "4096", "--n", "8192", "--k", "1024"]),
    ("ag-gemm", ["--m", "8192", "--n", "4096", "--k", "8192"]),
    ("ring-attention", ["--batch", "2", "--heads", "16", "--seq", "16384", "--head-dim", "128"]),
    ("ulysses-attention", ["--batch", "2", "--heads", "64", "--seq", "8192", "--head-dim", "128"]),
    ("moe-dispatch-gemm", ["--tokens", "2048", "--hidden", "7168", "--experts", "64", "--topk",
                           "8", "--expert-hidden", "2048", "--skew", "1"]),
    ("moe-combine", ["--tokens", "2048", "--hidden", "7168", "--experts", "64", "--topk", "8",
                     "--expert-hidden", "2048"]),
])
def test_every_fused_op_traces_its_best_schedule(tmp_path, op, shape):
    path = tmp_path / f"{op}.json"
    result = run(["trace", "--system", "dgx-h100", "--op", op, *shape, "-o", str(path),
                  "--json"])
    assert result.exit_code == 0, result.output
    predicted = json.loads(result.output)["prediction"]
    trace = json.loads(path.read_text())
    spans, threads = _spans(trace)
    kinds = {e["cat"] for e in spans}
    assert {"compute", "comm"} <= kinds
    if predicted["schedule"]["overlap"] != "none":
        assert "link" in kinds
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(predicted["time_s"] * 1e6, rel=0.01)


def test_trace_of_the_baseline_is_the_library_kernel_then_nccl(tmp_path):
    path = tmp_path / "none.json"
    result = run(["trace", "--system", "dgx-h100", "--op", "gemm-rs", "--m", "4096", "--n",
                  "4096", "--k", "1024", "--impl", "nccl", "-o", str(path)])
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    spans, threads = _spans(trace)
    assert [e["name"] for e in spans if e["name"] != "kernel launch"] == [
        "library GEMM", "NCCL reduce-scatter"]
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(trace["otherData"]["time_s"] * 1e6, rel=1e-6)
