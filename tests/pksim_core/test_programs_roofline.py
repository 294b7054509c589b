"""Property: no simulated time is ever below the roofline. For every shipped program on the
systems the docs report (dgx-h100, gb200-nvl72): the baseline's and pksim's times are at least
the program's roofline, pksim's best is never slower than the baseline, and every task that
runs a single op takes at least that op's own roofline."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim_core.programs import list_programs, load_program, predict_program

SYSTEMS = ("dgx-h100", "gb200-nvl72")


@pytest.fixture(scope="module", params=SYSTEMS)
def system(request):
    return load_system(request.param)


@pytest.mark.parametrize("name", list_programs())
def test_no_time_below_the_roofline(system, name):
    program = load_program(name)
    p = predict_program(system, program)
    slack = 1 + 1e-9
    assert p.roofline_s > 0
    assert p.baseline_s * slack >= p.roofline_s
    assert p.best_s * slack >= p.roofline_s
    assert p.best_s <= p.baseline_s * slack
    roofs = {row.name: row.roofline_s for row in p.ops}
    for run in (p.baseline, p.best):
        for task in run.tasks:
            if len(task["ops"]) == 1 and task["kind"] != "host":
                took = task["end_s"] - task["start_s"]
                assert took * slack >= roofs[task["ops"][0]], (task["name"], took)
