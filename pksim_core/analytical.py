"""The closed-form backend: a lower bound with its binding resource, and alpha-beta.

Both come from the same flows the DES runs, so the two backends check each other:
- bound = launch + max(sum over steps of latency + signal, max over resources of
  total bytes x weight / capacity). Nothing in the DES can beat either term, so the
  bound is never above the DES time.
- alpha-beta = launch + sum over steps of (latency + signal + the step's busiest
  resource's bytes / capacity): exact when a step's flows do not contend on
  different bottlenecks and lanes do not overlap.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Analysis:
    bound_s: float
    bound_resource: str
    alpha_beta_s: float


def analyse(model) -> Analysis:
    lanes = model.lanes
    total: dict[str, float] = {}
    latency_path = 0.0
    alpha_beta = model.launch_s
    # what a step loads depends on its pattern only: worked out once per pattern (a ring of
    # 9,216 ranks has two for 18,430 steps), then added step by step in the same order
    patterns: dict = {}
    for step, classes, sync_s in model.step_classes():
        if step.key not in patterns:
            load: dict[str, float] = {}
            for fc in classes:
                for name, weight in fc.usage:
                    load[name] = load.get(name, 0.0) + weight * fc.nbytes * lanes
            patterns[step.key] = (load, max((fc.latency_s for fc in classes), default=0.0),
                                  max((v / model.capacity[n] for n, v in load.items()),
                                      default=0.0))
        load, slowest, busiest = patterns[step.key]
        for name, value in load.items():
            total[name] = total.get(name, 0.0) + value
        step_latency = slowest + sync_s
        latency_path += step_latency
        alpha_beta += step_latency + busiest
    resource, bw_time = "latency", 0.0
    for name, value in total.items():
        t = value / model.capacity[name]
        if t > bw_time:
            resource, bw_time = name.cls, t
    if latency_path >= bw_time:
        resource = "latency"
    return Analysis(model.launch_s + max(latency_path, bw_time), resource, alpha_beta)
