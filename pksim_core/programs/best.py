"""pksim's best plan of a program: the rewrites of ``pksim_core.programs.plan`` chosen on the
program's timeline, host issue included (docs/decisions/D61.md).

The rewrites that apply to the program as written fall into sets that share ops (a
collective's fold and the run of calls it would join; a copy between two collectives that both
would fold it). Starting from every op alone, set after set in program order, every
combination of a set's rewrites is tried on top of the rewrites kept, each remade from the ops
still free, and the one that gives the shortest program is kept (none where none gains; a tie
within ``SAME_TIME``: the least GPU and host time). pksim's best is the fastest of that plan,
every op alone and every rewrite made (rewrites of different sets that gain only together).

A trial is run only where it differs from the plan kept (``_Best.trial``): from the last task
of the kept plan's timeline issued after every task before it had ended (the tasks before it
run as they did), to the first such task after the trial's changes that is one in the kept
plan too (from there on the tasks run as they did, shifted in time): the program's time is the
kept plan's plus that shift. The plan kept is then run whole.
"""
from __future__ import annotations

from dataclasses import dataclass

from hwmodels.system import System
from pksim_core.programs.model import ProgramSpec
from pksim_core.programs.plan import Groups, ProgramPlan, Rewrite, plan_tasks, rewrites
from pksim_core.programs.timeline import EPS, Span, ProgramTask, run_tasks, run_until

# Two runs of a program within this share of each other take the same time: the timeline sums
# its steps in another order when a task off the critical path moves (rounding, not time)
SAME_TIME = 1e-9
# Groups past a trial's changes its timeline is first built for (all the rest if it does not
# come back to the kept plan's timeline within them)
NEAR = 64


@dataclass(frozen=True)
class _Run:
    """A plan run whole on the timeline, with what trials on top of it reuse."""
    groups: Groups
    plan: ProgramPlan
    spans: list[Span]
    score: tuple[float, float]    # (the program's time, its tasks' GPU and host time)
    at: dict[int, int]            # group -> its position in issue order
    first: list[int]              # group position in issue order -> its first task (and the end)
    settled: list[bool]           # task -> issued once every earlier task had ended
    work: list[float]             # task -> the GPU and host time of the tasks before it


