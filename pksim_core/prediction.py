"""The value a simulation returns: time, bound, breakdown, and what it rests on."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pksim_core.schedule import Schedule
from pksim_core.vocabulary import MOVED, renamed


@dataclass(frozen=True)
class TimelineEvent:
    track: str          # "rank 0 / issue", "nvl_out", ...
    name: str
    start_s: float
    end_s: float
    nbytes: float = 0.0


@dataclass(frozen=True)
class Prediction:
    schedule: Schedule
    system: str
    time_s: float
    bound_s: float
    bound_resource: str
    alpha_beta_s: float
    breakdown: dict[str, float]            # busy seconds per resource class
    link_util: float
    nbytes: int = 0
    algbw_GBps: float = 0.0
    busbw_GBps: float = 0.0
    compute_s: float = 0.0
    exposed_comm_s: float = 0.0
    baseline_s: float = 0.0
    speedup: float = 0.0
    depends_on_assumed: tuple[str, ...] = ()
    backend: str = "des"
    reduced: bool = True
    notes: tuple[str, ...] = ()           # how the simulator handled the input (e.g. skew)
    profile: str = ""                     # the kernel profile the system used (hwmodels.profile)
    timeline: tuple[TimelineEvent, ...] = field(default=(), compare=False)

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        out = asdict(self)
        out["schedule"] = self.schedule.to_dict()
        out["schedule_key"] = self.schedule.key()
        out["label"] = self.schedule.label()
        out["depends_on_assumed"] = list(self.depends_on_assumed)
        out["notes"] = list(self.notes)
        collective = any(k == "bytes" for k, _ in self.schedule.shape)
        # null for what does not apply: a collective has no baseline or compute of its
        # own; a fused op has no nccl-tests size or bus bandwidth
        idle = (("baseline_s", "speedup", "compute_s", "exposed_comm_s") if collective
                else ("nbytes", "algbw_GBps", "busbw_GBps"))
        for key in idle:
            if not out[key]:
                out[key] = None
        if not timeline:
            out.pop("timeline")
        else:
            out["timeline"] = [renamed(asdict(e), MOVED) for e in self.timeline]
        return renamed(out, ("nbytes", "breakdown", "depends_on_assumed"))
