"""One cost path per mechanism: how a move or a transfer of each mechanism (copy engine, TMA,
registers, multimem) turns into its flows and its latency.

The path of one move (a generated kernel's phase: ``pksim_core.program.Move``, S sources and D
destinations issued by one rank) through the model:

1. ``pksim_core.mechanisms.flow.move_flow`` asks the move's mechanism (``of(name)``: a
   ``Tma``, ``Register``, ``CopyEngine`` or ``Multimem``) and the topology's paths:
2. the **memory** it reads and writes: each source's HBM (or L2 where resident or just
   written), ``shared_reads`` per byte where other ranks of the GPU read it too; each
   destination's, ``dest_writes`` per byte (the register fan-out);
3. the **links**: ``Topology.gpu_path`` between the issuer and every remote buffer, each
   resource at 1 / the mechanism's NVLink efficiency (crossbars at 1);
4. the **issuing engine**: its SMs (``issue[r]``, capacity communication SMs x the
   mechanism's per-SM rate) at the weight ``capacity / rate``, rate = ``Mechanism.rate_Bps``:
   inside one GPU the kernel profile's time per byte (``time_per_B``: linear in S and D,
   messages, epilogue, shifted sources) meeting the memory through the profile's knee
   (``local_move``, which the microbenchmarks' model calls for the same routines); across
   NVLink the mechanism study's per-SM rates (``far_time_per_B``); or its copy engines
   (``ce[r]``) and the GPU's copy commands (``cecmd``);
5. the **latency** before its bytes flow: the first read (one memory latency inside a GPU,
   the path's ``round_trip_s`` for a remote source, ``one_way_s`` for a remote store), a TMA
   message's round trip across GPUs (``message_s``), the move's buffers and a sum's first
   chunk (``latency_s``), a register sum's further load rounds, a copy's chain and setup;
6. after the phase, its **hand-off** (``flow.phase_sync_s``): the writes drain (the L2
   latency inside a GPU, the path's ``drain_s`` across GPUs, plus the TMA stores' round
   trip), the block's release and a system-scope flag; copy engines' event waits instead.

The collective layer (``pksim_core.collective_model``) adds no latency of its own: it asks
``flow.phase_sync_s``, ``flow.entry_barrier_s`` and ``flow.transfer_sync_s`` and walks the
steps. Every figure of ``gpu.transfer``, ``gpu.transfer_remote``, ``gpu.copy_engine`` and the
kernel profile (``gpu.kernel``), and every path latency, is read in this package, the
hardware's component formulas (``hwmodels.sm``) and the topology (tests/pksim_core/test_cost_path.py).
"""
from __future__ import annotations

from hwmodels.system import GpuSpec
from pksim_core.mechanisms.copy_engine_cost import CopyEngine
from pksim_core.mechanisms.core import Mechanism
from pksim_core.mechanisms.multimem_cost import Multimem
from pksim_core.mechanisms.register_cost import Register
from pksim_core.mechanisms.tma_cost import Tma

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (Tma(), Register(), CopyEngine(),
                                                       Multimem())}
TMA = MECHANISMS["tma"]


def of(name: str) -> Mechanism:
    """The component of mechanism ``name`` (tma, register, copy-engine, multimem)."""
    return MECHANISMS[name]


def routine_mechanism(name: str, routine: str = "") -> Mechanism:
    """The component whose routines a move of mechanism ``name`` runs: the fused kernels'
    pull-reduce (``routine`` "pull") runs in its TMA form for TMA, else by registers."""
    if routine == "pull":
        return MECHANISMS["tma" if name == "tma" else "register"]
    return MECHANISMS[name]


# ---- the generated kernels' moves, by mechanism name ---------------------------------------
def move_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                    far_sources: int = 0, far_dests: int = 0, readers: int = 1,
                    routine: str = "", epilogue: str = "", elem_bytes: float = 2.0,
                    shifts: tuple[int, ...] = ()) -> float:
    """SM time per payload byte of one move on one SM (``Mechanism.time_per_B`` inside one
    GPU; with far buffers its NVLink time, ``Mechanism.far_time_per_B``: D38)."""
    mech = routine_mechanism(mechanism, routine)
    if far_sources > 0 or far_dests > 0:
        return mech.far_time_per_B(gpu, far_sources, far_dests)
    return mech.time_per_B(gpu, sources, dests, reduce, readers, routine, epilogue, elem_bytes,
                           shifts)


