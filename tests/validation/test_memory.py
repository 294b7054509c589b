"""validation.runtime.memory without a GPU: what a case allocates, the cases --prepare leaves
out for the GPU it will run on (the issue's H100: 3 suite and 2 matrix cases), and the GPU
run's skip on a fake free-memory value."""
from __future__ import annotations

import json
from types import SimpleNamespace

from click.testing import CliRunner

from pksim.cli.main import cli
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
