"""The SM's component models: how fast a group of SMs issues transfers, and how fast
its tensor cores run a GEMM or an attention of a given shape.

These are the formulas that both the simulator and the microbenchmarks' model
(``pksim_core.microbench_model``) use, each mechanism's component on top of them
(``pksim_core.mechanisms``: what one move or transfer of a mechanism costs, the generated
kernels' moves included); calibration fits their parameters, which live in the system file
(``gpu.transfer``, ``gpu.tensor``) and the kernel profile (``gpu.kernel``).

Issue model (all rates are payload bytes per second):

* ``n`` SMs that each could stream at ``per_sm`` and that all feed one shared
  resource of payload capacity ``shared`` (the memory, for a local copy) reach
  ``soft_min(n * per_sm, shared, knee)`` together, where
  ``soft_min(a, b, p) = (a**-p + b**-p) ** (-1/p)``: far from the memory limit the
  SMs' sum, near it a smooth bend (requests queue in the memory system well before
  it saturates), never above either. ``knee`` is ``gpu.transfer.issue_knee``.
* A message-based mechanism (TMA) pays a round trip per message: a message of
  ``m`` bytes takes ``latency + m / r_eff`` where ``r_eff`` is the SM's share of the
  combined rate above; ``in_flight`` messages overlap.
* An issue-bound mechanism (reducing bulk stores) spends at least ``issue_s`` per
  message: ``m / max(issue_s, m / r_eff)``. Fire-and-forget, it presses the memory to
  its limit: callers give it no shared resource (no knee) and let the fluid engine's
  hard minimum with the memory apply.

Memory weight: a reduction's read-modify-write runs HBM at ``hbm.reduce_efficiency``.

Tensor model: a GEMM of shape (M, N, K) runs at
``peak x gemm_efficiency x waves x K / (K + gemm_k_overhead)``, waves being the
quantisation of 128x256 output tiles over the SMs; memory time is its operand
traffic over HBM; the two meet through the same soft knee; a kernel that runs longer
than ``sustained_after_us`` settles at ``sustained_fraction`` of that rate (the power
limit lowers the clock). On ``n`` of the GPU's ``N`` SMs the peak is ``n / N`` of the
GPU's and the settled fraction ``min(1, sustained_fraction x (N / n) ** sustained_sm_exponent)``:
the same power limit spread over fewer busy SMs lowers the clock less (dynamic power
~ n f V^2; an exponent of 1/3 is V ~ f with no static power; calibrated on the pk GEMM
limited to fewer SMs).
"""
from __future__ import annotations

import math

from hwmodels.system import GpuSpec

# Output tile of a Hopper GEMM (128 x 256, the schedules' default tile); a structural
# constant of the kernel, not a fitted figure.
GEMM_TILE = (128, 256)


def soft_min(a: float, b: float, knee: float) -> float:
    """A smooth minimum of two positive rates; ``knee`` -> infinity is the hard min."""
    if a <= 0 or b <= 0:
        return 0.0
    lo, hi = min(a, b), max(a, b)
    return lo * (1.0 + (lo / hi) ** knee) ** (-1.0 / knee)


def soft_max(a: float, b: float, knee: float) -> float:
    """A smooth maximum of two times (the roofline with a knee)."""
    lo, hi = min(a, b), max(a, b)
    if hi <= 0:
        return 0.0
    return hi * (1.0 + (lo / hi) ** knee) ** (1.0 / knee)


def sm_issue_Bps(per_sm_Bps: float, n_sms: float, knee: float, shared_Bps: float | None = None,
                 message_B: float | None = None, latency_s: float = 0.0,
                 in_flight: float = 1.0, issue_s: float = 0.0) -> float:
    """Combined payload rate of ``n_sms`` SMs issuing transfers (see the module text).

    ``shared_Bps``: payload capacity of the resource they all feed (None: not shared,
    no knee). ``message_B``: message size of a message-based mechanism (None: a
    stream, e.g. ld/st). ``latency_s``: round trip per message. ``issue_s``: minimum
    issue time per message."""
    if n_sms <= 0 or per_sm_Bps <= 0:
        return 0.0
    total = n_sms * per_sm_Bps
    if shared_Bps is not None:
        total = soft_min(total, shared_Bps, knee)
    r_eff = total / n_sms
    if message_B is None or message_B <= 0:
        return total
    per_message_s = max(latency_s + message_B / r_eff, issue_s)
    per_sm = min(in_flight * message_B / per_message_s, r_eff)
    return n_sms * per_sm


