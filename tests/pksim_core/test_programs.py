"""Program files: strict reading (one-line errors naming the file, the op and the key), the
checks of whole programs (tensors, shapes, splits, send/recv pairs, dependency cycles), what
they derive, loops, and closed-form cases of the timeline and the roofline."""
from __future__ import annotations

import math

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import ConfigError
from pksim_core.programs import list_programs, load_program, parse_program, predict_program, roofline
from pksim_core.programs.timeline import ProgramTask, host_read_s, run_tasks

PATH = "t.toml"


def program(ops: list[dict], tensors: dict | None = None, **top) -> dict:
    raw = {"name": "t", "world": 8, "tensors": tensors or {
        "a": {"shape": [256, 64]}, "b": {"shape": [64, 512]}, "c": {"shape": [256, 512]},
        "s": {"shape": [32, 512]}, "g": {"shape": [2048, 512]}}, "op": ops}
    raw.update(top)
    return raw


GEMM = {"name": "mm", "kind": "gemm", "a": "a", "b": "b", "out": "c"}
RS = {"name": "rs", "kind": "reduce-scatter", "input": "c", "output": "s"}


def error(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_program(raw, PATH)
    message = str(info.value)
    assert "\n" not in message and message.startswith(PATH)
    return message


def test_every_shipped_program_loads():
    names = list_programs()
    assert names
    for name in names:
        p = load_program(name)
        assert p.covers and p.world == 8 and p.ops


def test_gemm_and_collective_derive_flops_bytes_and_sizes():
    p = parse_program(program([GEMM, RS]), PATH)
    mm, rs = p.ops
    assert mm.flops == 2 * 256 * 512 * 64                  # 2 m n k
    assert mm.nbytes == 2 * (256 * 64 + 64 * 512 + 256 * 512)
    assert mm.gemm_shapes == ((256, 512, 64),)
    assert rs.comm_bytes == 256 * 512 * 2                 # nccl-tests: the whole input
    assert rs.param("reduce") == "sum" and rs.deps == ("mm",)


@pytest.mark.parametrize("raw, words", [
    (program([GEMM], colour="red"), ["unknown key 'colour'"]),
    (program([{**GEMM, "alpha": 2}]), ["op 'mm'", "unknown key 'alpha'"]),
    (program([{**GEMM, "kind": "gemv"}]), ["op 'mm'", "kind 'gemv'"]),
    (program([{**GEMM, "transpose_a": 1}]), ["op 'mm'", "transpose_a must be true or false"]),
    (program([GEMM], world="8"), ["world must be an integer"]),
    (program([GEMM], tensors={"a": {"shape": [2, 0]}}), ["tensors.a", "dimensions >= 1"]),
    (program([GEMM], tensors={"a": {"shape": [2], "dtype": "bf17"}}), ["tensors.a", "bf17"]),
    (program([GEMM], tensors={"a": {"shape": [2], "size": 3}}), ["tensors.a", "unknown key 'size'"]),
    (program([{**GEMM, "b": "w"}]), ["op 'mm'", "unknown tensor 'w'"]),
    (program([{**GEMM, "b": "c"}]), ["op 'mm'", "shape mismatch", "inner dimensions 64 and 256"]),
    (program([GEMM, {**RS, "output": "c"}]), ["op 'rs'", "shape mismatch", "ratio 8:1"]),
    (program([GEMM, {**RS, "group": "tp"}]), ["op 'rs'", "unknown group 'tp'"]),
    (program([GEMM, {**RS, "reduce": "prod"}]), ["op 'rs'", "reduce 'prod'"]),
    (program([{"name": "bc", "kind": "broadcast", "input": "a", "root": 8}]),
     ["op 'bc'", "root 8 is not a member"]),
    (program([{"name": "x", "kind": "all-to-all-v", "input": "g", "output": "g",
               "in_splits": [256] * 8, "out_splits": [256] * 7 + [255]}]),
     ["op 'x'", "out_splits", "sum to 2047, not the 2048 rows"]),
    (program([{"name": "x", "kind": "all-gather-v", "input": "s", "output": "g",
               "splits": [32] * 7}]), ["op 'x'", "splits has 7 entries for a group of 8"]),
    (program([{"name": "x", "kind": "sendrecv", "p2p": [{"send": "a", "to": 1},
                                                      {"recv": "a", "from": 1}]}]),
     ["op 'x'", "send to +1", "no matching recv from -1"]),
    (program([{**GEMM, "after": ["rs"]}, RS]), ["op 'rs'", "dependency cycle rs -> mm -> rs"]),
    (program([{**GEMM, "after": ["nope"]}]), ["op 'mm'", "after: unknown op 'nope'"]),
    (program([GEMM, {**GEMM}]), ["op 'mm'", "two ops have this name"]),
    (program([GEMM, RS], groups={"tp": {"grid": [3, 3], "along": "row"}}),
     ["groups.tp", "rows x columns = world (8)"]),
    (program([GEMM, RS], loop=[{"ops": ["rs", "mm"], "times": 2}]),
     ["loop #1", "consecutive ops in file order"]),
    (program([{**RS, "root": "iteration"}]), ["op 'rs'", "unknown key 'root'"]),
])
def test_bad_programs_are_one_line_errors(raw, words):
    message = error(raw)
    for word in words:
        assert word in message, message


def test_grid_groups_and_group_sizes():
    raw = program([GEMM, {**RS, "group": "col", "output": "g2"}],
                  tensors={"a": {"shape": [256, 64]}, "b": {"shape": [64, 512]},
                           "c": {"shape": [256, 512]}, "g2": {"shape": [64, 512]}},
                  groups={"col": {"grid": [4, 2], "along": "column"},
                          "row": {"grid": [4, 2], "along": "row"}})
    p = parse_program(raw, PATH)
    assert p.groups["col"].parts == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert p.groups["row"].parts == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert p.ops[1].comm_bytes == 256 * 512 * 2 and p.groups["col"].size == 4


def test_loops_unroll_with_iteration_roots_and_inferred_dependencies():
    raw = program([{"name": "bc", "kind": "broadcast", "input": "a", "root": "iteration"},
                   {"name": "mm", "kind": "gemm", "a": "a", "b": "b", "out": "c"}],
                  loop=[{"ops": ["bc", "mm"], "times": 3}])
    p = parse_program(raw, PATH)
    assert [op.name for op in p.ops] == ["bc.0", "mm.0", "bc.1", "mm.1", "bc.2", "mm.2"]
    assert [op.param("root") for op in p.ops if op.kind == "broadcast"] == [0, 1, 2]
    # bc.1 writes a, which mm.0 read (write after read); mm.1 reads it (read after write)
    # and writes c, which mm.0 wrote (write after write)
    assert p.op("bc.1").deps == ("bc.0", "mm.0")
    assert p.op("mm.1").deps == ("mm.0", "bc.1")


def test_a_later_after_reorders_issue():
    raw = program([{"name": "z", "kind": "elementwise", "reads": [], "writes": ["s"],
                    "after": ["mm"]}, GEMM])
    assert [op.name for op in parse_program(raw, PATH).ops] == ["mm", "z"]


def test_one_copy_costs_host_issue_launch_and_bytes():
    system = load_system("dgx-h100")
    raw = program([{"name": "cp", "kind": "copy", "reads": ["c"], "writes": ["s"]}])
    p = predict_program(system, parse_program(raw, PATH))
    sync = system.gpu.sync
    nbytes = 2 * (256 * 512 + 32 * 512)
    # the host issues the launch (launch_api), then the kernel: launch + bytes at HBM's rate
    want = sync.launch_api_s + sync.stream_launch_s + nbytes / system.gpu.hbm.effective_Bps
    assert p.baseline_s == pytest.approx(want, rel=1e-12)
    assert p.best_s == pytest.approx(want, rel=1e-12)
    assert p.roofline_s == pytest.approx(nbytes / system.gpu.hbm.bandwidth_Bps, rel=1e-12)


def test_lanes_overlap_and_host_reads_wait_for_the_gpu():
    system = load_system("dgx-h100")
    api = system.gpu.sync.launch_api_s
    tasks = [ProgramTask("a", ("a",), ("compute",), 10e-6),
             ProgramTask("b", ("b",), ("comm",), 10e-6, "comm", sms=0),
             ProgramTask("h", ("h",), ("compute", "comm"), 0.0, "host", launches=0, host_reads=1,
                  deps=(0, 1)),
             ProgramTask("c", ("c",), ("compute",), 1e-6, deps=(2,))]
    spans = run_tasks(system, tasks)
    assert spans[0].start_s == pytest.approx(api) and spans[1].start_s == pytest.approx(2 * api)
    # the host read starts once both lanes are done, the next launch is issued after it
    assert spans[2].start_s == pytest.approx(2 * api + 10e-6)
    assert spans[3].start_s == pytest.approx(spans[2].end_s + api)
    assert spans[2].end_s - spans[2].start_s == pytest.approx(host_read_s(system))


def test_communication_sms_slow_an_overlapped_compute_task():
    system = load_system("dgx-h100")
    sms = system.gpu.sm.count
    tasks = [ProgramTask("k", ("k",), ("comm",), 10e-6, "comm", sms=sms // 4),
             ProgramTask("g", ("g",), ("compute",), 10e-6)]
    spans = run_tasks(system, tasks)
    api = system.gpu.sync.launch_api_s
    # g starts at 2 api; until k ends (api + 10 us) it runs at 1 - 33/132 = 0.75
    rate = 1 - (sms // 4) / sms
    done_slow = (api + 10e-6 - 2 * api) * rate
    assert spans[1].end_s == pytest.approx(api + 10e-6 + (10e-6 - done_slow), rel=1e-9)


@pytest.mark.parametrize("system, factor", [("dgx-a100", 2.0), ("dgx-h100", 1.0)])
def test_all_reduce_roofline_with_and_without_in_switch_reduction(system, factor):
    s = load_system(system)
    raw = program([{"name": "ar", "kind": "all-reduce", "input": "c"}])
    r = roofline(s, parse_program(raw, PATH))
    nbytes = 256 * 512 * 2
    # ring: 2 (n - 1) / n of the buffer each way per GPU; in-switch: (n - 1) / n
    assert r.terms["nvlink"] == pytest.approx(factor * 7 / 8 * nbytes / s.gpu.nvlink.bandwidth_Bps)
    assert r.terms["latency"] == pytest.approx(s.gpu.nvlink.latency_s)


def test_p2p_roofline_takes_the_busiest_rank():
    s = load_system("dgx-h100")
    raw = program([{"name": "halo", "kind": "sendrecv", "wrap": False,
                    "p2p": [{"send": "a", "to": -1}, {"recv": "b", "from": -1},
                            {"send": "b", "to": 1}, {"recv": "a", "from": 1}]}],
                  tensors={"a": {"shape": [64]}, "b": {"shape": [64]}})
    p = parse_program(raw, PATH)
    assert p.ops[0].comm_bytes == 128                      # rank 0 has no left neighbour
    r = roofline(s, p)
    assert r.terms["nvlink"] == pytest.approx(256 / s.gpu.nvlink.bandwidth_Bps)
    assert math.isfinite(predict_program(s, p).best_s)


def test_split_kernels_run_at_the_programs_split_sizes():
    # pk runs a -v op or a send/recv batch as the kernel codegen emits, at the program's splits
    # (pksim_core.programs.costs.kernel_call), in the kernel's 2- or 4-byte elements
    from pksim_core.programs.costs import kernel_call, split_matrix
    from pksim_core.workloads import varsize_ops
    g = {"shape": [32, 512]}                       # a row: 512 bf16 elements
    # all-to-all-v, world 4: rank 0 sends rows (1, 2, 3, 4) and receives (4, 4, 4, 4); it sends
    # 10 rows, receives 16: the column it receives is made circulant, S[p][q] = out[(p - q) % 4]
    raw = program([{"name": "x", "kind": "all-to-all-v", "input": "g", "output": "h",
                    "in_splits": [1, 2, 3, 4], "out_splits": [4, 4, 4, 4]}], world=4,
                  tensors={"g": {"shape": [10, 512]}, "h": {"shape": [16, 512]}})
    p = parse_program(raw, PATH)
    s = split_matrix(p, p.ops[0])
    assert [row[0] for row in s] == [4 * 512] * 4 and s == [[4 * 512] * 4] * 4
    raw["op"][0].update(in_splits=[1, 2, 3, 10], out_splits=[4, 4, 4, 4])
    raw["tensors"]["g"] = {"shape": [16, 512]}
    p = parse_program(raw, PATH)
    s = split_matrix(p, p.ops[0])
    # now the row it sends is larger: S[p][q] = in[(q - p) % 4] x 512, row 0 exactly in_splits
    assert s[0] == [512, 1024, 1536, 5120] and s[1] == [5120, 512, 1024, 1536]
    call = kernel_call(p, p.ops[0])
    assert (call.op, call.world, call.dtype) == ("all-to-all-v", 4, "bf16")
    assert call.nbytes == 16 * 512 * 2                  # every rank's buffer: 16 rows
    assert varsize_ops.matrix("all-to-all-v", call.extra, 4, 0) == s
    # all-gather-v of fp32 rows (4-byte elements): the shares in elements
    raw = program([{"name": "x", "kind": "all-gather-v", "input": "s", "output": "g",
                    "splits": [1, 0, 3, 4]}], world=4,
                  tensors={"s": {"shape": [1, 8], "dtype": "fp32"},
                           "g": {"shape": [8, 8], "dtype": "fp32"}})
    p = parse_program(raw, PATH)
    call = kernel_call(p, p.ops[0])
    assert (call.op, call.dtype, dict(call.extra)["splits"]) == ("all-gather-v", "fp32", "8,0,24,32")
    # a halo without wrap-around: the ends send one way only
    raw = program([{"name": "halo", "kind": "sendrecv", "wrap": False,
                    "p2p": [{"send": "a", "to": -1}, {"recv": "b", "from": -1},
                            {"send": "b", "to": 1}, {"recv": "a", "from": 1}]}], world=4,
                  tensors={"a": {"shape": [64]}, "b": {"shape": [32]}})
    p = parse_program(raw, PATH)
    assert split_matrix(p, p.ops[0]) == [[0, 32, 0, 0], [64, 0, 32, 0], [0, 64, 0, 32],
                                         [0, 0, 64, 0]]
    assert kernel_call(p, p.ops[0]).op == "send-recv"
    assert predict_program(load_system("dgx-h100"), p).best_s > 0
