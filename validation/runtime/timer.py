"""The one CUDA-event timer of every timing loop (collectives, fused kernels, the GEMM, the
copy bandwidth, the torch microbenchmarks): seconds per call, events around the call alone.

Before every timed call, in this order: with ``idle`` > 0, the host waits until the previous
call of the same function has ended, sleeps ``idle`` times that call's duration and queues a
spin of ``IDLE_LEAD_CYCLES`` (so that the flush and the call are queued before the GPU reaches
them); the write of ``flush`` (an L2-evicting buffer, outside the timed interval); with
``lead_cycles``, a GPU spin that long (the host issues the call meanwhile). Several functions
are timed in turn (``time_in_turn``): the warm-up calls of each, then round after round one
timed call of each, up to each one's own number of calls. torch is imported lazily.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from validation.runtime.library import torch_module

# Every timed call follows a write of this many bytes, which evicts the L2 (50 MiB on an H200)
# and is what the host issues a copy-engine collective's calls behind.
FLUSH_BYTES = 256 << 20
# Copy-engine collectives are timed behind a GPU spin of this many clock cycles (about 2 ms at
# the H200's 1.98 GHz) after the flush, longer than the host takes to issue any of their
# calls (up to 1.05 ms measured; docs/decisions/D28.md), so the events time the GPU's work alone; the
# host's calls are a separate question (docs/VALIDATION.md).
CE_LEAD_CYCLES = 4_000_000
# The GPU spin queued ahead of each timed call's flush when calls are timed from an idle GPU
# (``idle``): 2e6 cycles, about 1 ms at 1980 MHz, more than the host takes to queue the flush
# and a "none" call's w GEMMs and collective
IDLE_LEAD_CYCLES = 2_000_000

_FLUSH: dict = {}


def flush_buffer(device: Any = "cuda", nbytes: int = FLUSH_BYTES) -> Any:
    """The buffer whose write flushes the L2 before each timed call: one per device and size
    for the whole process rather than one from the allocator per timing (the same times)."""
    key = (str(device), nbytes)
    if key not in _FLUSH:
        torch = torch_module()
        _FLUSH[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return _FLUSH[key]


@dataclass(frozen=True)
class Request:
    """A function to time: ``iters`` timed calls after ``warmup`` untimed ones."""
    fn: Callable[[], Any]
    iters: int
    warmup: int = 0


def time_in_turn(requests: list[Request], *, flush: Any = None, lead_cycles: int = 0,
                 idle: float = 0.0, wait: Callable[[], None] | None = None,
                 torch: Any = None) -> list[list[float]]:
    """Seconds of every timed call of each request (see the module's docstring). ``wait``
    waits for the GPU after the warm-up and at the end (default: torch.cuda.synchronize;
    the runtimes pass their wait with a wall-clock backstop). ``torch``: the module (a
    stand-in in the tests; default the real one)."""
    torch = torch or torch_module()
    wait = wait or torch.cuda.synchronize

    def call(fn):                       # events around one call
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        return start, end

    last: list[Any] = [None] * len(requests)    # each one's latest call: its next idle gap
    for j, r in enumerate(requests):
        for _ in range(r.warmup):
            last[j] = call(r.fn) if idle > 0 else r.fn()
    wait()
    events: list[list[Any]] = [[] for _ in requests]
    for i in range(max((r.iters for r in requests), default=0)):
        for j, (r, ev) in enumerate(zip(requests, events)):
            if i >= r.iters:
                continue
            if idle > 0:
                torch.cuda.synchronize()
                if last[j] is not None:
                    time.sleep(idle * last[j][0].elapsed_time(last[j][1]) * 1e-3)
                torch.cuda._sleep(IDLE_LEAD_CYCLES)
            if flush is not None:
                flush.zero_()
            if lead_cycles:
                torch.cuda._sleep(lead_cycles)
            last[j] = call(r.fn)
            ev.append(last[j])
    wait()
    return [[s.elapsed_time(e) * 1e-3 for s, e in ev] for ev in events]


def time_calls(fn: Callable[[], Any], iters: int, warmup: int = 0, **kw) -> list[float]:
    """Seconds of each of ``iters`` calls of ``fn`` (``time_in_turn`` of one request)."""
    return time_in_turn([Request(fn, iters, warmup)], **kw)[0]