def grid_start_s(gpu: GpuSpec, blocks: int, threads: int) -> float:
    """What starting a grid of ``blocks`` of ``threads`` adds to a generated kernel launched
    alone: ``transfer.move_start_ns``, and ``transfer.thread_start_ps`` per thread of every
    block beyond one per SM (block_moves' kernels without a stack: flat from 4 to 132
    blocks, 0.6-3 us more on 264; docs/decisions/D16.md)."""
    beyond = max(0, blocks - gpu.sm.count)
    return gpu.transfer.move_start_s + beyond * threads * gpu.transfer.thread_start_s


def handoff_s(gpu: GpuSpec, drain_s: float) -> float:
    """What a generated kernel's phase pays after its last byte before the next phase (on
    another block) may read it: its writes drain (``drain_s``: to the L2 inside a GPU, over
    the path across GPUs), the block releases them (``sync.release_ns``) and a system-scope
    flag carries the news (``sync.flag_latency_sys_ns``)."""
    return drain_s + gpu.sync.release_s + gpu.sync.flag_latency_sys_s


def reduce_memory_weight(gpu: GpuSpec, in_l2: bool) -> float:
    """Capacity a reduction into memory consumes per payload byte, in units of the
    memory resource (whose capacity is HBM bandwidth x ``hbm.efficiency``): read +
    write, derated to ``hbm.reduce_efficiency`` for read-modify-write traffic in HBM."""
    if in_l2:
        return 2.0
    return 2.0 * gpu.hbm.efficiency / gpu.hbm.reduce_efficiency


def tile_reduce_memory_weight(gpu: GpuSpec) -> float:
    """Capacity a GEMM epilogue's store-add (a TMA reduce of a staged tile into memory)
    consumes per payload byte: the destination read and written back, at
    ``hbm.tile_reduce_efficiency`` (the source is the SM's shared memory: no read)."""
    return 2.0 * gpu.hbm.efficiency / gpu.hbm.tile_reduce_efficiency


def _waves(tiles: int, sms: int) -> float:
    """Fraction of the SM-waves that does useful work; below one wave the library
    splits K so that every SM has work (no quantisation loss)."""
    if tiles < sms:
        return 1.0
    return tiles / (sms * math.ceil(tiles / sms))


def sustained_factor(gpu: GpuSpec, time_s: float, busy_sms: float | None = None) -> float:
    """Fraction of its short-run rate a tensor kernel of this duration keeps with
    ``busy_sms`` SMs of the GPU computing (default: all); public name for the simulator's
    fused operations."""
    return _sustained(gpu, time_s, busy_sms)


def settled_fraction(gpu: GpuSpec, busy_sms: float | None = None) -> float:
    """Fraction of the short-run rate a long tensor kernel settles at once the power limit
    lowers the clock, with ``busy_sms`` of the GPU's SMs computing (see the module text)."""
    t, total = gpu.tensor, gpu.sm.count
    if not busy_sms or busy_sms >= total:
        return t.sustained_fraction
    return min(1.0, t.sustained_fraction * (total / busy_sms) ** t.sustained_sm_exponent)


def _sustained(gpu: GpuSpec, time_s: float, busy_sms: float | None = None) -> float:
    """Fraction of its short-run rate that a tensor kernel of this duration keeps."""
    t = gpu.tensor
    if time_s <= t.sustained_after_s:
        return 1.0
    settled = settled_fraction(gpu, busy_sms)
    return settled + (1.0 - settled) * t.sustained_after_s / time_s


def _tensor_time(gpu: GpuSpec, flop: float, efficiency: float, nbytes: float,
                 dtype: str, sms: int | None = None) -> float:
    share = min(1.0, sms / gpu.sm.count) if sms else 1.0
    compute_s = flop / (gpu.tensor.flops(dtype) * efficiency * share)
    compute_s /= _sustained(gpu, compute_s, sms)
    memory_s = nbytes / gpu.hbm.effective_Bps
    return soft_max(compute_s, memory_s, gpu.transfer.issue_knee)


def gemm_efficiency(gpu: GpuSpec, m: int, n: int, k: int, sms: int | None = None) -> float:
    """Tensor efficiency of an (m, n, k) GEMM on ``sms`` SMs (default: all): large-shape
    efficiency x tile waves x the per-tile fixed work (``gemm_k_overhead`` K-steps of
    prologue and epilogue)."""
    tiles = math.ceil(m / GEMM_TILE[0]) * math.ceil(n / GEMM_TILE[1])
    t = gpu.tensor
    return t.gemm_efficiency * _waves(tiles, sms or gpu.sm.count) * k / (k + t.gemm_k_overhead)


def gemm_time_s(gpu: GpuSpec, m: int, n: int, k: int, dtype: str = "bf16",
                element_B: int = 2, sms: int | None = None) -> float:
    """Body time of C[m,n] = A[m,k] @ B[k,n] (no launch), operands read once from HBM,
    on ``sms`` of the GPU's SMs (default: all)."""
    flop = 2.0 * m * n * k
    nbytes = element_B * (m * k + k * n + m * n)
    return _tensor_time(gpu, flop, gemm_efficiency(gpu, m, n, k, sms), nbytes, dtype, sms)


