"""pksim's best plan of a program (pksim_core.programs.best, docs/decisions/D61.md): never slower
than the baseline or than every op alone, the best of every combination where the rewrites
form one set, trials run in part equal to the same plan run whole, and the timeline's stop
at a settled task in closed form."""
from __future__ import annotations

import itertools

import pytest

from hwmodels.catalog import load_system
from pksim_core.programs import load_program, predict_program
from pksim_core.programs.best import _Best, best_plan
from pksim_core.programs.plan import alone_plan, rewrites
from pksim_core.programs.timeline import ProgramTask, run_tasks, run_until

# programs whose rewrites conflict (a fold against a run of calls, folds sharing a copy),
# fold prologues and epilogues, fuse a GEMM with its collective, or wait on host reads
HANDFUL = ["fused-moe-fwd-lora", "ddp", "ring-attention-backward-dp", "layernorm-backward",
           "blocked-fp8-quantize", "hyena-forward-cp", "gemm-reducescatter", "sinkhorn-knopp",
           "ulysses-attention-e2e", "distributed-sample-sort"]


@pytest.mark.parametrize("system_name", ["dgx-h100", "gb200-nvl72"])
def test_best_is_never_slower_than_the_baseline_or_every_op_alone(system_name):
    system = load_system(system_name)
    for name in HANDFUL:
        program = load_program(name)
        p = predict_program(system, program)
        alone = max(s.end_s for s in run_tasks(system, list(alone_plan(system, program).tasks)))
        assert p.best_s <= p.baseline_s and p.best_s <= alone, name


@pytest.mark.parametrize("name", ["layernorm-backward", "ring-attention-backward-dp",
                                  "rope-allgather"])
def test_one_set_of_rewrites_gives_the_best_of_its_combinations(name):
    """These programs' rewrites all share ops (one set): pksim's best is the fastest of every
    combination of them, each run whole (none included: every op alone)."""
    system = load_system("gb200-nvl72")
    program = load_program(name)
    best = _Best(system, program)
    every = [r for r in rewrites(system, program) if r(best.now.groups)]
    times = [best.now.score[0]]
    for k in range(1, len(every) + 1):
        for pick in itertools.combinations(every, k):
            made = best.made(list(pick))
            if made is not None and made[0].acyclic():
                times.append(best.run(made[0]).score[0])
    plan, spans = best_plan(system, program)
    assert len(times) > 2
    assert max(s.end_s for s in spans) == pytest.approx(min(times), rel=1e-12)


@pytest.mark.parametrize("system_name", ["dgx-h100", "gb200-nvl72"])
def test_a_trial_run_in_part_is_the_plan_run_whole(system_name, monkeypatch):
    """Every trial pksim's best makes (a timeline from the kept plan's last settled task to the
    first settled task past the changes, the rest shifted) scores as the same plan run whole
    (to rounding)."""
    system = load_system(system_name)
    real = _Best.trial
    checked = []

    def trial(self, picks):
        got = real(self, picks)
        made = self.made(picks)
        if made is None or not made[0].acyclic():
            assert got is None
            return got
        whole = self.run(made[0]).score
        assert got == pytest.approx(whole, rel=1e-12), self.program.name
        checked.append(self.program.name)
        return got

    monkeypatch.setattr(_Best, "trial", trial)
    for name in HANDFUL:
        best_plan(system, load_program(name))
    assert len(checked) > 40 and set(checked) >= {"ddp", "fused-moe-fwd-lora"}


def test_run_until_stops_at_the_first_settled_task_it_accepts():
    """Three kernels of 1 us on one lane: the host issues one every launch_api (about 4.4 us
    on dgx-h100), so each has ended before the next is issued and every task is settled.
    Stopping at the first settled task from 2 on gives the first two spans and task 2's
    issue time: host_s + 3 launch_api."""
    system = load_system("dgx-h100")
    api = system.gpu.sync.launch_api_s
    assert api > 1e-6
    tasks = [ProgramTask(f"k{i}", (f"k{i}",), ("compute",), 1e-6) for i in range(3)]
    spans, back = run_until(system, tasks, host_s=5e-6, settled=lambda j: j >= 2)
    assert [s.task for s in spans] == [0, 1]
    assert back[0] == 2 and back[1] == pytest.approx(5e-6 + 3 * api, rel=1e-12)
    assert spans[1].end_s == pytest.approx(5e-6 + 2 * api + 1e-6, rel=1e-12)
    # never accepted: runs to the end, as run_tasks does from host_s
    spans, back = run_until(system, tasks, host_s=5e-6, settled=lambda j: False)
    assert back is None and spans[2].end_s == pytest.approx(5e-6 + 3 * api + 1e-6, rel=1e-12)
