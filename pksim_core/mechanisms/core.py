"""A transfer mechanism's cost: the one class every mechanism's component derives from.

``Mechanism`` holds what every mechanism's moves share: a move of the generated kernels reads
S sources and writes D destinations; inside one GPU its SMs spend the kernel profile's time
per byte on it, linear in S and D (``time_per_B``), and meet the memory through the profile's
knee (``rate_Bps``); it waits for its buffers (``latency_s``). What differs per mechanism (its
figures: per-SM rates, the profile's terms, messages, a sum's first chunk, word loads, the
fan-out, a shared source's misses) is a hook each subclass gives (``pksim_core.mechanisms.tma_cost``,
``register``, ``copy_engine``, ``multimem``). Every figure of ``gpu.transfer``,
``gpu.transfer_remote``, ``gpu.copy_engine`` and the kernel profile (``gpu.kernel``) that a
move's cost needs is read here or in a subclass (tests/pksim_core/test_cost_path.py).
"""
from __future__ import annotations

import math

from hwmodels.sm import sm_issue_Bps
from hwmodels.system import GpuSpec
from pksim_core.kernel_contract import REG_TWO_VECTOR_SOURCES, SET_SLOTS
from pksim_core.move_cuts import source_reads
from pksim_core.shifts import VECTOR_BYTES, lean_shifted_sums, word_bytes

INF = float("inf")


