"""The golden predictions of the multi-domain worlds: 64 x gb200-nvl72 (4,608 ranks) and
16 x gb200-nvl576 (9,216 ranks), four collectives at 4 KiB and 1 GiB, no schedule forced: the
searched best (``pksim predict``), its time, bound and busy time. Recorded before the
multi-domain engine was reworked for speed (issue 41, with the engine of commit ff8aea2); a
speed-up must leave every value equal to 1e-9 relative (tests/golden/test_large_worlds.py).
NCCL's pick beside it (``--json``'s ``vs_nccl``) is not here: at these worlds it takes minutes
and gigabytes (docs/PERFORMANCE.md, Large worlds).

    python -m tests.golden.large_worlds           # rewrite tests/golden/large_worlds.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pksim

GOLDEN = Path(__file__).with_name("large_worlds.json")
WORLDS = (("gb200-nvl72", 64), ("gb200-nvl576", 16))       # (system, domains)
OPS = ("all-reduce", "all-gather", "reduce-scatter", "broadcast")
SIZES = ("4KiB", "1GiB")
# all-gather and reduce-scatter cut their buffer into one share per rank, of whole elements
# (docs/decisions/D68.md): 4 KiB is less than one per rank at these worlds and 1 GiB does not
# divide by 9, so they take 36 KiB and 9 GiB, which divide over 4,608 and 9,216 ranks. Their
# values were recorded on the reworked engine (the others' before it).
SPLIT_SIZES = ("36KiB", "9GiB")
KEPT = ("label", "time_s", "bound_s", "bound_resource", "alpha_beta_s", "breakdown", "nbytes")


def case_id(system: str, domains: int, op: str, size: str) -> str:
    return f"{system}x{domains}/{op}/{size}"


def cases() -> list[tuple[str, int, str, str]]:
    return [(s, d, op, size) for s, d in WORLDS for op in OPS
            for size in (SPLIT_SIZES if op in ("all-gather", "reduce-scatter") else SIZES)]


def kept(prediction: dict) -> dict:
    """The recorded fields of a prediction's ``to_dict()``."""
    return {k: prediction[k] for k in KEPT} | {"world": prediction["schedule"]["world"]}


def predict_case(system: str, domains: int, op: str, size: str) -> dict:
    """The kept fields of ``pksim predict`` for one case."""
    found = pksim.predict(system=system, domains=domains, op=op, bytes=size)
    return kept(found.prediction.to_dict())


def main() -> int:
    data = {}
    for case in cases():
        data[case_id(*case)] = predict_case(*case)
        print(case_id(*case), data[case_id(*case)]["time_s"], flush=True)
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