def attention_efficiency(gpu: GpuSpec, seq: int, causal: bool) -> float:
    """Tensor efficiency of a fused attention: ``attention_efficiency`` x the per-tile
    fixed work over the key sequence (the GEMM's ``gemm_k_overhead``), plus, when
    causal, ``attention_causal_overhead`` more (the diagonal tiles and the uneven rows)."""
    t = gpu.tensor
    overhead = t.gemm_k_overhead + (t.attention_causal_overhead if causal else 0.0)
    return t.attention_efficiency * seq / (seq + overhead)


def attention_time_s(gpu: GpuSpec, batch: int, heads: int, seq: int, head_dim: int,
                     causal: bool, dtype: str = "bf16", element_B: int = 2) -> float:
    """Body time of softmax(Q K^T) V over [batch, heads, seq, head_dim] (no launch)."""
    flop = 4.0 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    nbytes = 4 * element_B * batch * heads * seq * head_dim        # q, k, v read; o written
    return _tensor_time(gpu, flop, attention_efficiency(gpu, seq, causal), nbytes, dtype)


def grouped_gemm_time_s(gpu: GpuSpec, shapes: list[tuple[int, int, int]], dtype: str = "bf16",
                        element_B: float = 2) -> float:
    """Body time of several GEMMs ``(m, n, k)`` in one launch (a batched or grouped GEMM, or a
    convolution as implicit GEMMs): their tiles are dealt over all SMs together, so only the
    whole set's last wave is quantised; each keeps its own per-tile fixed work (K + the
    ``gemm_k_overhead``); operands and outputs are read and written once. One shape gives
    ``gemm_time_s``."""
    shapes = [(m, n, k) for m, n, k in shapes if m > 0 and n > 0 and k > 0]
    if not shapes:
        return 0.0
    t = gpu.tensor
    tiles = sum(math.ceil(m / GEMM_TILE[0]) * math.ceil(n / GEMM_TILE[1]) for m, n, _ in shapes)
    flop = sum(2.0 * m * n * k for m, n, k in shapes)
    # the K-step overhead, weighted by each GEMM's share of the work
    k_factor = flop / sum(2.0 * m * n * (k + t.gemm_k_overhead) for m, n, k in shapes)
    efficiency = t.gemm_efficiency * _waves(tiles, gpu.sm.count) * k_factor
    nbytes = element_B * sum(m * k + k * n + m * n for m, n, k in shapes)
    return _tensor_time(gpu, flop, efficiency, nbytes, dtype)


def causal_fraction(q_seq: int, kv_seq: int) -> float:
    """Share of the (query, key) pairs a causal mask keeps, aligned top-left as
    ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` aligns it: query i
    sees keys 0..i. (S + 1) / 2S for a square mask."""
    if q_seq <= kv_seq:                       # sum over i of (i + 1)
        kept = q_seq * (q_seq + 1) / 2
    else:                                     # the rows past kv_seq see every key
        kept = kv_seq * (kv_seq + 1) / 2 + (q_seq - kv_seq) * kv_seq
    return kept / (q_seq * kv_seq)


def attention_shape_time_s(gpu: GpuSpec, batch: int, heads: int, q_seq: int, kv_seq: int,
                           head_dim: int, causal: bool, dtype: str = "bf16",
                           element_B: float = 2, kv_heads: int | None = None,
                           v_head_dim: int | None = None) -> float:
    """Body time of a fused attention (no launch) of ``q_seq`` queries against ``kv_seq``
    keys, ``kv_heads`` key/value heads shared by the ``heads`` query heads (GQA), values of
    ``v_head_dim``: Q K^T and P V on the tensor cores (only the kept pairs when causal), q,
    k, v read and o written once, at ``attention_efficiency`` over the key sequence. With
    equal sequences and heads it is ``attention_time_s`` but for the causal share, which is
    (S + 1) / 2S here and 1/2 there."""
    kv_heads = kv_heads or heads
    v_head_dim = v_head_dim or head_dim
    pairs = batch * heads * q_seq * kv_seq * (causal_fraction(q_seq, kv_seq) if causal else 1.0)
    flop = 2.0 * pairs * (head_dim + v_head_dim)
    nbytes = element_B * batch * (heads * q_seq * (head_dim + v_head_dim)
                                  + kv_heads * kv_seq * (head_dim + v_head_dim))
    return _tensor_time(gpu, flop, attention_efficiency(gpu, kv_seq, causal), nbytes, dtype)
