"""What the model predicts for each microbenchmark point (validation/microbench), from a
loaded system: the same component models (``hwmodels.sm``) and the same fluid engine
(``hwmodels.fluid``) the simulator uses, so that calibration fits, and the report
judges, the model that predicts collectives.

A point is one record of ``validation/microbench/run.py`` (``bench``, ``params``,
``time_s``, ...). The prediction is its median time per operation, in seconds:

* copies (``hbm_copy``, ``sm_copy``, ``tma_copy``, ``tma_reduce``): one flow of the
  payload over a one-GPU capacity set, {issue: the SMs' combined rate from
  the mechanism's component (``pksim_core.mechanisms``: ``stream_Bps``, or the copy engines), memory: L2 when the working set
  is hot and fits, else HBM}, started after the memory's latency; a kernel adds
  ``sync.stream_launch_us``; back-to-back operations never go faster than one host
  launch call, ``sync.launch_api_us``;
* the collectives' own routines (``block_moves``): the same flow, the SMs' rate from
  ``pksim_core.mechanisms.Mechanism.local_rate_Bps`` (the collective model's), (S + D) x payload of memory traffic;
  their sums with a reduce op or an epilogue (``epilogue_moves``) likewise, with the
  epilogue's term (``Mechanism.epilogue_s_per_B``); from sources off the 16-byte grid
  (``block_moves --shift``, group ``block_moves_shift``) with the shift's
  (``Mechanism.shift_s_per_B``);
  the fused kernels' pull-reduce (``fused_pull``, its TMA form ``fused_pull_tma``)
  likewise at its own rate;
* launches, flags: ``gpu.sync`` figures; a ring of peer copies with the generated kernels'
  hand-off between them (``signal_chain``): the copies as block_moves' plus
  ``hwmodels.sm.handoff_s`` per step;
* GEMM and attention: ``hwmodels.sm`` tensor model + ``sync.stream_launch_us``; our GEMM
  store-adding its tiles into D outputs (``gemm_store_add``): the DES of the intra-SM
  fused kernels (``pksim_core.fusion``) on one GPU;
* atomics: measured only (the model has no parameter for them).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import simpy

from hwmodels.fluid import FluidEngine, single_flow_time_s
from hwmodels.sm import (GEMM_TILE, attention_time_s, gemm_efficiency, gemm_time_s,
                         grid_start_s, handoff_s, reduce_memory_weight, sustained_factor,
                         tile_reduce_memory_weight)
from hwmodels.system import GpuSpec, System
from pksim_core.kernel_contract import BLOCK_THREADS
from pksim_core.mechanisms import TMA, epilogue_handoff_s, of, routine_mechanism
from pksim_core.move_cuts import working_blocks
from pksim_core.fusion.plans import MAX_CHUNKS_PER_PEER
from pksim_core.schedule import DTYPES
from pksim_core.workloads.phases import load_rounds

# The ld/st copy kernel (copy_int4_kernel) keeps 4 x 16-byte loads in flight per thread.
LDST_IN_FLIGHT_B_PER_THREAD = 64
# Keys each predicted benchmark's record needs: (record keys, params keys).
REQUIRED = {
    "hbm_copy": ((), ("engine", "l2", "size_bytes")),
    "sm_copy": (("bytes",), ("blocks", "threads")),
    "tma_copy": (("bytes",), ("blocks", "msg_bytes", "stages")),
    "tma_reduce": (("bytes",), ("blocks", "msg_bytes")),
    "block_moves": (("bytes",), ("mechanism", "kind", "sources", "dests", "blocks")),
    "block_moves_shift": (("bytes",), ("mechanism", "kind", "sources", "dests", "blocks",
                                       "shift")),
    "block_moves_own": (("bytes",), ("mechanism", "kind", "sources", "dests", "groups", "blocks")),
    "block_moves_cross": (("bytes",), ("mechanism", "sources", "dests", "groups", "blocks")),
    "crossed_sums": (("bytes",), ("mechanism", "sources", "dests", "groups", "blocks")),
    "epilogue_moves": (("bytes",), ("mechanism", "variant", "dtype", "sources", "dests", "blocks")),
    "fused_pull": (("bytes",), ("kind", "world", "blocks", "threads")),
    "fused_pull_tma": (("bytes",), ("kind", "world", "blocks", "threads")),
    "signal_chain": (("bytes",), ("mechanism", "sync", "groups", "blocks", "steps")),
    "launch_latency": ((), ("mode",)),
    "ce_burst": ((), ("streams", "copies_per_stream", "copy_bytes")),
    "flag_latency": ((), ("scope",)),
    "gemm": ((), ("m", "n", "k")),
    "attention": ((), ("batch", "heads", "seq", "head_dim", "causal")),
    "gemm_store_add": ((), ("epilogue", "dests", "m", "n", "k")),
}
# epilogue_moves' variants: what each costs beyond the plain sum (Mechanism.epilogue_s_per_B).
EPILOGUE_VARIANTS = {"sum": "", "min": "op", "avg": "op", "min-bias": "bias",
                     "max-scale-bias": "bias"}
# Benchmarks the model has no parameter for, and why.
MEASURED_ONLY = {
    "atomics": "measured only: the model has no atomic-operation parameter (the generated "
               "kernels move data with ld/st, TMA and copy engines, and signal with flags)",
}

# Benchmarks the model predicts only some records of (the rest are measured only), and why.
PARTLY_MEASURED_ONLY = {
    "block_moves": "measured only where \"flush\" is \"read\": behind a read instead of a "
                   "write (an L2 of clean lines), to see what the write's dirty lines cost; "
                   "the collectives are validated behind a write; and where \"order\" is "
                   "\"staggered\": shared reads in the one-shot's peer order, which the "
                   "model does not tell apart (0-0.2 us from the same order; docs/decisions/D13.md)",
    "gemm_store_add": "measured only where \"epilogue\" is \"store_many\": plain tile stores "
                      "into several outputs, to tell the store-adds' reduction apart from their "
                      "bytes (no generated kernel stores a tile more than once)",
    "signal_chain": "measured only where \"sync\" is \"barrier\": the generated kernels "
                    "in virtual ranks never meet in a grid barrier (ranks in separate "
                    "processes do, at entry and exit), so the model has no barrier term",
}


@dataclass(frozen=True)
class PointResult:
    bench: str
    params: Mapping[str, Any]
    measured_s: float
    predicted_s: float | None
    record: Mapping[str, Any] = field(repr=False, default_factory=dict)
    note: str = ""

    @property
    def error(self) -> float | None:
        """Relative error of the predicted time: predicted / measured - 1."""
        if self.predicted_s is None:
            return None
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class GroupSummary:
    bench: str
    points: int
    predicted: int
    median_abs_error: float | None
    max_abs_error: float | None
    rms_log_error: float | None
    note: str = ""


# ---- the fluid engine on one GPU ------------------------------------------------------
def flow_time_s(capacity: Mapping[str, float], usage: Mapping[str, float], nbytes: float,
                latency_s: float = 0.0) -> float:
    """Time for ``nbytes`` to cross ``usage`` on an idle ``capacity`` set (fluid engine)."""
    return single_flow_time_s(capacity, usage, nbytes, latency_s)


def _memory(gpu: GpuSpec, hot: bool, working_set_B: float) -> tuple[str, float, float]:
    """(resource, capacity in B/s read+write, latency) of the memory a working set lives in."""
    if hot and working_set_B <= gpu.l2.capacity_B:
        return "l2", gpu.l2.bandwidth_Bps, gpu.l2.latency_s
    return "hbm", gpu.hbm.effective_Bps, gpu.hbm.latency_s


def _back_to_back(gpu: GpuSpec, gpu_s: float) -> float:
    """Per-operation time of operations launched back to back on one stream."""
    return max(gpu.sync.launch_api_s, gpu_s)


def _ldst_per_sm(gpu: GpuSpec, threads_per_sm: float, latency_s: float) -> float:
    """One SM's ld/st copy rate: its port rate, unless too few threads keep too few bytes
    in flight to cover the memory latency (Little's law)."""
    in_flight = threads_per_sm * LDST_IN_FLIGHT_B_PER_THREAD
    port = of("register").per_sm_Bps(gpu, remote=False)
    return min(port, in_flight / latency_s) if latency_s > 0 else port


def _sm_copy(gpu: GpuSpec, nbytes: float, blocks: int, threads: int, hot: bool) -> float:
    n = min(blocks, gpu.sm.count)
    mem, cap, lat = _memory(gpu, hot, 2 * nbytes)
    per_sm = _ldst_per_sm(gpu, blocks * threads / n, lat)
    issue = of("register").stream_Bps(gpu, n, cap / 2, per_sm_Bps=per_sm)
    body = flow_time_s({"issue": issue, mem: cap}, {"issue": 1.0, mem: 2.0}, nbytes, lat)
    return _back_to_back(gpu, gpu.sync.stream_launch_s + body)


def _ce_copy(gpu: GpuSpec, nbytes: float, hot: bool) -> float:
    mem, cap, lat = _memory(gpu, hot, 2 * nbytes)
    engine = of("copy-engine")
    ce = engine.issue_capacity(gpu, 0, remote=False)
    body = flow_time_s({"ce": ce, mem: cap}, {"ce": 1.0, mem: 2.0}, nbytes,
                       engine.copy_setup_s(gpu, virtual=True) + lat)
    return _back_to_back(gpu, body)


def _tma_copy(gpu: GpuSpec, nbytes: float, blocks: int, message_B: float, stages: int,
              hot: bool) -> float:
    n = min(blocks, gpu.sm.count)
    mem, cap, _ = _memory(gpu, hot, 2 * nbytes)
    # A ring of `stages` shared-memory buffers keeps stages / 2 round trips in flight
    # (2 stages: one load overlaps one store); each message pays the round trip.
    issue = TMA.stream_Bps(gpu, n, cap / 2, message_B, in_flight=stages / 2)
    body = flow_time_s({"issue": issue, mem: cap}, {"issue": 1.0, mem: 2.0}, nbytes)
    return _back_to_back(gpu, gpu.sync.stream_launch_s + body)


def _tma_reduce(gpu: GpuSpec, nbytes: float, blocks: int, message_B: float, hot: bool) -> float:
    n = min(blocks, gpu.sm.count)
    mem, cap, lat = _memory(gpu, hot, nbytes)
    weight = reduce_memory_weight(gpu, mem == "l2")
    # Fire-and-forget bulk reductions (up to 8 per SM in flight) press the memory to its
    # limit: no knee, the fluid engine's hard min with the memory resource.
    issue = TMA.reduce_stream_Bps(gpu, n, message_B)
    body = flow_time_s({"issue": issue, mem: cap}, {"issue": 1.0, mem: weight}, nbytes, lat)
    return _back_to_back(gpu, gpu.sync.stream_launch_s + body)


def _block_move(gpu: GpuSpec, nbytes: float, mechanism: str, kind: str, sources: int,
                dests: int, blocks: int, readers: int = 1, groups: int = 1,
                hot: bool = True, routine: str = "", threads: int | None = None,
                load_rounds: int = 1, epilogue: str = "", elem_bytes: float = 2.0,
                shifts: tuple[int, ...] = (), crossed: bool = False) -> float:
    """A generated collective's routine on ``blocks`` blocks (one per SM up to the SM
    count; more share the SMs): (S + D) x payload of memory traffic. ``readers`` > 1: that
    many groups of ``blocks`` blocks move the same sources, each into its own destinations
    (the sources come from memory once). ``groups`` > 1: that many groups each move their own
    sources into their own destination (as virtual ranks do; block_moves_own); the grid's
    start (hwmodels.sm.grid_start_s) adds to the body. ``hot``: launched back to back, a
    working set that fits in L2 stays there; behind a flushing write (not ``hot``) it comes
    from HBM however small, as a validated collective's (pksim_core.collective_model.build's ``cold``).
    ``routine`` "pull" (with its ``threads``): the fused kernels' pull-reduce instead of the
    collectives' routines (pksim_core.mechanisms.Mechanism.time_per_B). ``epilogue`` (with ``elem_bytes``):
    a sum through the epilogue routines (Mechanism.epilogue_s_per_B). ``shifts``: each
    source's shift off the destinations' 16-byte grid (Mechanism.shift_s_per_B). ``crossed``:
    group g sums part g of every source (Mechanism.cross_s_per_B)."""
    body = _block_move_body(gpu, nbytes, mechanism, kind, sources, dests, blocks, readers,
                            groups, hot, routine, load_rounds, epilogue, elem_bytes, shifts,
                            crossed)
    start = grid_start_s(gpu, blocks * readers * groups, threads or BLOCK_THREADS[mechanism])
    return _back_to_back(gpu, gpu.sync.stream_launch_s + start + body)


def _block_move_body(gpu: GpuSpec, nbytes: float, mechanism: str, kind: str, sources: int,
                     dests: int, blocks: int, readers: int = 1, groups: int = 1,
                     hot: bool = True, routine: str = "", load_rounds: int = 1,
                     epilogue: str = "", elem_bytes: float = 2.0,
                     shifts: tuple[int, ...] = (), crossed: bool = False) -> float:
    """_block_move's data movement alone, from its first read to its last write; a register
    sum loading its sources in ``load_rounds`` rounds waits ``the profile's load_round`` more
    per further round (as pksim_core.mechanisms.flow.move_flow). A TMA copy deals its stage chunks over the
    blocks unless its source is shifted (then each block stages and realigns a piece)."""
    copies = readers * groups                    # payloads moved
    working = working_blocks(blocks, nbytes, dealt=mechanism == "tma" and kind == "copy"
                             and not any(shifts))
    n = min(working * copies, gpu.sm.count)
    component = of(mechanism)
    traffic = component.traffic(gpu, sources, dests, readers, nbytes)
    mem, cap, lat = _memory(gpu, hot, (sources * groups + dests * copies) * nbytes)
    rate = routine_mechanism(mechanism, routine).local_rate_Bps(
        gpu, sources, dests, kind == "reduce", n, cap, nbytes, readers, routine=routine,
        epilogue=epilogue, elem_bytes=elem_bytes, shifts=shifts, crossed=crossed)
    lat += component.latency_s(gpu, sources, dests, kind == "reduce", nbytes / working,
                               routine, shifts=shifts)
    lat += component.rounds_latency_s(gpu, kind == "reduce", sources, shifts, load_rounds)
    return flow_time_s({"issue": rate, mem: cap}, {"issue": 1.0, mem: traffic},
                       nbytes * copies, lat)


def _signal_chain(gpu: GpuSpec, nbytes: float, mechanism: str, groups: int, blocks: int,
                  steps: int) -> float:
    """``steps`` peer copies of ``nbytes`` per group around a ring of ``groups`` groups of
    ``blocks`` blocks, one launch alone behind a write: the first copy from HBM, each further
    one, of what the previous step left in L2, after the hand-off a generated kernel's ring
    phase pays (hwmodels.sm.handoff_s: the writes' drain to L2, the release, the flag), as
    pksim_core.collective_model costs a ring's phases."""
    first = _block_move(gpu, nbytes, mechanism, "copy", 1, 1, blocks, groups=groups, hot=False)
    again = _block_move_body(gpu, nbytes, mechanism, "copy", 1, 1, blocks, groups=groups,
                             hot=True)
    return first + (steps - 1) * (handoff_s(gpu, gpu.l2.latency_s) + again)


def _ce_burst(gpu: GpuSpec, streams: int, per_stream: int, copy_bytes: float,
              kernels: bool = False, order: str | None = None) -> float:
    """``per_stream`` copies (and kernels) queued on each of ``streams`` streams, GPU time
    from the first to the last (pksim_core.mechanisms.CopyEngine.burst_s)."""
    return of("copy-engine").burst_s(gpu, streams, per_stream, copy_bytes, kernels, order)


def _gemm_store_add(gpu: GpuSpec, m: int, n: int, k: int, dests: int) -> float:
    """Our GEMM (C = A @ B, bf16, every SM) whose epilogue store-adds each tile into
    ``dests`` outputs in HBM, as the intra-SM fused kernels are simulated (pksim_core.fusion):
    the waves of tiles one after another at the tensor rate, each followed by the time the
    SMs take to hand its store-adds to their bulk engines (pksim_core.mechanisms.Tma.epilogue_handoff_s);
    each wave's store-adds once it is computed and after the previous wave's, at the tile
    read-modify-write rate (``hwmodels.sm.tile_reduce_memory_weight``), on a memory path of
    which the main loops leave ``tensor.epilogue_overlap`` until the last wave is
    computed."""
    sms = gpu.sm.count
    tiles = math.ceil(m / GEMM_TILE[0]) * math.ceil(n / GEMM_TILE[1])
    waves = max(1, min(MAX_CHUNKS_PER_PEER, math.ceil(tiles / sms)))  # overlap's chunks
    flop, nbytes = 2.0 * m * n * k, 2.0 * (m * k + k * n)  # C goes to the store-adds
    peak = gpu.tensor.flops("bf16") * gemm_efficiency(gpu, m, n, k)
    hbm = gpu.hbm.effective_Bps
    weight = tile_reduce_memory_weight(gpu)
    env = simpy.Environment()
    engine = FluidEngine(env, {"tensor": peak * sustained_factor(gpu, flop / peak),
                               "hbm": hbm, "issue": TMA.reduce_issue_capacity(gpu, sms),
                               "mempath": hbm * gpu.tensor.epilogue_overlap})
    computed = [env.event() for _ in range(waves)]
    payload = dests * 2.0 * m * n / waves                  # a wave's store-adds
    stall = epilogue_handoff_s(gpu, payload, sms)

    def compute():
        for wave in computed:
            yield engine.transfer(nbytes / waves, {"hbm": 1.0, "tensor": flop / nbytes},
                                  priority=1)
            wave.succeed()
            yield env.timeout(stall)
        engine.set_capacity("mempath", hbm)

    def store_adds():
        for wave in computed:
            yield wave
            yield engine.transfer(payload, {"hbm": weight, "issue": 1.0, "mempath": weight})

    computing = env.process(compute())
    storing = env.process(store_adds())
    # until both are done, not until the queue is empty (hwmodels.fluid.set_capacity)
    env.run(until=env.all_of([computing, storing]))
    return gpu.sync.stream_launch_s + env.now


def _launch(gpu: GpuSpec, mode: str, nodes: int, shape: str | None = None) -> float | None:
    s = gpu.sync
    if mode == "behind_write":         # events around one launch queued behind other work
        return None if shape == "none" else s.stream_launch_s
    if mode in ("gpu_back_to_back", "host_enqueue"):
        return _back_to_back(gpu, s.stream_launch_s)
    if mode == "launch_sync":          # launch call, the kernel, the synchronise call
        return s.launch_api_s + s.kernel_launch_s + s.host_sync_s
    if mode == "graph_100":            # one replay of a graph of `nodes` kernels
        return nodes * s.kernel_launch_s
    if mode == "memcpy_enqueue":
        return s.copy_api_s
    if mode == "event_enqueue":
        return s.event_api_s
    if mode == "graph_launch_sync":
        return s.launch_api_s + nodes * s.kernel_launch_s + s.host_sync_s
    return None


# ---- one point ---------------------------------------------------------------------
def predict_time_s(system: System, record: Mapping[str, Any]) -> float | None:
    """The model's time per operation for one microbenchmark record; None when the
    model has no parameter for it (see MEASURED_ONLY)."""
    gpu = system.gpu
    bench = record["bench"]
    p = record.get("params", {})
    hot = p.get("l2") == "hot"
    if bench == "hbm_copy":
        size = p["size_bytes"]
        if p["engine"] == "ce":
            return _ce_copy(gpu, size, hot)
        return _sm_copy(gpu, size, p.get("blocks", 2 * gpu.sm.count), p.get("threads", 1024),
                        hot)
    if bench == "sm_copy":
        return _sm_copy(gpu, record["bytes"], p["blocks"], p["threads"], hot=False)
    if bench == "tma_copy":
        return _tma_copy(gpu, record["bytes"], p["blocks"], p["msg_bytes"], p["stages"], hot)
    if bench == "tma_reduce":
        return _tma_reduce(gpu, record["bytes"], p["blocks"], p["msg_bytes"], hot)
    if bench in ("block_moves", "block_moves_own"):
        if p.get("flush") == "read" or p.get("order") == "staggered":
            return None  # PARTLY_MEASURED_ONLY
        # "behind_write" records (one launch alone behind a write, as validation times a
        # collective) are the same body from HBM: the launch's start is what back-to-back
        # launches hide
        return _block_move(gpu, record["bytes"], p["mechanism"], p["kind"], p["sources"],
                           p["dests"], p["blocks"], p.get("readers", 1), p.get("groups", 1),
                           hot=p.get("timing") != "behind_write")
    if bench == "block_moves_shift":
        # block_moves --shift S: every source S bytes off the 16-byte grid, the destinations on
        # it (back to back; S = 0: the same sweep's aligned moves)
        return _block_move(gpu, record["bytes"], p["mechanism"], p["kind"], p["sources"],
                           p["dests"], p["blocks"], shifts=(int(p["shift"]),) * p["sources"])
    if bench in ("block_moves_cross", "crossed_sums"):
        # G groups, group g summing part g of all G sources into part g of all G destinations
        # (the two-shot all-reduce's move; "bytes" = one part), registers loading "load_batch"
        # sources a round (default 8: all at once); "dests" = 1: group g sums part g of every
        # source into its own destination (a direct reduce-scatter's ranks). "crossed_sums":
        # the same moves at the parts of block_moves --cross-parts (D83)
        rounds = load_rounds(p["sources"], p.get("load_batch", 8))
        return _block_move(gpu, record["bytes"], p["mechanism"], "reduce", p["sources"],
                           p["dests"], p["blocks"], groups=p["groups"],
                           hot=p.get("timing") != "behind_write", load_rounds=rounds,
                           crossed=p["dests"] == 1)
    if bench == "epilogue_moves":
        # a sum of S sources into D destinations through the epilogue routines ("variant"
        # other than "sum"), back to back, from HBM (64 MiB a destination)
        return _block_move(gpu, record["bytes"], p["mechanism"], "reduce", p["sources"],
                           p["dests"], p["blocks"], epilogue=EPILOGUE_VARIANTS[p["variant"]],
                           elem_bytes=DTYPES[p["dtype"]])
    if bench == "signal_chain":
        if p["sync"] != "ring":
            return None
        return _signal_chain(gpu, record["bytes"], p["mechanism"], p["groups"], p["blocks"],
                             p["steps"])
    if bench in ("fused_pull", "fused_pull_tma"):
        # every rank's blocks sum its rows of the world partials ("bytes" is one partial)
        # into its output ("rs") or into every rank's ("ar"), from HBM behind a write
        w = p["world"]
        mech = "tma" if bench == "fused_pull_tma" else "register"
        return _block_move(gpu, record["bytes"] / w, mech, "reduce", w,
                           w if p["kind"] == "ar" else 1, p["blocks"], groups=w, hot=False,
                           routine="pull", threads=p["threads"])
    if bench == "launch_latency":
        return _launch(gpu, p["mode"], p.get("nodes", 100), p.get("shape"))
    if bench == "ce_burst":
        return _ce_burst(gpu, p["streams"], p["copies_per_stream"], p["copy_bytes"],
                         bool(p.get("kernels")), p.get("order"))
    if bench == "flag_latency":
        return gpu.sync.flag_latency_sys_s if p.get("scope") == "sys" else gpu.sync.flag_latency_s
    if bench == "gemm":
        body = gemm_time_s(gpu, p["m"], p["n"], p["k"], p.get("dtype", "bf16"),
                           sms=p.get("sms") or None)      # a grid limited to fewer SMs
        return gpu.sync.stream_launch_s + body
    if bench == "gemm_store_add":
        if p["epilogue"] == "store_many":
            return None  # PARTLY_MEASURED_ONLY
        if p["epilogue"] == "store":                      # the plain GEMM, as "gemm"
            return gpu.sync.stream_launch_s + gemm_time_s(gpu, p["m"], p["n"], p["k"])
        return _gemm_store_add(gpu, p["m"], p["n"], p["k"], p["dests"])
    if bench == "attention":
        body = attention_time_s(gpu, p["batch"], p["heads"], p["seq"], p["head_dim"],
                                bool(p["causal"]), p.get("dtype", "bf16"))
        return gpu.sync.stream_launch_s + body
    return None


def usable(record: Mapping[str, Any]) -> bool:
    """A record that passed its own check and has a positive time."""
    t = record.get("time_s")
    return (record.get("check") == "ok" and isinstance(t, (int, float)) and t > 0
            and math.isfinite(t))


def predict(system: System, records: Iterable[Mapping[str, Any]]) -> list[PointResult]:
    """Predictions for every usable record (measured-only benchmarks carry a note)."""
    out = []
    for rec in records:
        if not usable(rec):
            continue
        bench = rec["bench"]
        pred = predict_time_s(system, rec)
        note = "" if pred is not None else (
            MEASURED_ONLY.get(bench) or PARTLY_MEASURED_ONLY.get(bench)
            or f"measured only: no model for benchmark {bench!r}")
        out.append(PointResult(bench, dict(rec.get("params", {})), float(rec["time_s"]), pred,
                               rec, note))
    return out


def summarise(points: Iterable[PointResult]) -> dict[str, GroupSummary]:
    """Per benchmark: number of points, median and max |error|, RMS of log(pred/meas)."""
    groups: dict[str, list[PointResult]] = {}
    for pt in points:
        groups.setdefault(pt.bench, []).append(pt)
    out = {}
    for bench, pts in groups.items():
        errs = [abs(p.error) for p in pts if p.error is not None]
        logs = [math.log(p.predicted_s / p.measured_s) for p in pts if p.predicted_s]
        if errs:
            out[bench] = GroupSummary(bench, len(pts), len(errs), statistics.median(errs),
                                      max(errs), math.sqrt(sum(x * x for x in logs) / len(logs)))
        else:
            out[bench] = GroupSummary(bench, len(pts), 0, None, None, None, pts[0].note)
    return out
