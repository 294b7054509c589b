"""Every shipped program against the ParallelKernelBench problems it covers: the described
rank's (rank 0 unless the program names another) communication (op, group, size, element type, reduction, root, splits, point-to-point peers and
bytes, in order) matches the reference run exactly, and the matmul / convolution / attention
FLOP within 1 % (tests/pksim/data/pkb_comm.json, extracted by pkb_extract.py beside it).

The programs were written by hand from the problem statements; this test reads the reference
run only to judge them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pksim_core.programs import list_programs, load_program
from pksim_core.programs.check import peer_position
from pksim_core.programs.model import DTYPE_BYTES, Op, ProgramSpec

DATA = json.loads((Path(__file__).parent / "data" / "pkb_comm.json").read_text())
PROBLEMS = {p["id"]: p for p in DATA["problems"]}
TORCH_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
               "int64": "i64", "int32": "i32", "uint8": "u8", "bool": "bool",
               "complex64": "c64", "uint8(pickle)": "u8", "int8": "i8"}
# torch's calls and the kinds of a program that stand for them
TORCH_OP = {"all_reduce": "all-reduce", "reduce_scatter_tensor": "reduce-scatter",
            "reduce_scatter": "reduce-scatter", "broadcast": "broadcast", "reduce": "reduce",
            "gather": "gather", "scatter": "scatter", "all_gather_object": "all-gather-object",
            "batch_isend_irecv": "sendrecv"}
MIN_COVERED = 70


def _kind(call: dict) -> str:
    op = call["op"]
    if op in ("all_gather", "all_gather_into_tensor"):
        splits = call.get("recv_split_bytes")
        return "all-gather-v" if splits and len(set(splits)) > 1 else "all-gather"
    if op in ("all_to_all_single", "all_to_all"):
        return "all-to-all-v" if call.get("v") else "all-to-all"
    return TORCH_OP[op]


def _row_bytes(program: ProgramSpec, tensor: str, op: Op) -> int:
    return program.tensors[tensor].row_elements * DTYPE_BYTES[op.dtype]


def _expected(program: ProgramSpec, op: Op) -> dict:
    """What the reference run records for ``op`` on rank 0, in the record's own terms."""
    group = program.groups[op.group]
    part = group.of(program.rank)
    out: dict = {"kind": op.kind, "group_size": group.size, "size": op.comm_bytes,
                 "group_ranks": list(part) if group.size < program.world else None}
    if op.kind != "all-gather-object":
        out["dtype"] = op.dtype
    if op.param("reduce") is not None:
        out["reduce_op"] = op.param("reduce")
    if op.kind in ("broadcast", "reduce", "gather", "scatter"):
        out["root"] = part[op.param("root", 0)]
    if op.kind == "all-to-all-v":
        out["send_split_bytes"] = [s * _row_bytes(program, op.reads[0], op)
                                   for s in op.param("in_splits")]
        out["recv_split_bytes"] = [s * _row_bytes(program, op.writes[0], op)
                                   for s in op.param("out_splits")]
    if op.kind == "all-gather-v":
        out["recv_split_bytes"] = [s * _row_bytes(program, op.writes[0], op)
                                   for s in op.param("splits")]
    if op.kind == "all-gather-object":
        out["size"] = op.comm_bytes
    if op.kind == "sendrecv":
        me, n, wrap = part.index(program.rank), len(part), op.param("wrap", True)
        entries = []
        for e in op.p2p:
            q = peer_position(me, e.offset, n, wrap)
            if q is not None:
                t = program.tensors[e.tensor]
                entries.append({"op": "isend" if e.send else "irecv", "peer": part[q],
                                "bytes": t.nbytes, "dtype": t.dtype})
        out["ops"] = entries
        if not entries:          # nothing for this rank to send or receive: no call
            return None
    return out


def _recorded(call: dict, world: int) -> dict:
    kind = _kind(call)
    out: dict = {"kind": kind, "group_size": call["group_size"], "size": call["size"],
                 "group_ranks": call.get("group_ranks")}
    if kind != "all-gather-object":
        out["dtype"] = TORCH_DTYPE[call["dtype"]]
    if "reduce_op" in call:
        out["reduce_op"] = call["reduce_op"]
    if "root" in call:
        out["root"] = call["root"]
    if kind == "all-to-all-v":
        out["send_split_bytes"] = call["send_split_bytes"]
        out["recv_split_bytes"] = call["recv_split_bytes"]
    if kind == "all-gather-v":
        out["recv_split_bytes"] = call["recv_split_bytes"]
    if kind == "sendrecv":
        out["ops"] = [{**o, "dtype": TORCH_DTYPE[o["dtype"]]} for o in call["ops"]]
    if out["group_ranks"] == list(range(world)):
        out["group_ranks"] = None
    return out


def _covered() -> list[tuple[str, int]]:
    return [(name, pid) for name in list_programs() for pid in load_program(name).covers]


@pytest.mark.parametrize("name, problem", _covered())
def test_program_matches_the_reference_run(name, problem):
    program = load_program(name)
    record = PROBLEMS[problem]
    assert program.world == DATA["world"]
    rank = program.rank          # the rank the program describes (0 unless it says)
    calls = record.get("comm_by_rank", {}).get(str(rank), record["comm_rank0"])
    mine = [e for e in (_expected(program, op) for op in program.comm_ops) if e is not None]
    theirs = [_recorded(call, program.world) for call in calls]
    assert len(mine) == len(theirs), (len(mine), len(theirs))
    for i, (a, b) in enumerate(zip(mine, theirs)):
        assert a == b, f"call {i}"
    flops = sum(op.flops for op in program.ops)
    want = record.get("flops_by_rank", [record["flops_rank0"]] * program.world)[rank]
    assert flops == pytest.approx(want, rel=0.01, abs=0.5)


def test_coverage():
    covered = {pid for _, pid in _covered()}
    assert covered <= set(PROBLEMS)
    assert len(covered) >= MIN_COVERED, f"{len(covered)} of {len(PROBLEMS)} problems covered"


def test_every_problem_is_covered_once():
    seen: dict[int, str] = {}
    for name, pid in _covered():
        assert pid not in seen, f"problem {pid} in {seen.get(pid)} and {name}"
        seen[pid] = name


def test_names_are_file_stems():
    for name in list_programs():
        assert load_program(name).name == name
