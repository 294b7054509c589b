"""The random-shape correctness matrix (validation/prepare/random_matrix.py) draws what issue
#38 asks of it, reproducibly, and its report names every failure with its seed and shape."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from validation.prepare import random_matrix as rm
from validation.report import random_matrix as report
from validation.suites.fused_kernels import VARIANTS


@pytest.fixture(scope="module")
def drawn():
    return rm.draw(38)


def test_same_seed_same_matrix_other_seed_other(drawn):
    assert rm.draw(38) == drawn
    other = rm.draw(39)
    assert [c["count"] for c in other[0]] != [c["count"] for c in drawn[0]]


def test_size_and_coverage(drawn):
    colls, fused = drawn
    assert len(colls) + len(fused) >= 2000
    kernels = {tuple(c["variant"]) for c in colls}
    assert kernels == {(v.op, v.algorithm, v.mechanism, v.reduce_op, v.epilogue, v.peers)
                       for v in rm.collective_variants()}
    runnable = {tuple(v) for v in VARIANTS if v[3] != "multimem"}
    assert {tuple(f["variant"]) for f in fused} == runnable | {(op, "none") for op in
                                                              ("gemm-rs", "ag-gemm", "gemm-ar")}
    # every kernel at every world 2..8 (3, 5, 6, 7 included), collectives in both dtypes
    for k in kernels:
        worlds = {c["world"] for c in colls if tuple(c["variant"]) == k}
        dtypes = {c["dtype"] for c in colls if tuple(c["variant"]) == k}
        want = {2, 4, 8} if k[1] == "rhd" else set(range(2, 9))
        assert worlds == want and dtypes == {"bf16", "fp32"}, k
    for k in runnable:
        assert {f["shape"][0] for f in fused if tuple(f["variant"]) == k} == set(range(2, 9)), k
    assert any(c["mechanism"] == "multimem-emulated" for c in colls)
    assert not any(c["mechanism"] == "multimem" for c in colls)


def test_fused_shapes_are_ragged_and_bounded(drawn):
    _, fused = drawn
    for f in fused:
        w, m, n, k = f["shape"]
        assert 1 <= m <= rm.DIM_MAX and 8 <= n <= rm.DIM_MAX and 8 <= k <= rm.DIM_MAX, f
        assert m >= w and (m // w) % 2 == 1, f                 # odd rows per rank
        assert n % 8 == 0 and k % 8 == 0 and n % 64 and k % 64, f   # off every tile
        assert w * m * n * k <= rm.FLOP_CAP, f
        if f["variant"] == ["gemm-rs", "none"]:
            assert (m * n) % w == 0
    ms = [f["shape"][1] for f in fused]
    assert min(ms) < 64 and max(ms) > 8192         # both ends of the range are reached
    assert sum(m % 128 != 0 for m in ms) > 0.9 * len(ms)


def test_collective_shapes(drawn):
    colls, _ = drawn
    counts = [c["count"] for c in colls]
    assert min(counts) <= 4 and max(counts) >= 1 << 20
    assert sum(c % 2 for c in counts) > len(counts) / 3    # odd counts, off the 16-byte grid
    for c in colls:
        if c["mechanism"] == "multimem-emulated":
            per = 16 // {"bf16": 2, "fp32": 4}[c["dtype"]] * (c["world"] if c["op"] == "all-reduce" else 1)
            assert c["count"] % per == 0, c
        if c["op"] in ("all-gather-v", "reduce-scatter-v"):
            assert len(c["splits"]) == c["world"]
        if c["op"] in ("broadcast", "reduce", "gather", "scatter"):
            assert 0 <= c["root"] < c["world"]
    vsplits = [c["splits"] for c in colls if c["op"] in ("all-gather-v", "reduce-scatter-v")]
    assert any(0 in s for s in vsplits) and any(len(set(s)) == len(s) for s in vsplits)
    roots = Counter(c["root"] for c in colls if "root" in c)
    assert len(roots) >= 5


def test_fast_slice_covers_every_kernel():
    colls, fused = rm.draw(38, rm.FAST_CASES)
    assert {tuple(c["variant"]) for c in colls} == {tuple(c["variant"]) for c in rm.draw(38)[0]}
    assert len({tuple(f["variant"]) for f in fused}) == len(VARIANTS) + 3
    assert 150 <= len(colls) + len(fused) <= 2 * rm.FAST_CASES


def test_records_for_the_runners(tmp_path, drawn):
    info = rm.prepare(tmp_path, 38, rm.FAST_CASES, build=False)
    coll = json.loads((tmp_path / "coll" / "cases.json").read_text())
    fused = json.loads((tmp_path / "fused" / "cases.json").read_text())
    assert info["cases"] == len(coll) + len(fused)
    assert all(c["lib"].startswith("lib/lib") and c["lib"].endswith(".so") for c in coll)
    kinds = Counter(c["kind"] for c in fused)
    assert set(kinds) == {"fused", "none"} and all(not c["time"] for c in fused)
    assert len({c["id"] for c in coll + fused}) == len(coll) + len(fused)
    libs = (tmp_path / "fused" / "memcheck_libs.txt").read_text().split()
    assert len(libs) == len(set(libs)) == len(VARIANTS)


def test_report_lists_failures_with_seed_and_shape(drawn):
    colls, specs = drawn
    fused = rm.fused_cases(specs[:3], {n: f"lib/{n}.so" for n in
                                       ["gemm-rs-intra-sm-tma", "gemm", "reduce-scatter/direct/register"]})
    cases = colls[:4] + fused
    rows = [{"id": cases[0]["id"], "ok": True, "device": "GPU-x", "date": "2026-12-07"},
            {"id": cases[1]["id"], "ok": False, "error": "timed out waiting on flag 3"},
            {"id": fused[0]["id"], "ok": False, "bad": 1200000, "max_err_over_tol": 40.0}]
    s = report.build(cases, rows, "x: ok\ny: ok\n========= ERROR SUMMARY: 0 errors\n", {"seed": 38})
    assert (s["cases"], s["ok"], s["failed"], s["not_run"]) == (7, 1, 2, 4)
    assert s["memcheck"] == {"runs_ok": 2, "runs_failed": 0, "errors": 0}
    text = report.markdown(s)
    w, m, n, k = specs[0]["shape"]
    assert f"seed {specs[0]['seed']}, world {w}, m {m}, n {n}, k {k}" in text
    assert f"seed {colls[1]['seed']}, world {colls[1]['world']}, dtype {colls[1]['dtype']}, count {colls[1]['count']}" in text
    assert "timed out waiting on flag 3" in text and "bad 1200000" in text