class _Best:
    """pksim's best as it is built: the rewrites kept so far, run whole."""

    def __init__(self, system: System, program: ProgramSpec):
        self.system, self.program = system, program
        self.api = system.gpu.sync.launch_api_s
        self.alone: dict[str, list[ProgramTask]] = {}        # each op's tasks alone, made once
        self.now = self.run(Groups(program))

    def _work(self, task: ProgramTask) -> float:
        return task.duration_s + task.launches * self.api

    def run(self, groups: Groups) -> _Run:
        """``groups`` run whole."""
        if not groups.acyclic():
            raise RuntimeError(f"{self.program.name}: a kept rewrite closes a cycle")
        fused = {tuple(sorted(groups.members[g], key=self.program.op_index.get)): task
                 for g, task in groups.fused.items()}
        plan = plan_tasks(self.system, self.program, groups.ordered(), fused, best=True,
                          one_lane=False, alone=self.alone)
        spans = run_tasks(self.system, list(plan.tasks))
        first = [0] + [plan.task_of[groups.members[g][0]] + 1 for g in groups.issue]
        settled, work, ended = [], [0.0], 0.0
        for task, span in zip(plan.tasks, spans):
            settled.append(ended <= span.issued_s + EPS)
            ended = max(ended, span.end_s)
            work.append(work[-1] + self._work(task))
        at = {g: p for p, g in enumerate(groups.issue)}
        return _Run(groups, plan, spans, (ended, work[-1]), at, first, settled, work)

    def made(self, rewrites_: list[Rewrite], groups: Groups | None = None
             ) -> tuple[Groups, list[str]] | None:
        """The kept groups (or ``groups``) with ``rewrites_`` made in order, and the ops they
        merged; None where one makes nothing (the same plan as without it)."""
        groups = (groups or self.now.groups).copy()
        names: list[str] = []
        for rewrite in rewrites_:
            merges = rewrite(groups)
            if not merges:
                return None
            for merge in merges:
                groups.merge(*merge)
                names += merge[0]
        return groups, names

    def trial(self, rewrites_: list[Rewrite]) -> tuple[float, float] | None:
        """The score of the kept plan with ``rewrites_`` made (None: nothing new, or a
        cycle), run where it differs from the kept plan (see the module)."""
        made = self.made(rewrites_)
        if made is None:
            return None
        groups, names = made
        now = self.now
        issue = now.groups.issue
        places = [now.at[now.groups.of[n]] for n in names]
        pa, pb = min(places), max(places) + 1
        # the trial's groups for the kept plan's pa..pb, in issue order (a cycle through
        # other ops runs through the groups between the merged ops)
        within = list(dict.fromkeys(groups.of[m] for g in issue[pa:pb]
                                    for m in now.groups.members[g]))
        window = groups.order(within)
        if len(window) < len(within):
            return None
        start = pa
        while not now.settled[now.first[start]]:
            start -= 1
        head = issue[start:pa] + window
        t0 = now.first[start]
        # the host's clock before it issues task t0
        host_s = now.spans[t0].issued_s - now.plan.tasks[t0].launches * self.api
        stop = min(len(issue), pb + NEAR)
        while True:
            part = [sorted(groups.members[g], key=self.program.op_index.get)
                    for g in head + issue[pb:stop]]
            fused = {tuple(ms): groups.fused[groups.of[ms[0]]] for ms in part
                     if groups.of[ms[0]] in groups.fused}
            tasks = list(plan_tasks(self.system, self.program, part, fused, best=True,
                                    one_lane=False, alone=self.alone, part=True).tasks)
            changed = len(tasks) - (now.first[stop] - now.first[pb])   # the tasks of head
            spans, back = run_until(
                self.system, tasks, host_s,
                lambda j: j >= changed and now.settled[now.first[pb] + j - changed])
            if back is not None or stop == len(issue):
                break
            stop = len(issue)
        work = (now.score[1] - (now.work[now.first[pb]] - now.work[t0])
                + sum(self._work(t) for t in tasks[:changed]))
        if back is None:
            return max(s.end_s for s in spans), work
        j, issued = back
        return now.score[0] + issued - now.spans[now.first[pb] + j - changed].issued_s, work

    def decide(self, rewrites_: list[Rewrite]) -> None:
        """Keep the best combination of ``rewrites_`` (a set that shares ops), none included,
        on top of the rewrites kept."""
        score, chosen = self.now.score, None
        for mask in range(1, 2 ** len(rewrites_)):
            pick = [r for i, r in enumerate(rewrites_) if mask >> i & 1]
            got = self.trial(pick)
            if got is not None and _better(got, score):
                score, chosen = got, pick
        if chosen is not None:
            self.now = self.run(self.made(chosen)[0])


def _better(score: tuple[float, float], than: tuple[float, float]) -> bool:
    (t, work), (now, now_work) = score, than
    return t < now * (1 - SAME_TIME) or (t <= now * (1 + SAME_TIME) and work < now_work)


def best_plan(system: System, program: ProgramSpec) -> tuple[ProgramPlan, list[Span]]:
    """pksim's best plan and its timeline's spans (see the module)."""
    best = _Best(system, program)
    alone = best.now
    every = rewrites(system, program)
    sets: list[tuple[set[str], list[Rewrite]]] = []
    for rewrite in every:
        reach = {n for names, _ in rewrite(alone.groups) for n in names}
        if not reach:
            continue
        touching = [s for s in sets if s[0] & reach]
        sets = [s for s in sets if not s[0] & reach] + [
            (reach.union(*(s[0] for s in touching)),
             [r for s in touching for r in s[1]] + [rewrite])]
    for _, members in sorted(sets, key=lambda s: min(map(program.op_index.get, s[0]))):
        best.decide(sorted(members, key=every.index))
    runs = [best.now, _every(best, every, alone), alone]
    fastest = min(runs, key=lambda r: r.score[0])      # the first of equals
    return fastest.plan, fastest.spans


def _every(best: _Best, every: list[Rewrite], alone: _Run) -> _Run:
    """Every rewrite made, in order, where it makes something (and, if all of them close a
    cycle, where it closes none); the plan kept if that is the same plan."""
    groups = alone.groups.copy()
    for rewrite in every:
        for merge in rewrite(groups):
            groups.merge(*merge)
    if not groups.acyclic():
        groups = alone.groups
        for rewrite in every:
            made = best.made([rewrite], groups)
            if made is not None and made[0].acyclic():
                groups = made[0]
    if _merged(groups) == _merged(best.now.groups):
        return best.now
    return best.run(groups)


def _merged(groups: Groups) -> set[tuple[str, ...]]:
    return {tuple(sorted(groups.members[g])) for g in groups.fused}
