"""pk's best schedule against NCCL's own pick for one collective: both binding resources and
their difference in time, itemised (``pksim predict --json``'s ``vs_nccl``; the published
report's pk-against-NCCL table).

Each prediction's time splits into parts that add up to it (docs/decisions/D44.md):
- ``launch_s``: what the model pays before the first byte moves (the launch, a generated
  kernel's grid start and entry barrier);
- ``host_s``: how far the host's issue floor holds the call beyond the GPU's time (NCCL's
  back-to-back calls: nccl.launch_costs);
- ``payload_s``: the binding resource's busy time at its raw capacity (a link's payload at
  the line rate; an SM or memory resource's whole busy time);
- ``wire_s``: what the binding link's protocol and mechanism efficiency add to that busy
  time (busy x (1 - efficiency));
- ``exposed_s``: the rest: latencies, signals and pipeline fill or drain not hidden behind
  the binding resource.
The busiest resource (``busiest_resource``) is the resource class busiest over the run (on a
tie, the lower bound's ``bound_resource``); two predictions are bound by the same resource when
their busiest classes are one port pair (``busiest_group``: a GPU's NVLink egress and ingress
carry the same all-reduce traffic; nic_out / nic_in; a tier's up and down links).
"""
from __future__ import annotations

import dataclasses

from hwmodels.system import System
from pksim_core import nccl
from pksim_core.collective_model import LINK_CLASSES, build, simulate
from pksim_core.prediction import Prediction
from pksim_core.search import best
from pksim_core.simulate import predict
from pksim_core.vocabulary import renamed

PARTS = ("launch_s", "host_s", "payload_s", "wire_s", "exposed_s")
PORT_PAIRS = {"nvl_in": "nvlink", "nvl_out": "nvlink", "nic_in": "nic", "nic_out": "nic",
              "up1": "tier-1 uplink", "down1": "tier-1 uplink",
              "up2": "tier-2 uplink", "down2": "tier-2 uplink"}


def link_efficiency(system: System, p: Prediction) -> float:
    """Payload share of the wire on the links of ``p``'s schedule."""
    s = p.schedule
    if s.impl == "nccl":
        return nccl.link_efficiency(system, s)
    return system.gpu.nvlink.efficiency(s.mechanism)


def itemise(system: System, p: Prediction) -> dict:
    """``p``'s busiest resource and its time split into PARTS (they add up to time_s)."""
    model = build(system, p.schedule)
    binding = busiest(p)
    busy = p.breakdown.get(binding, 0.0)
    eff = link_efficiency(system, p) if binding in LINK_CLASSES else 1.0
    host = _host_s(model, p)
    parts = {"launch_s": model.launch_s, "host_s": host, "payload_s": busy * eff,
             "wire_s": busy * (1 - eff)}
    parts["exposed_s"] = p.time_s - sum(parts.values())
    return renamed({"label": p.schedule.label(), "time_s": p.time_s, "binding": binding,
                    "binding_group": PORT_PAIRS.get(binding, binding),
                    "bound_resource": p.bound_resource, "efficiency": eff, "parts": parts},
                   ("binding", "binding_group"))


def _host_s(model, p: Prediction) -> float:
    """How far the host's floor holds ``p`` (the prediction of ``model``) beyond its GPU time:
    pksim_core.collective_model.simulate takes max(GPU time, floor) + tail, so with no floor, or with no
    tail and ``p``'s time above the floor, nothing; else the model is simulated again without
    floor and tail (at 4,096 ranks NCCL's 64-lane DES takes seconds)."""
    floor = model.host_floor_s
    if floor <= 0.0 or (model.tail_s == 0.0 and p.time_s > floor):
        return 0.0
    gpu_only = simulate(dataclasses.replace(model, host_floor_s=0.0, tail_s=0.0)).time_s
    return max(0.0, floor - gpu_only)


def busiest(p: Prediction) -> str:
    """The resource class busiest over ``p``'s run; of classes equally busy (an all-reduce's
    NVLink egress and ingress), the lower bound's binding one, else the first by name."""
    if not p.breakdown:
        return "latency"
    top = max(p.breakdown.values())
    tied = sorted(k for k, v in p.breakdown.items() if v >= top * (1 - 1e-9))
    return p.bound_resource if p.bound_resource in tied else tied[0]


def versus_nccl(system: System, op: str, nbytes: int, world: int | None = None,
                domains: int = 1, launch: str = nccl.DEFAULT_LAUNCH,
                pk: Prediction | None = None) -> dict:
    """pk's best schedule (or ``pk``) and NCCL's pick for this call, each itemised, and
    pk - NCCL per part (negative: pk spends less there)."""
    mine = pk if pk is not None else best(system, op, nbytes, world, domains)
    theirs = predict(system, nccl.nccl_schedule(system, op, nbytes, world, domains,
                                                launch=launch))
    a, b = itemise(system, mine), itemise(system, theirs)
    return renamed({"pk": a, "nccl": b,
                    "same_binding": a["busiest_group"] == b["busiest_group"],
                    "difference_s": a["time_s"] - b["time_s"],
                    "difference_parts": {k: a["parts"][k] - b["parts"][k] for k in PARTS}},
                   ("same_binding",))
