"""The prediction of a fused operation: its baseline (``none``), or the DES of its plan
(``RUNS`` caches a run per family and SM split), with the compute alone, the exposed
communication and the bound beside it."""
from __future__ import annotations

from hwmodels.system import System
from pksim_core import baseline
from pksim_core.cache import TOPOLOGIES, BoundedCache
from pksim_core.fusion.bounds import resource_bound
from pksim_core.fusion.des import ALONE, run_plan
from pksim_core.fusion.flows import FLOWS
from pksim_core.fusion.plans import PLANS
from pksim_core.fusion.setup import Setup
from pksim_core.fusion.timeline import baseline_timeline, with_timeline
from pksim_core.prediction import Prediction, TimelineEvent
from pksim_core.schedule import Schedule

RUNS = BoundedCache(1024)       # (time, busy) of the DES per (family, SM split)


def clear_caches() -> None:
    """Forget every prepared plan, flow family, run and baseline (cold-start benchmarks)."""
    for cache in (TOPOLOGIES, PLANS, FLOWS, ALONE, RUNS):
        cache.clear()
    baseline.clear()


def predict_fused(system: System, schedule: Schedule, reduced: bool = True,
                  record: bool = False) -> Prediction:
    setup = Setup(system, schedule, reduced)
    base = setup.baseline
    if schedule.overlap == "none":
        if record:
            return with_timeline(base, baseline_timeline(setup))
        return base
    plan = setup.plan
    key = setup.family + (setup.compute_sms, setup.comm.comm_sms)
    run = None if record else RUNS.lookup(system, key)
    timeline: tuple[TimelineEvent, ...] = ()
    if run is None:
        run = run_plan(setup, record)
        if record:
            timeline = run[2]
        else:
            RUNS.store(system, key, run)
    time_s, busy = run[0], run[1]
    launch = setup.launch_s + setup.clear_s          # the outputs' clear, then the launch
    time_s += launch
    compute_alone = sum(setup.compute_alone()) + launch
    breakdown: dict[str, float] = {"clear": setup.clear_s} if setup.clear_s else {}
    for name, value in busy.items():
        cls = name.cls
        breakdown[cls] = max(breakdown.get(cls, 0.0), value)
    bound_s, bound_resource = resource_bound(system, plan, schedule.dtype, busy, launch)
    links = [v for c, v in breakdown.items() if c in ("nvl_out", "nvl_in", "nic_out", "nic_in")]
    return Prediction(
        schedule=schedule, system=system.name, time_s=time_s,
        bound_s=min(bound_s, time_s), bound_resource=bound_resource, alpha_beta_s=time_s,
        breakdown=dict(sorted(breakdown.items())),
        link_util=max(links) / time_s if links else 0.0, nbytes=plan.baseline_bytes,
        compute_s=compute_alone, exposed_comm_s=max(0.0, time_s - compute_alone),
        baseline_s=base.time_s, speedup=base.time_s / time_s,
        depends_on_assumed=tuple(system.assumed_keys(("gpu.", "domain.", "scaleout.",
                                                      "profile."))),
        reduced=reduced, notes=(plan.note,) if plan.note else (), timeline=timeline,
        profile=system.profile.name)
