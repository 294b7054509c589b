"""Experiment: each phase of a generated collective timed on its own (virtual ranks, one
launch per phase, `device_sync = 0`, after a 256 MiB L2-flushing write, CUDA events,
median), beside the whole device-synchronised call. Tells whether a phase of the kernel
runs at the rate its routine has in `block_moves`.

    python -m validation.experiments.phases CASES.json OUT.jsonl     # on the GPU machine

CASES.json: cases of `pksim validate` (lib relative to the file, count, world,
blocks_per_rank, dtype).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(cases_path: str, out_path: str) -> None:
    import torch
    from validation import reference
    from validation.runtime import FLUSH_BYTES, Collective, Library, VirtualRanks

    root = Path(cases_path).parent
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    with open(out_path, "w") as out:
        for case in json.load(open(cases_path)):
            lib = Library(str(root / case["lib"]))
            ranks = VirtualRanks(int(case["world"]))
            row = {"id": case["id"]}
            for sync in (True, False):
                coll = Collective(lib, ranks, int(case["count"]), case["dtype"],
                                  blocks_per_rank=int(case["blocks_per_rank"]), device_sync=sync)
                reference.fill_inputs(coll.inputs(), 1)
                steps = [None] if sync else list(range(coll.reqs.phases))
                for p in steps:
                    times = []
                    for i in range(12):
                        flush.zero_()
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        coll.launch() if p is None else coll.launch_phase(p)
                        e.record()
                        coll.wait(120)
                        if i >= 2:
                            times.append(s.elapsed_time(e) / 1e3)
                    row["whole_s" if p is None else f"phase{p}_s"] = statistics.median(times)
                coll.free()
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