class Mechanism:
    """The cost of one mechanism's moves and transfers. The hooks below are the register
    routines' (16-byte loads and stores by the SMs), which every SM move that is not TMA's
    runs (a copy-engine schedule's reduction kernels, the register form of the pull-reduce);
    ``Tma`` gives its own."""
    name = ""
    engine = "sm"              # what issues its moves: "sm" (the SMs) or "ce" (copy engines)
    form = "register"          # which of the profile's move forms it runs: "tma" or "register"

    # ---- hardware: the issuing engine ---------------------------------------------------
    def per_sm_Bps(self, gpu: GpuSpec, remote: bool, direction: str = "write") -> float:
        """One SM's payload rate: to or from another GPU over NVLink (``remote``:
        gpu.transfer_remote, the mechanism study, in ``direction`` read, write or reduce), or
        inside its GPU (gpu.transfer, fitted on one GPU)."""
        if remote:
            return gpu.transfer_remote.per_sm_Bps(self.name, direction)
        return gpu.transfer.ldst_local_Bps_per_sm

    def message_s(self, gpu: GpuSpec, remote: bool = False) -> float:
        """Round trip of one message (0: a stream of loads and stores, no messages)."""
        return 0.0

    def issue_capacity(self, gpu: GpuSpec, sms: int, remote: bool) -> float:
        """Bytes per second one rank's engine issues with ``sms`` communication SMs."""
        return sms * self.per_sm_Bps(gpu, remote)

    def stream_Bps(self, gpu: GpuSpec, n_sms: float, shared_Bps: float | None,
                   message_B: float | None = None, remote: bool = False,
                   direction: str = "write", in_flight: float = 1.0,
                   per_sm_Bps: float | None = None) -> float:
        """Combined payload rate of ``n_sms`` SMs streaming a plain transfer by this mechanism
        (hwmodels.sm.sm_issue_Bps): its per-SM rate (``per_sm_Bps``, else the hardware's),
        bending at gpu.transfer.issue_knee towards the memory they share (``shared_Bps``;
        None: not shared), a message's round trip per ``message_B`` where it sends messages."""
        rate = self.per_sm_Bps(gpu, remote, direction) if per_sm_Bps is None else per_sm_Bps
        latency = self.message_s(gpu, remote) if message_B is not None else 0.0
        return sm_issue_Bps(rate, n_sms, gpu.transfer.issue_knee, shared_Bps, message_B,
                            latency, in_flight)

    def handoff_extra_s(self, gpu: GpuSpec, remote: bool) -> float:
        """What a phase's writes add to their drain beyond the path (none for plain stores)."""
        return 0.0

    # ---- the kernel profile: a move's SM time inside one GPU (hooks) ----------------------
    def terms(self, gpu: GpuSpec) -> tuple[float, float, float, float]:
        """(base, dest, reduce, source) SM seconds per payload byte of the routines."""
        k = gpu.kernel
        return (k.ldst_move_base_s_per_B, k.ldst_move_dest_s_per_B, k.ldst_move_reduce_s_per_B,
                k.ldst_move_source_s_per_B)

    def pull_terms(self, gpu: GpuSpec) -> tuple[float, float, float]:
        """(base, source, dest) of the fused kernels' pull-reduce in this mechanism's form."""
        k = gpu.kernel
        return k.pull_move_base_s_per_B, k.pull_move_source_s_per_B, k.pull_move_dest_s_per_B

    def shared_read(self, gpu: GpuSpec) -> float:
        return gpu.kernel.ldst_shared_read

    def knee(self, gpu: GpuSpec, reduce: bool) -> float:
        return gpu.kernel.move_knee

    def staged(self, reduce: bool, shifts: tuple[int, ...] = ()) -> bool:
        """Whether the move runs a staged path (a TMA sum, or a TMA copy of a shifted source)."""
        return False

    def messages_s_per_B(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool) -> float:
        return 0.0

    def epilogue_s_per_B(self, gpu: GpuSpec, sources: int, epilogue: str,
                         elem_bytes: float) -> float:
        """SM time per payload byte a reduce op or an epilogue adds to a sum of ``sources``
        (kernels/collectives/epilogue.cuh, D56): the register routines keep one vector a
        source in flight where the plain sum keeps two (up to REG_TWO_VECTOR_SOURCES sources),
        the profile's ldst_move_epilogue / S there; a bias is read per element."""
        if not epilogue or sources <= 0:
            return 0.0
        k = gpu.kernel
        out = k.ldst_move_epilogue_s_per_B / sources if sources <= REG_TWO_VECTOR_SOURCES else 0.0
        if epilogue == "bias" and elem_bytes > 0:
            out += k.ldst_move_bias_s_per_elem / elem_bytes
        return out

    def shift_s_per_B(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                      shifts: tuple[int, ...]) -> float:
        """SM time per payload byte that sources off the destinations' 16-byte grid add (D63):
        every source read in words of W bytes, 16 / W loads a vector where an aligned one
        takes 1: the profile's ldst_move_word per further load, per source read."""
        if not any(shifts):
            return 0.0
        return (gpu.kernel.ldst_move_word_s_per_B * source_reads(sources, dests, reduce)
                * (VECTOR_BYTES // word_bytes(shifts) - 1))

    def cross_s_per_B(self, gpu: GpuSpec, sources: int, reduce: bool, crossed: bool) -> float:
        """SM time per payload byte a sum whose sources are read crossed adds (each group of
        blocks its own part of every source; D83): none for the register routines."""
        return 0.0

    def word_l2_Bps(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                    shifts: tuple[int, ...] = ()) -> float:
        """The payload rate the L2 allows a move whose sources are read in W-byte words: each
        word load fetches every 32-byte sector of its lanes' 16-byte vectors, so a source read
        moves 16 / W times its bytes out of the L2, besides a byte per destination, at the
        profile's ldst_word_l2 rate (D63); unbounded for aligned moves."""
        if not any(shifts):
            return INF
        sectors = source_reads(sources, dests, reduce) * VECTOR_BYTES / word_bytes(shifts) + dests
        return gpu.kernel.ldst_word_l2_Bps / sectors

    def fill_s(self, gpu: GpuSpec, block_payload_B: float, sources: int,
               remote: bool = False) -> float:
        """What a sum waits for its first chunk of every source before it stores: a register
        sum stores each vector as its loads return (none, D14)."""
        return 0.0

    def load_rounds(self, gpu: GpuSpec, reduce: bool, sources: int,
                    shifts: tuple[int, ...] = (), rounds: int = 1) -> int:
        """Rounds in which a register sum loads its sources: ``rounds`` (Move.load_rounds), or,
        for a shifted sum on sm_100 and later, one source a round (moves.cuh
        kLeanShiftedSums), each further round waiting the profile's load_round (D24, D63)."""
        if reduce and any(shifts) and lean_shifted_sums(gpu.architecture):
            return max(rounds, sources)
        return rounds

    def shared_reads(self, gpu: GpuSpec, readers: int, payload_B: float) -> float:
        """Memory reads per payload byte of a source that ``readers`` moves of one GPU read
        at once: once from memory and from the L2 for the other readers (D19)."""
        return 1.0 if readers <= 1 else 1.0 / readers

    def dest_writes(self, gpu: GpuSpec, dests: int, payload_B: float) -> float:
        """Memory capacity one destination byte uses: register stores to several
        destinations meet the memory less well the larger the payload, by the profile's
        ldst_fanout_write x log2(dests) x payload / (payload + ldst_fanout_reach) (D20)."""
        if dests <= 1 or payload_B <= 0:
            return 1.0
        k = gpu.kernel
        share = payload_B / (payload_B + k.ldst_fanout_reach_B)
        return 1.0 + k.ldst_fanout_write * math.log2(dests) * share

    # ---- a move's cost, the same for every mechanism ------------------------------------
    def time_per_B(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                   readers: int = 1, routine: str = "", epilogue: str = "",
                   elem_bytes: float = 2.0, shifts: tuple[int, ...] = (),
                   crossed: bool = False) -> float:
        """SM time per payload byte of one of the generated kernels' moves inside one GPU:
        linear in S and D (the profile's terms), a source shared by ``readers`` moves costing
        the other readers only the profile's share, plus the mechanism's messages, its
        epilogue's, its shifted sources' and its crossed reads' (``crossed``) terms; ``routine`` "pull": the fused kernels'
        pull-reduce at its own terms. A copy to more than SET_SLOTS destinations runs as
        copy_list does, one whole move per SET_SLOTS of them (D64)."""
        if routine == "pull":
            base, source, dest = self.pull_terms(gpu)
            return base + source * sources + dest * dests
        if not reduce and dests > SET_SLOTS:   # copy_list: a whole move per batch of destinations
            full, rest = divmod(dests, SET_SLOTS)
            return sum(n * self.time_per_B(gpu, sources, d, False, readers=readers,
                                           shifts=shifts)
                       for n, d in ((full, SET_SLOTS), (1, rest)) if n and d)
        reduce = reduce or self.staged(reduce, shifts)     # a shifted TMA copy: S = 1
        base, dest, red, src = self.terms(gpu)
        if readers > 1:
            share = self.shared_read(gpu)
            src *= (1 + (readers - 1) * share) / readers
        tau = base + dest * dests + ((red + src * sources) if reduce else 0.0)
        tau += self.messages_s_per_B(gpu, sources if reduce else 1, dests, reduce)
        if reduce:
            tau += self.epilogue_s_per_B(gpu, sources, epilogue, elem_bytes)
            tau += self.cross_s_per_B(gpu, sources, reduce, crossed)
        return tau + self.shift_s_per_B(gpu, sources, dests, reduce, shifts)

    def far_time_per_B(self, gpu: GpuSpec, far_sources: int, far_dests: int) -> float:
        """SM time per payload byte of a move's buffers on other GPUs: each far source at the
        mechanism's NVLink read rate per SM, each far destination at its write rate
        (gpu.transfer_remote, the mechanism study); 0 without far buffers."""
        if far_sources <= 0 and far_dests <= 0:
            return 0.0
        read, write = self.per_sm_Bps(gpu, True, "read"), self.per_sm_Bps(gpu, True, "write")
        if (far_sources and read <= 0) or (far_dests and write <= 0):
            return INF
        return (far_sources / read if far_sources else 0.0) + \
            (far_dests / write if far_dests else 0.0)

    def rate_Bps(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool, n_sms: float,
                 shared_Bps: float | None, far_sources: int = 0, far_dests: int = 0,
                 readers: int = 1, routine: str = "", epilogue: str = "",
                 elem_bytes: float = 2.0, shifts: tuple[int, ...] = (),
                 crossed: bool = False) -> float:
        """Combined payload rate of ``n_sms`` SMs doing such moves, meeting the memory they
        all use (payload capacity ``shared_Bps``) through the profile's knee; a move with a
        buffer on another GPU at the NVLink rates, no knee (D38)."""
        if far_sources > 0 or far_dests > 0:
            tau = self.far_time_per_B(gpu, far_sources, far_dests)
        else:
            tau = self.time_per_B(gpu, sources, dests, reduce, readers, routine, epilogue,
                                  elem_bytes, shifts, crossed)
            if shared_Bps is not None:
                shared_Bps = min(shared_Bps, self.word_l2_Bps(gpu, sources, dests, reduce,
                                                              shifts))
        if tau <= 0:
            return INF if shared_Bps is None else shared_Bps
        return sm_issue_Bps(1.0 / tau, n_sms, self.knee(gpu, reduce), shared_Bps)

    def buffers_latency_s(self, gpu: GpuSpec, sources: int, dests: int,
                          nvlink: bool = False) -> float:
        """Latency a move adds for its buffers, beyond its first read: the profile's per
        buffer beyond one source and one destination (across NVLink its own figure, D38), and
        its latency of a set of destinations whose count the compiler does not know (a move
        to one destination passes pkc::one; D13)."""
        k = gpu.kernel
        per_buffer = k.nvlink_buffer_latency_s if nvlink else k.move_buffer_latency_s
        return (sources + dests - 2) * per_buffer + (k.dest_set_latency_s if dests > 1 else 0.0)

    def latency_s(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                  block_payload_B: float, routine: str = "", remote: bool = False,
                  far_stores: bool = False, shifts: tuple[int, ...] = ()) -> float:
        """What a move waits beyond its first read, for a block moving ``block_payload_B``: its
        buffers and, for a staged sum of the collectives' routines, its first chunk's loads
        (``remote``: from another GPU). The pull-reduce's own fit carries its wait; a sum
        that stores to another GPU from near sources (``far_stores``: a ring's step) loads in
        the shadow of its far stores (D38)."""
        latency = self.buffers_latency_s(gpu, sources, dests, nvlink=remote or far_stores)
        if self.staged(reduce, shifts) and routine != "pull" and not far_stores:
            latency += self.fill_s(gpu, block_payload_B, sources, remote)
        return latency

    def traffic(self, gpu: GpuSpec, sources: int, dests: int, readers: int, payload_B: float,
                ceiling: bool = True) -> float:
        """Memory capacity a move uses per payload byte: its sources' reads and its
        destinations' writes. ``ceiling=False``: the plain traffic (each shared source once
        over its readers), what the SMs' requests queue behind and so what the knee sees; the
        TMA readers' misses and the register fan-out lower the ceiling only (D19, D20)."""
        if not ceiling:
            return sources / max(1, readers) + dests
        return (sources * self.shared_reads(gpu, readers, payload_B)
                + dests * self.dest_writes(gpu, dests, payload_B))

    def local_rate_Bps(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                       n_sms: float, memory_Bps: float, payload_B: float, readers: int = 1,
                       cold_sources: int | None = None, routine: str = "", epilogue: str = "",
                       elem_bytes: float = 2.0, shifts: tuple[int, ...] = (),
                       crossed: bool = False) -> float:
        """The combined payload rate of ``n_sms`` blocks' worth of SMs (every rank's on the GPU
        that move together) doing a move inside one GPU over a memory of ``memory_Bps``: the
        SMs meet the memory's plain traffic (``cold_sources`` of the sources from memory, the
        rest from the L2) through the profile's knee. The simulator
        (pksim_core.mechanisms.flow.move_flow) and the microbenchmarks' model
        (pksim_core.microbench_model) both cost a local move so."""
        cold = sources if cold_sources is None else cold_sources
        queued = self.traffic(gpu, cold, dests, readers, payload_B, ceiling=False)
        return self.rate_Bps(gpu, sources, dests, reduce, n_sms, memory_Bps / queued,
                             readers=readers, routine=routine, epilogue=epilogue,
                             elem_bytes=elem_bytes, shifts=shifts, crossed=crossed)

    def rounds_latency_s(self, gpu: GpuSpec, reduce: bool, sources: int,
                         shifts: tuple[int, ...] = (), rounds: int = 1) -> float:
        """What a sum loading its sources in rounds waits for the further rounds: the
        profile's load_round each (D24); none for a mechanism without rounds."""
        return (self.load_rounds(gpu, reduce, sources, shifts, rounds) - 1) \
            * gpu.kernel.load_round_s
