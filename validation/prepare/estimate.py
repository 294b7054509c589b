"""How long a bundle's cases take on the GPU: an estimate from the wall times of earlier runs
(``prepare.json``'s ``estimated_gpu_s``), never a measurement."""
from __future__ import annotations

from validation.runtime import reference
from validation.runtime.timer import IDLE_LEAD_CYCLES

# Rough costs of one case on an H200 for the run-time estimate, from the wall times of the
# 2026-12-02 run (validation/data/h200-collectives-2026-12-02.jsonl): a fixed cost, an L2
# flush per timed call, buffer set-up and checking per byte, and the fp32 reference of a
# reduction per byte. Only an estimate: measured times may be several times the predicted.
CASE_FIXED_S = 0.003
FLUSH_S = 150e-6
SETUP_S_PER_BYTE = 1.2e-12
REDUCE_CHECK_S_PER_BYTE = 1.0e-11
WORKER_START_S = 20.0
FALLBACK_GBPS = 1000.0            # traffic rate assumed where a case has no prediction
# A fused case (validation/data/h200-fused-2026-12-02-run2.jsonl: 0.06-0.54 s each): buffers
# and the fp32 reference, checked before and after timing, plus the timed calls; "none" times
# five things (GEMMs + collective, GEMMs, torch GEMMs, collective, torch GEMMs + collective).
FUSED_CASE_FIXED_S = 0.02
IDLE_CLOCK_HZ = 1.98e9   # turns validation.runtime.timer.IDLE_LEAD_CYCLES (before each call timed from idle) into s
FUSED_REFERENCE_FLOPS = 50e12     # fp32 reference matmul (TF32 off)
FUSED_FALLBACK_FLOPS = 500e12     # where a case has no prediction


def estimate_case_s(case: dict) -> float:
    """Seconds one case takes on the GPU (set-up, check, warm-up and timed calls)."""
    op, w, n, dt = case["op"], case["world"], case["count"], case["dtype"]
    i, o = reference.counts(op, w, n)
    buffers = (i + o) * w * reference.ELEM[dt]
    traffic = reference.min_traffic_bytes(op, w, n, dt)
    t = case.get("predicted_s") or (10e-6 + traffic / (FALLBACK_GBPS * 1e9))
    s = CASE_FIXED_S + buffers * SETUP_S_PER_BYTE
    if op in ("reduce-scatter", "all-reduce"):
        s += buffers * REDUCE_CHECK_S_PER_BYTE
    if case.get("time"):
        s += (case["iters"] + case["warmup"]) * t + case["iters"] * FLUSH_S
    return s


def estimate_fused_case_s(case: dict) -> float:
    """Seconds one fused or "none" case takes on the GPU."""
    w, m, n, k = (case[x] for x in ("world", "m", "n", "k"))
    flops = 2.0 * w * m * n * k
    t = case.get("predicted_s") or flops / FUSED_FALLBACK_FLOPS
    idle = case.get("idle", 0.0)                 # timed from idle: a sleep and a spin first
    gap = idle * t + IDLE_LEAD_CYCLES / IDLE_CLOCK_HZ if idle else 0.0
    calls = case["warmup"] * t + case["iters"] * (t + FLUSH_S + gap)
    timed = 5 * calls if case["kind"] == "none" else \
        2 * calls if case.get("overlap") == "intra-sm" else calls
    return FUSED_CASE_FIXED_S + 2 * flops / FUSED_REFERENCE_FLOPS + timed