def move_Bps(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool, n_sms: float,
             shared_Bps: float | None, far_sources: int = 0, far_dests: int = 0,
             readers: int = 1, routine: str = "", epilogue: str = "",
             elem_bytes: float = 2.0, shifts: tuple[int, ...] = ()) -> float:
    """Combined payload rate of ``n_sms`` SMs doing such moves (``Mechanism.rate_Bps``)."""
    return routine_mechanism(mechanism, routine).rate_Bps(
        gpu, sources, dests, reduce, n_sms, shared_Bps, far_sources, far_dests, readers, routine,
        epilogue, elem_bytes, shifts)


def move_latency_s(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                   block_payload_B: float, routine: str = "", remote: bool = False,
                   far_stores: bool = False, shifts: tuple[int, ...] = ()) -> float:
    """What a move waits beyond its first read (``Mechanism.latency_s``)."""
    return of(mechanism).latency_s(gpu, sources, dests, reduce, block_payload_B, routine,
                                   remote, far_stores, shifts)


def register_load_rounds(gpu: GpuSpec, reduce: bool, sources: int, shifts: tuple[int, ...] = (),
                         rounds: int = 1) -> int:
    """Rounds in which a register sum loads its sources (``Register.load_rounds``)."""
    return MECHANISMS["register"].load_rounds(gpu, reduce, sources, shifts, rounds)


def epilogue_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, epilogue: str,
                        elem_bytes: float = 2.0) -> float:
    """SM time per byte a reduce op or an epilogue adds to a sum (D56)."""
    return of(mechanism).epilogue_s_per_B(gpu, sources, epilogue, elem_bytes)


def shift_time_per_B(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                     shifts: tuple[int, ...] = ()) -> float:
    """SM time per byte shifted sources add to a move inside one GPU (D63)."""
    return of(mechanism).shift_s_per_B(gpu, sources, dests, reduce, shifts)


def word_l2_Bps(gpu: GpuSpec, mechanism: str, sources: int, dests: int, reduce: bool,
                shifts: tuple[int, ...] = ()) -> float:
    """The payload rate the L2 allows a move's word loads (D63; unbounded for TMA)."""
    return of(mechanism).word_l2_Bps(gpu, sources, dests, reduce, shifts)


def tma_fill_s(gpu: GpuSpec, block_payload_B: float, sources: int, remote: bool = False) -> float:
    """What a TMA sum waits for its first chunk of every source (``Tma.fill_s``, D14)."""
    return TMA.fill_s(gpu, block_payload_B, sources, remote)


def tma_latency_s(gpu: GpuSpec, remote: bool = False) -> float:
    """Round trip of one TMA message (``Tma.message_s``)."""
    return TMA.message_s(gpu, remote)


def shared_reads(gpu: GpuSpec, mechanism: str, readers: int, payload_B: float) -> float:
    """Memory reads per payload byte of a source ``readers`` moves read at once (D19)."""
    return of(mechanism).shared_reads(gpu, readers, payload_B)


def dest_writes(gpu: GpuSpec, mechanism: str, dests: int, payload_B: float) -> float:
    """Memory capacity one destination byte of a move uses (D20)."""
    return of(mechanism).dest_writes(gpu, dests, payload_B)


def move_traffic(gpu: GpuSpec, mechanism: str, sources: int, dests: int, readers: int,
                 payload_B: float, ceiling: bool = True) -> float:
    """Memory capacity a move uses per payload byte (``Mechanism.traffic``)."""
    return of(mechanism).traffic(gpu, sources, dests, readers, payload_B, ceiling)


def move_fixed_latency_s(gpu: GpuSpec, sources: int, dests: int, nvlink: bool = False) -> float:
    """Latency a move adds for its buffers (``Mechanism.buffers_latency_s``, D13)."""
    return MECHANISMS["register"].buffers_latency_s(gpu, sources, dests, nvlink)


def epilogue_handoff_s(gpu: GpuSpec, nbytes: float, sms: float, reduce: bool = True) -> float:
    """How long the SMs stop computing to hand a GEMM epilogue's tiles to their bulk engines
    (``Tma.epilogue_handoff_s``, D34)."""
    return TMA.epilogue_handoff_s(gpu, nbytes, sms, reduce)
