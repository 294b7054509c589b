"""TMA: bulk asynchronous copies through shared memory (cp.async.bulk), one issuing thread a
block; what its moves cost beyond the register routines' (``pksim_core.mechanisms.core``)."""
from __future__ import annotations

from hwmodels.sm import sm_issue_Bps
from hwmodels.system import GpuSpec
from pksim_core.kernel_contract import TMA_STAGE_BYTES
from pksim_core.mechanisms.core import INF, Mechanism
from pksim_core.move_cuts import source_reads, tma_messages_per_B
from pksim_core.shifts import shifted_sources


class Tma(Mechanism):
    name = "tma"
    form = "tma"

    def per_sm_Bps(self, gpu: GpuSpec, remote: bool, direction: str = "write") -> float:
        if remote:
            return gpu.transfer_remote.per_sm_Bps(self.name, direction)
        return gpu.transfer.tma_local_Bps_per_sm

    def message_s(self, gpu: GpuSpec, remote: bool = False) -> float:
        """Round trip of one TMA message: ``tma_message_half_bytes`` is the message size at
        which one SM reaches half its rate, i.e. latency x per-SM rate; ``remote``: a message
        to another GPU (gpu.transfer_remote: the mechanism study's message-size curve), else
        inside the GPU (gpu.transfer, fitted on one GPU)."""
        if remote:
            r = gpu.transfer_remote
            return r.tma_message_half_B / r.tma_write_Bps_per_sm if r.tma_write_Bps_per_sm > 0 \
                else 0.0
        t = gpu.transfer
        rate = t.tma_local_Bps_per_sm
        return t.tma_message_half_B / rate if rate > 0 else 0.0

    def terms(self, gpu: GpuSpec) -> tuple[float, float, float, float]:
        k = gpu.kernel
        return (k.tma_move_base_s_per_B, k.tma_move_dest_s_per_B, k.tma_move_reduce_s_per_B,
                k.tma_move_source_s_per_B)

    def pull_terms(self, gpu: GpuSpec) -> tuple[float, float, float]:
        k = gpu.kernel
        return (k.pull_tma_move_base_s_per_B, k.pull_tma_move_source_s_per_B,
                k.pull_tma_move_dest_s_per_B)

    def shared_read(self, gpu: GpuSpec) -> float:
        return gpu.kernel.tma_shared_read

    def knee(self, gpu: GpuSpec, reduce: bool) -> float:
        """TMA sums meet the memory through their own bend: they stay bound by the blocks
        closer to the memory's limit than copies do."""
        return gpu.kernel.tma_move_reduce_knee if reduce else gpu.kernel.move_knee

    def staged(self, reduce: bool, shifts: tuple[int, ...] = ()) -> bool:
        """A TMA sum, or a TMA copy of a shifted source, which runs the one-source staged sum
        (moves.cuh tma_copy_shifted) and is costed as one (D63)."""
        return reduce or any(shifts)

    def messages_s_per_B(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool) -> float:
        """The profile's time per bulk load or store, their count per byte growing as
        (S + D)(S + 1) for a sum (pksim_core.move_cuts.tma_messages_per_B; D21)."""
        return gpu.kernel.tma_message_s * tma_messages_per_B(sources, dests, reduce)

    def epilogue_s_per_B(self, gpu: GpuSpec, sources: int, epilogue: str,
                         elem_bytes: float) -> float:
        """The op and the scale run on the stage as the sum does (no term); a bias is read by
        16-byte vectors and waited for in every stage chunk, S + 1 chunks a stage (D56)."""
        if not epilogue or sources <= 0:
            return 0.0
        return gpu.kernel.tma_move_bias_s * (sources + 1) / TMA_STAGE_BYTES \
            if epilogue == "bias" else 0.0

    def shift_s_per_B(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                      shifts: tuple[int, ...]) -> float:
        """Each shifted source loaded one vector longer and realigned in the stage: the
        profile's tma_move_realign per shifted source and read (D63)."""
        if not any(shifts):
            return 0.0
        return gpu.kernel.tma_move_realign_s_per_B * source_reads(shifted_sources(shifts), dests,
                                                                  reduce)

    def cross_s_per_B(self, gpu: GpuSpec, sources: int, reduce: bool, crossed: bool) -> float:
        """A TMA sum read crossed: the profile's tma_move_cross per summed source (D83)."""
        return gpu.kernel.tma_move_cross_s_per_B * sources if reduce and crossed else 0.0

    def word_l2_Bps(self, gpu: GpuSpec, sources: int, dests: int, reduce: bool,
                    shifts: tuple[int, ...] = ()) -> float:
        return INF                        # bulk loads use every sector byte they fetch

    def fill_s(self, gpu: GpuSpec, block_payload_B: float, sources: int,
               remote: bool = False) -> float:
        """What a TMA sum waits before its first bulk store: its first chunk of every source (a
        stage slot, or the block's whole payload if smaller) at the SM's TMA rate (D14);
        ``remote``: loaded from other GPUs at gpu.transfer_remote.tma_read_per_sm_GBps."""
        rate = (gpu.transfer_remote.tma_read_Bps_per_sm if remote
                else gpu.transfer.tma_local_Bps_per_sm)
        if rate <= 0 or block_payload_B <= 0:
            return 0.0
        return sources * min(block_payload_B, TMA_STAGE_BYTES / (sources + 1)) / rate

    def load_rounds(self, gpu: GpuSpec, reduce: bool, sources: int,
                    shifts: tuple[int, ...] = (), rounds: int = 1) -> int:
        return 1                          # bulk loads are not issued in rounds

    def shared_reads(self, gpu: GpuSpec, readers: int, payload_B: float) -> float:
        """TMA readers of large payloads drift apart and miss the L2 on a growing share of
        their repeats, payload / (payload + the profile's tma_shared_reuse) (D19)."""
        if readers <= 1:
            return 1.0
        miss = payload_B / (payload_B + gpu.kernel.tma_shared_reuse_B) if payload_B > 0 else 0.0
        return 1.0 / readers + (1.0 - 1.0 / readers) * miss

    def dest_writes(self, gpu: GpuSpec, dests: int, payload_B: float) -> float:
        return 1.0                        # bulk stores to several destinations: no fan-out cost

    def reduce_stream_Bps(self, gpu: GpuSpec, n_sms: float, message_B: float | None) -> float:
        """Fire-and-forget bulk reducing stores into the GPU's memory on ``n_sms`` SMs: issue-
        bound per message (gpu.transfer.tma_reduce_issue_ns), no knee: they press the memory
        to its limit, the fluid engine's hard minimum with it."""
        t = gpu.transfer
        return sm_issue_Bps(t.tma_reduce_Bps_per_sm, n_sms, t.issue_knee, None, message_B,
                            issue_s=t.tma_reduce_issue_s)

    def reduce_issue_capacity(self, gpu: GpuSpec, sms: float) -> float:
        """What ``sms`` SMs' bulk reducing stores issue at most (gpu.transfer.tma_reduce)."""
        return gpu.transfer.tma_reduce_Bps_per_sm * sms

    def epilogue_handoff_s(self, gpu: GpuSpec, nbytes: float, sms: float,
                           reduce: bool = True) -> float:
        """How long ``sms`` SMs stop computing to hand ``nbytes`` of a GEMM epilogue's staged
        tiles to their bulk engines: the engines read them out at transfer.tma_reduce_per_sm
        (store-adds) or tma_local_per_sm (stores) each, and the consumers wait for that
        before they stage the next tile (kernels/gemm/gemm.cuh; D34)."""
        t = gpu.transfer
        rate = t.tma_reduce_Bps_per_sm if reduce else t.tma_local_Bps_per_sm
        return nbytes / (rate * sms)

    def handoff_extra_s(self, gpu: GpuSpec, remote: bool) -> float:
        """What a phase's bulk stores add to its drain: across GPUs they complete after a
        message's round trip (pk::tma::complete_writes); inside one GPU the L2 has them."""
        return self.message_s(gpu, remote=True) if remote else 0.0
