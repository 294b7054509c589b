"""Writes pkb_comm.json: per ParallelKernelBench problem, the fields of its reference run at world
8 that tests/pksim/test_programs_pkb.py compares the shipped programs with (rank 0's
communication calls in order: op, group, size, dtype, reduce op, root, splits, point-to-point
entries; and the matmul / convolution / attention FLOP), and the same of every other rank whose
calls or FLOP differ from rank 0's (a program may describe the rank that bounds the step). The
source is the extraction in the
project's shared references (pkb-problems.json, ParallelKernelBench commit 3cc0f9b):

    python tests/pksim/data/pkb_extract.py /work/shared/reference/pkb-problems.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

KEEP = ("op", "group_size", "group_ranks", "reduce_op", "dtype", "size", "root", "v",
        "send_split_bytes", "recv_split_bytes", "pickled_bytes")


def main(source: str) -> None:
    data = json.loads(Path(source).read_text())
    problems = []
    for p in data["problems"]:
        entry = {"id": p["id"], "name": p["name"], "run_dtype": p["run_dtype"],
                 "flops_rank0": p["flops_rank0"]["total"], "comm_rank0": _calls(p["comm_rank0"])}
        if not p["flops_uniform_across_ranks"]:
            entry["flops_by_rank"] = p["flops_by_rank"]
        if p.get("comm_by_rank"):
            entry["comm_by_rank"] = {r: _calls(c) for r, c in p["comm_by_rank"].items()}
        problems.append(entry)
    out = {"source": data["meta"]["source"], "world": data["meta"]["method"]["world"],
           "problems": problems}
    (Path(__file__).parent / "pkb_comm.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")


def _calls(calls: list[dict]) -> list[dict]:
    out = []
    for call in calls:
        entry = {k: call[k] for k in KEEP if k in call}
        if "ops" in call:
            entry["ops"] = [{k: o[k] for k in ("op", "peer", "bytes", "dtype")}
                            for o in call["ops"]]
        out.append(entry)
    return out


if __name__ == "__main__":
    main(sys.argv[1])
