"""The generated collective sources against main's before pksim_core.algorithms (commit 2db946f):
every (op, algorithm, mechanism), plain, with a reduce op and an epilogue, emulated, hierarchical,
on sm_90a and sm_100a, renders to the same text but for its #include lines and the algorithm's
type name (normalised_sources.json: the SHA-256 of each normalised source). A change that
means to alter the generated code, or a new kernel, regenerates the file (``python -m
tests.codegen.test_normalised_sources``) and says why in its commit."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from codegen.plan import make_plan, mechanisms
from codegen.render import render
from hwmodels.catalog import load_system
from pksim_core import algorithms
from pksim_core.schedule import Schedule

HASHES = Path(__file__).with_name("normalised_sources.json")
CASES = json.loads(HASHES.read_text())


def normalised(text: str) -> str:
    """``text`` without its #include lines and with the algorithm's type name blanked."""
    text = re.sub(r"^#include .*\n", "", text, flags=re.M)
    return re.sub(r"using algorithm = [\w:]+;", "using algorithm = ALGORITHM;", text)


def digest(case: dict) -> str:
    text = render(make_plan(load_system(case["system"]), Schedule.from_dict(case["schedule"])))
    return hashlib.sha256(normalised(text).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_source_is_main_s_but_for_includes_and_type_names(name):
    assert digest(CASES[name]) == CASES[name]["sha256"], name


def test_every_kernel_and_mechanism_is_compared():
    compared = {tuple(name.split("/")[:3]) for name in CASES}
    for r in algorithms.kernels():
        for mech in mechanisms(r.algorithm, r.op):
            assert (r.op, r.algorithm, mech) in compared


def test_normalised_keeps_everything_else():
    a = '#include "collectives/p2p.cuh"\nusing algorithm = pkc::send_recv_direct;\nint x;\n'
    b = '#include "collectives/varsize.cuh"\nusing algorithm = pkc::all_to_all_v_direct;\nint x;\n'
    assert normalised(a) == normalised(b)
    assert normalised(a) != normalised(a.replace("int x;", "int y;"))


if __name__ == "__main__":     # rehash every case; a kernel row's new mechanism gets one case
    for r in algorithms.kernels():
        for mech in mechanisms(r.algorithm, r.op):
            name = f"{r.op}/{r.algorithm}/{mech}/dgx-h100-w8"
            s = Schedule(op=r.op, shape=(("bytes", 1 << 20),), world=8, algorithm=r.algorithm,
                         mechanism=mech, comm_sms=16)
            CASES.setdefault(name, {"system": "dgx-h100", "schedule": s.to_dict()})
    for case in CASES.values():
        case["sha256"] = digest(case)
    HASHES.write_text(json.dumps(CASES, indent=1, sort_keys=True))
    sys.exit(0)
