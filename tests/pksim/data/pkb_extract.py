"""Writes pkb_comm.json: per ParallelKernelBench problem, the fields of its reference run at world
8 that tests/pksim/test_programs_pkb.py compares the shipped programs with (rank 0's
communication calls in order: op, group, size, dtype, reduce op, root, splits, point-to-point
entries; and the matmul / convolution / attention FLOP). The source is the extraction in the
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
        comm = []
        for call in p["comm_rank0"]:
            entry = {k: call[k] for k in KEEP if k in call}
            if "ops" in call:
                entry["ops"] = [{k: o[k] for k in ("op", "peer", "bytes", "dtype")}
                                for o in call["ops"]]
            comm.append(entry)
        problems.append({"id": p["id"], "name": p["name"], "run_dtype": p["run_dtype"],
                         "flops_rank0": p["flops_rank0"]["total"], "comm_rank0": comm})
    out = {"source": data["meta"]["source"], "world": data["meta"]["method"]["world"],
           "problems": problems}
    (Path(__file__).parent / "pkb_comm.json").write_text(json.dumps(out, indent=0) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
