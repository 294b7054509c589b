"""validation.runtime.memory without a GPU: what a case allocates, the cases --prepare leaves
out for the GPU it will run on (the issue's H100: 3 suite and 2 matrix cases), and the GPU
run's skip on a fake free-memory value."""
from __future__ import annotations

import json
from types import SimpleNamespace

from click.testing import CliRunner

from pksim_cli.main import cli
from validation.runtime import memory
from validation.runtime.collectives import GUARD_BYTES

GiB = 1 << 30
CE_ALL_REDUCE = {"id": "ar", "op": "all-reduce", "algorithm": "direct",
                 "mechanism": "copy-engine", "world": 8, "count": GiB // 2, "dtype": "bf16"}


def test_a_copy_engine_one_shot_all_reduce_gathers_every_input_into_scratch():
    # per rank: 1 GiB in + 1 GiB out (+ guard) + scratch of 8 slots of 1 GiB + flags; x 8 ranks
    per_rank = GiB + GiB + GUARD_BYTES + 8 * GiB + memory.FLAG_BYTES
    assert memory.case_bytes(CE_ALL_REDUCE) == 8 * per_rank
    # the SM kernels need no scratch; a ring keeps world - 1 chunk slots (ceil(n / w) elements)
    sm = dict(CE_ALL_REDUCE, mechanism="tma")
    assert memory.case_bytes(sm) == 8 * (2 * GiB + GUARD_BYTES + memory.FLAG_BYTES)
    ring = dict(sm, algorithm="ring", world=3, count=1000)
    slot = -(-(-(-1000 // 3) * 2) // 16) * 16            # 334 elements x 2 B, rounded to 16
    assert memory.case_bytes(ring) == 3 * (2000 + 2000 + GUARD_BYTES + 2 * slot +
                                           memory.FLAG_BYTES)
    # all-gather: the output is world x the input; a copy-bandwidth case a source and a copy
    ag = {"op": "all-gather", "algorithm": "direct", "mechanism": "tma", "world": 4,
          "count": 10, "dtype": "fp32"}
    assert memory.case_bytes(ag) == 4 * (40 + 160 + GUARD_BYTES + memory.FLAG_BYTES)
    assert memory.case_bytes({"kind": "copy_bw", "bytes": GiB}) == 2 * GiB


def test_too_big_for_an_h100_fits_an_h200():
    why = memory.too_big(CE_ALL_REDUCE, 80e9, "the 80 GB of an H100")
    assert why and "80 GB of an H100" in why and "needs 80.0005GiB" in why
    assert memory.too_big(CE_ALL_REDUCE, 141e9, "the 141 GB of an H200") is None
    kept, left = memory.fitting([CE_ALL_REDUCE, dict(CE_ALL_REDUCE, id="b", mechanism="tma")],
                                80e9, "x")
    assert [c["id"] for c in kept] == ["b"] and left[0]["id"] == "ar"


def test_prepare_leaves_out_what_an_80_GB_gpu_cannot_hold(tmp_path):
    out = tmp_path / "b"
    args = ["validate", "--prepare", "--no-build", "--matrix", "-o", str(out)]
    res = CliRunner().invoke(cli, args + ["--gpu-memory", "80"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "prepare.json").read_text())
    left = sorted(x["id"] for x in meta["left_out"])
    assert left == [f"all-reduce-direct-copy-engine-w8-1GiB-b{b}-bf16" for b in (16, 4, 8)]
    assert sorted(x["id"] for x in meta["matrix_left_out"]) == [
        "ar-direct-ce-w8-bf16-1GiB", "ar-direct-ce-w8-fp32-1GiB"]
    assert all("more than the 80 GB of --gpu-memory" in x["reason"] for x in meta["left_out"])
    ids = {c["id"] for c in json.loads((out / "cases.json").read_text())}
    assert not ids & set(left) and "all-reduce-direct-tma-w8-1GiB-b16-bf16" in ids
    assert not {c["id"] for c in json.loads((out / "matrix" / "cases.json").read_text())} \
        & {x["id"] for x in meta["matrix_left_out"]}
    assert "left out 3 cases" in res.output and "left out 2 matrix cases" in res.output
    # on the suite's own system (an H200) every case fits
    res = CliRunner().invoke(cli, args[:-1] + [str(tmp_path / "h200")])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "h200" / "prepare.json").read_text())
    assert meta["left_out"] == [] and meta["matrix_left_out"] == []
    assert meta["gpu_memory_B"] == 150.76e9         # h200-single: the device's own total


def test_gpu_memory_must_be_a_plausible_size(tmp_path):
    for value in ("0", "-80", "nan", "1e9"):
        res = CliRunner().invoke(cli, ["validate", "--prepare", "--no-build", "-o",
                                       str(tmp_path / "b"), "--gpu-memory", value])
        assert res.exit_code == 2 and "--gpu-memory" in res.output, (value, res.output)
        assert not (tmp_path / "b").exists()


def _fake_torch(free: int, reserved: int = 0, allocated: int = 0):
    cuda = SimpleNamespace(mem_get_info=lambda: (free, 80 * 10 ** 9),
                           memory_reserved=lambda: reserved, memory_allocated=lambda: allocated)
    return SimpleNamespace(cuda=cuda)


def test_the_gpu_run_skips_a_case_the_free_memory_cannot_hold():
    need = memory.case_bytes(CE_ALL_REDUCE)
    # torch's allocator holds 10 GiB freed: it counts as free
    free = memory.free_bytes(_fake_torch(need - 5 * GiB, reserved=12 * GiB, allocated=2 * GiB))
    assert free == need + 5 * GiB and memory.skip_reason(CE_ALL_REDUCE, free) is None
    why = memory.skip_reason(CE_ALL_REDUCE, memory.free_bytes(_fake_torch(70 * 10 ** 9)))
    assert why.startswith("skipped: needs 80") and "free" in why


# ---- fused cases ----------------------------------------------------------------------------
FUSED = {"id": "f", "kind": "fused", "op": "gemm-rs", "overlap": "inter-sm", "world": 8,
         "m": 8192, "n": 8192, "k": 2048, "check": True}


def test_a_fused_case_holds_every_ranks_operands_output_and_partials():
    w, m, n, k, bf = 8, 8192, 8192, 2048, 2
    a, b = w * m * k * bf, w * k * n * bf
    check = memory.CHECK_COPIES * m * n * 4
    table = w * memory.FUSED_TABLE + w * memory.FUSED_GUARD
    # gemm-rs inter-SM: its owners' rows out (m x n in all) and a partial m x n per rank
    assert memory.fused_case_bytes(FUSED) == a + b + m * n * bf + w * m * n * bf + table + check
    # intra-SM: no partials; gemm-ar: every rank holds the whole output
    intra = dict(FUSED, overlap="intra-sm")
    assert memory.fused_case_bytes(intra) == a + b + m * n * bf + table + check
    ar = dict(intra, op="gemm-ar", check=False)
    assert memory.fused_case_bytes(ar) == a + b + w * m * n * bf + table
    # ag-gemm inter-SM: A and its shards, a gathered m x k per rank, an m x n output per rank
    ag = dict(FUSED, op="ag-gemm")
    assert memory.fused_case_bytes(ag) == (2 * m * k * bf + b + w * m * n * bf
                                           + w * m * k * bf + table + check)
    # the "none" baseline: B, the A's, and the reduce-scatter of the m x n partial products
    none = {"id": "n", "kind": "none", "op": "gemm-rs", "world": w, "m": m, "n": n, "k": k,
            "collective": "reduce-scatter direct/register", "check": False}
    rs = {"op": "reduce-scatter", "algorithm": "direct", "mechanism": "register", "world": w,
          "count": m * n // w, "dtype": "bf16"}
    assert memory.fused_case_bytes(none) == b + a + memory.case_bytes(rs)
    # an argument check allocates nothing and is never skipped
    assert memory.fused_case_bytes({"id": "x", "kind": "arg_check", "lib": "l"}) == 0
    assert memory.memory_skip({"id": "x", "kind": "arg_check"}, lambda: 0) is None


def test_prepare_leaves_out_the_fused_cases_the_gpu_cannot_hold(tmp_path):
    """The default suite's largest fused cases (w8 8192x8192x2048, 3.5 GB) do not fit 3 GB;
    those left out are listed with the reason and are not in fused/cases.json."""
    res = CliRunner().invoke(cli, ["validate", "--prepare", "--no-build", "--gpu-memory", "3",
                                   "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "b" / "prepare.json").read_text())
    left = meta["fused"]["left_out"]
    kept = json.loads((tmp_path / "b" / "fused" / "cases.json").read_text())
    assert left and all("more than the 3 GB of --gpu-memory" in x["reason"] for x in left)
    assert not {x["id"] for x in left} & {c["id"] for c in kept}
    assert all(memory.needed_bytes(c) + memory.RESERVED_B <= 3e9 for c in kept)
    assert "gemm-ar-inter-sm-tma-c2-w8-8192x8192x2048" in {x["id"] for x in left}
    assert f"left out {len(left)} fused cases that cannot fit the GPU" in res.output
    assert meta["fused"]["cases"] == len(kept)


class _FakeCuda:
    """torch.cuda as the GPU steps use it, with the free memory the test sets."""

    def __init__(self, free: int):
        self.free = free

    def mem_get_info(self):
        return self.free, 80 * 10 ** 9

    def memory_reserved(self):
        return 0

    memory_allocated = memory_reserved

    def init(self):
        pass

    def synchronize(self):
        pass

    def empty_cache(self):
        pass

    def current_stream(self):
        return None

    Stream = current_stream

    def stream(self, _stream):
        from contextlib import nullcontext
        return nullcontext()


def _small(case: dict) -> dict:
    return dict(case, id=case["id"] + "-small", m=256, n=256, k=256)


def test_the_fused_gpu_step_skips_a_case_the_free_memory_cannot_hold(tmp_path, monkeypatch):
    """validation.run.fused's worker on a fake GPU with 1 GB free: the small case runs, the
    3.5 GB one is a row that says why it was skipped (no out-of-memory failure, the worker
    goes on)."""
    import validation.run.fused as run_fused
    ran = []

    def steps(case, libs, *rest):
        ran.append(case["id"])
        return {"ok": True}
        yield                       # a generator done at once, as a case with no timing
    fake = SimpleNamespace(cuda=_FakeCuda(10 ** 9))
    monkeypatch.setattr(run_fused, "torch_module", lambda: fake)
    monkeypatch.setattr(run_fused, "ensure_eager_loading", lambda: None)
    monkeypatch.setattr(run_fused, "device_info", lambda: {"device": "fake"})
    monkeypatch.setattr(run_fused, "fused_case_steps", steps)
    out = tmp_path / "fused.jsonl"
    big = dict(FUSED, op="gemm-ar")
    assert run_fused.worker([big, _small(big)], out) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert ran == ["f-small"]
    assert rows["f"]["skipped"] and rows["f"]["memory_skip"] and not rows["f"]["ok"]
    assert rows["f"]["error"].startswith("skipped: needs 3.") and "free" in rows["f"]["error"]
    assert not rows["f-small"].get("skipped")


def test_the_collective_gpu_step_skips_a_case_the_free_memory_cannot_hold(tmp_path,
                                                                          monkeypatch):
    import validation.run.collectives as run_coll
    ran = []
    fake = SimpleNamespace(cuda=_FakeCuda(40 * 10 ** 9))
    monkeypatch.setattr(run_coll, "torch_module", lambda: fake)
    monkeypatch.setattr(run_coll, "ensure_eager_loading", lambda: None)
    monkeypatch.setattr(run_coll, "device_info", lambda: {"device": "fake"})
    monkeypatch.setattr(run_coll, "run_case",
                        lambda case, *rest: ran.append(case["id"]) or {"ok": True})
    out = tmp_path / "rows.jsonl"
    small = dict(CE_ALL_REDUCE, id="small", count=1 << 20)
    assert run_coll.worker([CE_ALL_REDUCE, small], out) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert ran == ["small"] and rows["small"]["ok"]
    assert rows["ar"]["memory_skip"] and rows["ar"]["skipped"] and not rows["ar"]["ok"]
    assert rows["ar"]["error"].startswith("skipped: needs 80") and " free " in rows["ar"]["error"]
