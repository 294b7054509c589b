"""The search's floor from a program alone (``pksim.search.step_floor``, used past
LARGE_WORLD ranks before any flow is prepared) is never above the simulated time, and the
pruned search still gives the full search's best (144 ranks: two gb200-nvl72 domains)."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from pksim.collective import build, simulate
from pksim.search import LARGE_WORLD, search, space, step_floor

SYSTEM = load_system("gb200-nvl72")
WORLD, DOMAINS = 144, 2


@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "broadcast"])
@pytest.mark.parametrize("size", [4096, 64 << 20])
def test_the_floor_is_never_above_the_simulated_time(op, size):
    assert WORLD > LARGE_WORLD
    checked = 0
    for schedule in space(SYSTEM, op, size, WORLD, DOMAINS, comm_sms=(16,)):
        try:
            model = build(SYSTEM, schedule)
        except Exception:           # infeasible here (the search drops it with its reason)
            continue
        floor = step_floor(SYSTEM, schedule)
        assert floor <= simulate(model).time_s, schedule.label()
        checked += floor > 0
    assert checked >= 2


def test_the_pruned_search_is_the_full_search():
    cands = space(SYSTEM, "all-reduce", 1 << 20, WORLD, DOMAINS)
    pruned = search(SYSTEM, cands, top=3)
    full = search(SYSTEM, cands)
    assert [p.schedule for p in pruned.ranked[:3]] == [p.schedule for p in full.ranked[:3]]
    assert [p.time_s for p in pruned.ranked[:3]] == [p.time_s for p in full.ranked[:3]]
    assert pruned.simulated < full.simulated
