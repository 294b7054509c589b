"""Timelines of fused predictions (``pksim trace``): per simulated rank a compute track and a
communication track, per link class the times a transfer crosses it; the ``none`` baseline
as the library kernel, then NCCL's collective. ``setup`` is a candidate of
``pksim_core.fusion.setup.Setup`` (which runs the DES that calls these)."""
from __future__ import annotations

import math

from hwmodels.sm import GEMM_TILE
from pksim_core.kernel_contract import BASELINE_COLLECTIVE
from pksim_core.prediction import Prediction, TimelineEvent
from pksim_core.workloads.fused_ops import Work

# Resource classes inside a GPU: not links (pksim_core.trace shows the others as link tracks).
LOCAL_RESOURCES = ("issue", "ce", "hbm", "l2", "sm", "tensor")


def _work_label(work: Work, compute_sms: int) -> str:
    if work.kind == "attention":
        return "attention"
    _, n, k = work.shape
    rows = work.flop / (2.0 * n * k)
    tiles = math.ceil(rows / GEMM_TILE[0] - 1e-9) * math.ceil(n / GEMM_TILE[1])
    return f"GEMM {tiles} tiles ({tiles / compute_sms:.2g} waves)"


def compute_track(setup) -> str:
    return f"compute SMs ({setup.compute_sms})"


def comm_track(setup) -> str:
    s = setup.schedule
    if s.overlap == "intra-sm":
        return f"comm warps (all {setup.compute_sms} SMs, {s.mechanism})"
    return f"comm SMs ({s.comm_sms}, {s.mechanism})"


def plan_timeline(setup, records, stalls=()) -> tuple[TimelineEvent, ...]:
    """Flow records of the fused DES as timeline events, shifted by the outputs' clear
    (store-add kernels) and the launch: per simulated rank a compute track (one span per
    chunk of tiles, and the epilogue's hand-off of its store-adds after it: ``stalls``) and
    a communication track, and per link class the times some transfer crosses it."""
    clear, launch = setup.clear_s, setup.clear_s + setup.launch_s
    coll = BASELINE_COLLECTIVE[setup.schedule.op]
    ranks = sorted({r.tags["rank"] for r in records})
    events = [TimelineEvent(f"rank {r} / {compute_track(setup)}", "kernel launch", clear, launch)
              for r in ranks]
    if clear:
        events += [TimelineEvent(f"rank {r} / {compute_track(setup)}",
                                 "outputs cleared (memset)", 0.0, clear) for r in ranks]
    events += [TimelineEvent(f"rank {r} / {compute_track(setup)}",
                             f"chunk {i}: epilogue hands its store-adds to the bulk engines",
                             start + launch, end + launch)
               for i, start, end in stalls for r in ranks]
    for rec in records:
        tags, start, end = rec.tags, rec.start_s + launch, rec.end_s + launch
        rank, index = tags["rank"], tags["index"]
        if tags["what"] == "compute":
            work = setup.plan.chunks[index].work[rank]
            events.append(TimelineEvent(f"rank {rank} / {compute_track(setup)}",
                                        f"chunk {index}: {_work_label(work, setup.compute_sms)}",
                                        start, end, rec.nbytes))
            continue
        name = f"{coll} chunk {index}" if tags["what"] == "comm" else f"{coll} tail {index}"
        events.append(TimelineEvent(f"rank {rank} / {comm_track(setup)}", name, start, end,
                                    rec.nbytes))
        for cls in sorted({n.cls for n, _ in tags["crosses"]}):
            if cls not in LOCAL_RESOURCES:
                events.append(TimelineEvent(f"link {cls}", name, start, end, rec.nbytes))
    return tuple(sorted(events, key=lambda e: (e.start_s, e.track)))


def baseline_timeline(setup) -> tuple[TimelineEvent, ...]:
    """The baseline as two kernels on one rank: the library GEMM on every SM, then
    NCCL's collective (its own timeline is ``pksim trace --op <collective> --impl nccl``)."""
    base, launch = setup.baseline, setup.launch_s
    compute = base.breakdown.get("tensor", 0.0)
    sms = setup.topo.sms_per_rank()
    coll = BASELINE_COLLECTIVE[setup.schedule.op]
    track = f"rank 0 / compute SMs (all {sms})"
    return (TimelineEvent(track, "kernel launch", 0.0, launch),
            TimelineEvent(track, "library GEMM" if "gemm" in setup.schedule.op else
                          "library kernel", launch, launch + compute),
            TimelineEvent("rank 0 / NCCL channels", "kernel launch", launch + compute,
                          2 * launch + compute),
            TimelineEvent("rank 0 / NCCL channels", f"NCCL {coll}", 2 * launch + compute,
                          base.time_s, base.nbytes))


def with_timeline(p: Prediction, timeline: tuple[TimelineEvent, ...]) -> Prediction:
    return p.__class__(**{**p.__dict__, "timeline": timeline})
