"""The search's floor from a program alone (``pksim_core.search.step_floor``, used past
LARGE_WORLD ranks before any flow is prepared) is never above the simulated time, and the
pruned search still gives the full search's best (144 ranks: two gb200-nvl72 domains)."""
from __future__ import annotations

import pytest

from hwmodels.catalog import load_system
from hwmodels.errors import InfeasibleError
from pksim_core.collective_model import build, simulate
from pksim_core.search import LARGE_WORLD, search, space, step_floor

SYSTEM = load_system("gb200-nvl72")
WORLD, DOMAINS = 144, 2
# the generated kernels' phases (one domain of gb200-nvl576, copy engines among them) and
# programs of transfers (two domains)
WHERE = [("gb200-nvl576", 1), ("gb200-nvl72", 2)]


@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "broadcast", "reduce-scatter"])
@pytest.mark.parametrize("size", [4096, 64 << 20])
@pytest.mark.parametrize("name, domains", WHERE)
def test_the_floor_is_never_above_the_simulated_time(name, domains, op, size):
    system = load_system(name)
    assert WORLD > LARGE_WORLD
    checked = set()
    for schedule in space(system, op, size, WORLD, domains, comm_sms=(16,),
                          algorithms=("ring", "direct", "tree", "hierarchical")):
        try:
            model = build(system, schedule)
        except InfeasibleError:     # infeasible here (the search drops it with its reason)
            continue
        floor = step_floor(system, schedule)
        assert floor <= simulate(model).time_s, schedule.label()
        if floor > 0:
            checked.add(schedule.mechanism)
    assert len(checked) >= 2 and (domains > 1 or op == "reduce-scatter" or "copy-engine" in checked)


def test_the_pruned_search_is_the_full_search():
    cands = space(SYSTEM, "all-reduce", 1 << 20, WORLD, DOMAINS)
    pruned = search(SYSTEM, cands, top=3)
    full = search(SYSTEM, cands)
    assert [p.schedule for p in pruned.ranked[:3]] == [p.schedule for p in full.ranked[:3]]
    assert [p.time_s for p in pruned.ranked[:3]] == [p.time_s for p in full.ranked[:3]]
    assert pruned.simulated < full.simulated


@pytest.mark.parametrize("op, queued", [("all-gather", WORLD), ("reduce-scatter", WORLD - 1),
                                        ("all-reduce", WORLD - 1)])
def test_a_ranks_queued_copies_floor_its_phase(op, queued):
    # a direct collective by copy engines: each rank queues a copy per peer (all-gather: its
    # own slot too) on one stream, and the last starts after that many stream chains; the
    # floor says so without building the moves (Step.queued), and stays under the DES time
    system = load_system("gb200-nvl576")
    schedule = space(system, op, 64 << 20, WORLD, algorithms=("direct",),
                     mechanisms=("copy-engine",))[0]
    chain = system.gpu.sync.stream_chain_s
    phases = 2 if op != "all-gather" else 1        # then a local sum by an SM kernel
    floor = step_floor(system, schedule)
    assert floor == pytest.approx((queued + phases - 1) * chain, rel=1e-12)
    assert floor <= simulate(build(system, schedule)).time_s
