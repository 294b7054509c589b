"""Copy engines: cudaMemcpyAsync by the GPU's DMA engines, one stream per (virtual) rank;
what a copy costs beyond its bytes (setup, the GPU's copy commands, the streams' chains and
event waits, the host's calls), as the generated copy-engine collectives issue them
(kernels/collectives/entry.cuh run_copy_engine; docs/decisions/D7.md to D9.md)."""
from __future__ import annotations

from hwmodels.system import GpuSpec, SyncSpec
from hwmodels.topology import ResourceName, Topology, resource
from pksim_core.mechanisms.core import Mechanism
from pksim_core.program import StepProgram


class CopyEngine(Mechanism):
    name = "copy-engine"
    engine = "ce"

    def issue_capacity(self, gpu: GpuSpec, sms: int, remote: bool) -> float:
        """Every copy engine of the GPU at one engine's rate (gpu.copy_engine)."""
        return gpu.copy_engine.count * gpu.copy_engine.bandwidth_Bps

    def copy_setup_s(self, gpu: GpuSpec, virtual: bool) -> float:
        """What a copy waits before its bytes flow: between GPUs the NVLink figure
        (gpu.transfer_remote.copy_engine_setup_us, the study's message-size curve), inside one
        GPU (virtual ranks) the fitted local one (gpu.copy_engine.setup_latency_us)."""
        return gpu.copy_engine.setup_s if virtual else gpu.transfer_remote.copy_engine_setup_s

    def launch_s(self, topo: Topology) -> float:
        """A copy-engine collective launches no kernel: the first copy waits for the engine's
        setup (which ce_burst measures behind queued work) where later ones pay the chain, and
        the first copy on each further stream of a GPU (its virtual ranks' streams) its start."""
        gpu = topo.system.gpu
        launch = max(0.0, self.copy_setup_s(gpu, topo.virtual) - gpu.sync.stream_chain_s)
        return launch + ((topo.world if topo.virtual else 1) - 1) * gpu.copy_engine.stream_start_s

    def command_weight(self, gpu: GpuSpec, payload_B: float) -> float:
        """Seconds of the GPU's copy commands one payload byte of a copy holds: its command
        (command_us) and its bytes at one engine's rate, one copy after another (as
        pksim_core.microbench_model's ce_burst adds them)."""
        return gpu.copy_engine.command_s / payload_B + 1.0 / gpu.copy_engine.bandwidth_Bps

    def burst_s(self, gpu: GpuSpec, streams: int, per_stream: int, copy_bytes: float,
                kernels: bool = False, order: str | None = None) -> float:
        """``per_stream`` copies (each followed by a one-block kernel with ``kernels``) queued
        on each of ``streams`` streams, GPU time from the first to the last: the first copy
        waits for the engine's setup, each further copy for its copy command (the first on
        each further stream longer: stream_start more) and each kernel for its launch, one
        after another, and every operation behind another on its stream for that one to
        finish (the chain). In rounds (``order``), before every round but the first each
        stream waits on the event the previous stream recorded ("ring") or on those of every
        other stream ("all"): each wait holds the GPU for event_wait, one after another."""
        ce, sync = gpu.copy_engine, gpu.sync
        copies = streams * per_stream
        t = (ce.setup_s + (copies - 1) * ce.command_s + (streams - 1) * ce.stream_start_s
             + (per_stream - 1) * sync.stream_chain_s + copies * copy_bytes / ce.bandwidth_Bps)
        if kernels:
            t += copies * sync.kernel_launch_s + per_stream * sync.stream_chain_s
        if order is not None and streams > 1:
            waits = streams * ((streams - 1) if order == "all" else 1)
            t += (per_stream - 1) * waits * sync.event_wait_s
        return t


def commands(topo: Topology, rank: int) -> ResourceName:
    """The copy-command queue of the GPU ``rank`` runs on (one for all virtual ranks)."""
    return resource("cecmd", 0 if topo.virtual else rank)


def event_waits(algorithm: str, world: int) -> int:
    """Event waits between two phases of a copy-engine collective: every rank's stream on
    every other rank's event (kCeSync all), or on the previous rank's in a ring."""
    return world if algorithm == "ring" else world * (world - 1)


def waits_s(sync: SyncSpec, algorithm: str, topo: Topology) -> float:
    """GPU time of the event waits between two phases in virtual ranks (entry.cuh
    run_copy_engine): one after another on the GPU's front-end (sync.event_wait_us, measured
    by ce_burst's rounds). Ranks on separate GPUs wait on their own GPU each: none here."""
    if not topo.virtual:
        return 0.0
    return event_waits(algorithm, topo.world) * sync.event_wait_s


def host_issue_s(sync: SyncSpec, algorithm: str, program: StepProgram) -> tuple[float, ...]:
    """When the host has issued the last call of each phase of a generated copy-engine
    collective (entry.cuh run_copy_engine), from its first call: a cudaMemcpyAsync per copy
    and a launch per reduction kernel; an event recorded on every rank's stream after each
    phase that joins the ranks (Step.joins), and before the next phase waits on them
    (event_waits); one record + a wait per rank to fork from the caller's stream first and a
    wait per rank to join it last. ``event_api_us`` is a record + wait pair: half of it per
    call (docs/decisions/D7.md)."""
    w = program.world
    waits = event_waits(algorithm, w)
    now = (1 + w) * sync.event_api_s / 2            # fork: a record, a wait per rank
    issued = []
    for i, phase in enumerate(program.phases):
        if i > 0 and program.phases[i - 1].joins:
            now += waits * sync.event_api_s / 2
        for m in phase.moves() or ():
            now += sync.launch_api_s if m.engine == "sm" else sync.copy_api_s
        if phase.joins:
            now += w * sync.event_api_s / 2         # a record per rank after the phase
        issued.append(now)
    issued[-1] += w * sync.event_api_s / 2          # join: a wait per rank
    return tuple(issued)
