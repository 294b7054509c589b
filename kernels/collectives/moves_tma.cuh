// collectives/moves_tma.cuh: the TMA path of the moves (moves.cuh: the cut and the policy): bulk
// copies dealt over the blocks in stage chunks, and staged sums (every source bulk-loaded into
// one stage, summed by the block's threads, bulk-stored), shifted sources realigned in the stage.
#pragma once

#ifdef __CUDACC__

namespace pkc {

// ---- TMA path -----------------------------------------------------------------------------------

template <class C>
PK_DEV unsigned char* stage_at(const block_smem& sm, int s) {
  return sm.stage + static_cast<size_t>(s) * C::kStageBytes;
}

// Parity bookkeeping for `nchunks` chunks dealt round-robin over the stages, for threads that
// did not wait themselves.
template <class C>
PK_DEV void advance_parity(block_smem& sm, size_t nchunks) {
  for (int s = 0; s < C::kStages; ++s) {
    const size_t uses = nchunks > static_cast<size_t>(s) ? (nchunks - s + C::kStages - 1) / C::kStages : 0;
    if (uses & 1u) sm.parity ^= 1u << s;
  }
}

// Which stage-sized chunks of a range a block moves: first, first + step, first + 2 step, ...
struct chunk_deal {
  size_t first = 0, step = 1;
  PK_HD size_t count(size_t total) const { return total > first ? (total - first + step - 1) / step : 0; }
  PK_HD size_t at(size_t c) const { return first + c * step; }
};

// dst[d][0..n) = src[0..n) with the destinations co-aligned with the source: thread 0 streams
// the body through the stages with bulk loads and bulk-stores every stage to each destination;
// the head and the tail (< 16 bytes each) go through registers. A source at another
// misalignment, or destinations at several, go through registers (reg_copy; the collectives
// send a shifted source to tma_copy_shifted instead: copy_to). Returns false (in every thread)
// on a timeout. With a deal other than {0, 1} the block moves only its chunks of the body; the
// block dealt chunk 0 also moves the head and the tail.
template <class C, typename T>
PK_DEV bool tma_copy(const ptrs<T>& dst, const T* src, size_t n, block_smem& sm,
                     const pk::spin_ctx& spin, int rank, chunk_deal deal = {}) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const int md = dst.misalignment();
  if (md < 0 || static_cast<unsigned>(md) != mis16(src)) {
    if (deal.first == 0) reg_copy(dst, src, n, g);
    return __syncthreads_and(1) != 0;
  }
  const move_plan p = words(plan_move<T>(dst, one(src), bytes), bytes);   // co-aligned: no shift
  int ok = 1;
  const size_t chunk = C::kStageBytes;
  const size_t body = 16 * p.nv;
  const size_t nchunks = dst.n ? deal.count(ceil_div(body, chunk)) : 0;
  const unsigned char* from = reinterpret_cast<const unsigned char*>(src) + p.head;
  if (nchunks != 0 && threadIdx.x == 0) {
    auto issue = [&](size_t c) {
      const int s = static_cast<int>(c % C::kStages);
      const size_t off = deal.at(c) * chunk;
      const unsigned len = static_cast<unsigned>(min_size(chunk, body - off));
      pk::tma::mbar_arrive_expect_tx(&sm.bar[s], len);
      pk::tma::load_async(stage_at<C>(sm, s), from + off, len, &sm.bar[s]);
    };
    for (size_t c = 0; c < nchunks && c < static_cast<size_t>(C::kStages); ++c) issue(c);
    unsigned parity = sm.parity;
    for (size_t c = 0; c < nchunks; ++c) {
      const int s = static_cast<int>(c % C::kStages);
      const size_t off = deal.at(c) * chunk;
      const unsigned len = static_cast<unsigned>(min_size(chunk, body - off));
      if (!pk::tma::mbar_wait(&sm.bar[s], (parity >> s) & 1u, spin, rank)) {
        ok = 0;
        break;
      }
      parity ^= 1u << s;
      PKC_EACH(d, dst.n)
        pk::tma::store_async(reinterpret_cast<unsigned char*>(dst.p[d]) + p.head + off, stage_at<C>(sm, s), len);
      pk::tma::commit_group();
      // Refill the stage of the previous chunk, whose stores (one group back) have finished
      // reading it by now, while this chunk's stores are still reading theirs.
      if (c >= 1 && c - 1 + C::kStages < nchunks) {
        pk::tma::wait_group_read<1>();
        issue(c - 1 + C::kStages);
      }
    }
    pk::tma::complete_writes();
  }
  advance_parity<C>(sm, nchunks);
  if (deal.first == 0) {
    copy_bytes(dst, src, 0, p.head, g);
    copy_bytes(dst, src, p.tail(), bytes, g);
  }
  return __syncthreads_and(ok) != 0;
}

// Thread 0's copy of a staged move's pointers, in shared memory: it alone fills it, issues the
// bulk loads and stores and reads it (the other threads must not: nothing orders their reads
// after its writes), at run-time indices, which in registers would put them on the
// stack and, kept in registers by unrolling, made the 8-way reductions spill 2-15 KB (ptxas -v).
// Sources at their body's aligned start (head - shift), destinations at their body's start.
struct ptr_table {
  const unsigned char* src[PKC_SET_SLOTS];
  unsigned char* dst[PKC_SET_SLOTS];
  int ndst;
  template <typename T>
  PK_DEV void fill(const ptrs<T>& d, const cptrs<T>& s, const move_plan& p) {
    PKC_EACH(k, d.n) dst[k] = reinterpret_cast<unsigned char*>(d.p[k]) + p.head;
    PKC_EACH(k, s.n) src[k] = reinterpret_cast<const unsigned char*>(s.p[k]) + p.head - p.shift(k);
    ndst = d.n;
  }
};

// One stage's result: output vector i = R over the NS sources' vector i (source q realigned by
// its shift when Shift), finished (R's epilogue; `at` walks the positions from this thread's
// first vector, dstep a thread's stride); Copy: the one source's vector as it is. Shared-memory
// addresses, so the loads are ld.shared rather than generic loads.
template <int NS, bool Shift, bool Copy, class R, typename T, class W>
PK_DEV void stage_op(uint32_t in, uint32_t out, uint32_t slot, unsigned nvec, unsigned shifts, W at,
                     unsigned dstep, const R& r) {
  for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x, at.advance(dstep)) {
    uint4 raw[NS];
#pragma unroll
    for (int q = 0; q < NS; ++q) {
      raw[q] = pk::tma::lds128(in + q * slot + i * 16u);
      if constexpr (Shift) {
        const unsigned sh = (shifts >> (4 * q)) & 15u;
        if (sh != 0) raw[q] = funnel16(raw[q], pk::tma::lds128(in + q * slot + i * 16u + 16u), sh);
      }
    }
    if constexpr (Copy) {
      pk::tma::sts128(out + i * 16u, raw[0]);
    } else {
      float acc[kVec<T>];
#pragma unroll
      for (size_t k = 0; k < kVec<T>; ++k) acc[k] = R::init();
#pragma unroll
      for (int q = 0; q < NS; ++q) combine_vec<R, T>(acc, raw[q]);
      r.template finish<T, static_cast<int>(kVec<T>), true>(acc, at.j);
      pk::tma::sts128(out + i * 16u, pack_vec(acc, T{}));
    }
  }
}

// A staged move of `body` bytes (whole vectors): per chunk, thread 0 bulk-loads the chunk of
// every source into one stage (a shifted source with one vector more), every thread computes
// the stage's output slot (stage_op), thread 0 bulk-stores it to every destination. The source
// count is a template argument because the chunk's critical path (thread 0's issue, the sum) is
// 1.3-1.7x faster per block with it known than with a loop over a run-time count
// (validation/experiments/tma_align.cu at commit 7cc519e; docs/decisions/D6.md). `base`: the
// position of the body's first element (R's epilogue).
template <class C, int NS, bool Shift, bool Copy, class R, typename T>
PK_DEV bool tma_stage_n(const ptr_table& tab, int ndst, size_t body, unsigned shifts, size_t base,
                        const R& r, block_smem& sm, const pk::spin_ctx& spin, int rank) {
  constexpr size_t pad = Shift ? 16 : 0;   // a source slot's extra vector
  constexpr size_t chunk = ((C::kStageBytes - NS * pad) / (NS + 1)) & ~static_cast<size_t>(15);
  constexpr size_t slot = chunk + pad;
  const size_t nchunks = (body != 0 && ndst != 0) ? ceil_div(body, chunk) : 0;
  int ok = 1;
  auto extra = [&](int q) -> unsigned { return Shift && ((shifts >> (4 * q)) & 15u) != 0 ? 16u : 0u; };
  // The stages' and the barriers' shared addresses, converted once: converted per load (generic
  // pointers to load_async), ptxas kept the barrier's in a per-thread register and made it
  // uniform again inside every bulk load's one-thread loop, an R2UR per source on thread 0's
  // path through each chunk, which the chunk waits for (8 sources 6 % slower at 1-16 blocks; D58).
  const uint32_t stage0 = pk::tma::smem_u32(sm.stage), bar0 = pk::tma::smem_u32(sm.bar);
  auto issue = [&](size_t c) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    unsigned tx = 0;
#pragma unroll
    for (int q = 0; q < NS; ++q) tx += len + extra(q);
    pk::tma::mbar_arrive_expect_tx(&sm.bar[s], tx);
    const uint32_t st = stage0 + static_cast<uint32_t>(s) * C::kStageBytes;
    const uint32_t bar = bar0 + static_cast<uint32_t>(s * sizeof(uint64_t));
#pragma unroll
    for (int q = 0; q < NS; ++q)
      pk::tma::load_async_u32(st + static_cast<uint32_t>(q * slot), tab.src[q] + c * chunk, len + extra(q), bar);
  };
  if (threadIdx.x == 0)
    for (size_t c = 0; c < nchunks && c < static_cast<size_t>(C::kStages); ++c) issue(c);
  // the position of this thread's first vector in chunk c, and the steps between
  auto at = r.walk(base + threadIdx.x * kVec<T>);
  const unsigned dchunk = r.stride(chunk / sizeof(T));
  const unsigned dstep = r.stride(static_cast<size_t>(blockDim.x) * kVec<T>);
  for (size_t c = 0; c < nchunks; ++c, at.advance(dchunk)) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    ok = pk::tma::mbar_wait(&sm.bar[s], (sm.parity >> s) & 1u, spin, rank) ? 1 : 0;
    sm.parity ^= 1u << s;
    // This stage's output slot was last stored from kStages chunks ago: that group (and only
    // it, among the groups still pending) must have finished reading it.
    if (threadIdx.x == 0) pk::tma::wait_group_read<C::kStages - 1>();
    if (!__syncthreads_and(ok)) return false;
    unsigned char* in = stage_at<C>(sm, s);
    unsigned char* out = in + NS * slot;
    stage_op<NS, Shift, Copy, R, T>(pk::tma::smem_u32(in), pk::tma::smem_u32(out), slot, len / 16, shifts, at,
                                    dstep, r);
    pk::tma::fence_shared_to_async();
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int d = 0; d < tab.ndst; ++d) pk::tma::store_async(tab.dst[d] + c * chunk, out, len);
      pk::tma::commit_group();
      if (c + C::kStages < nchunks) issue(c + C::kStages);
    }
  }
  if (threadIdx.x == 0 && nchunks != 0) pk::tma::complete_writes();
  return true;
}

// dst[d][0..n) = src[0..n) for a source whose misalignment differs from the (co-aligned)
// destinations': the body staged and realigned (tma_stage_n, one source), head and tail
// through registers.
template <class C, typename T>
PK_DEV bool tma_copy_shifted(const ptrs<T>& dst, const T* src, size_t n, block_smem& sm,
                             const pk::spin_ctx& spin, int rank) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const move_plan p = staged(plan_move<T>(dst, one(src), bytes), bytes, 1);
  __shared__ ptr_table tab;
  if (threadIdx.x == 0) tab.fill(dst, one(static_cast<const T*>(src)), p);
  copy_bytes(dst, src, 0, p.head, g);
  if (!tma_stage_n<C, 1, true, true, sum_policy, T>(tab, dst.n, 16 * p.nv, p.shifts, 0, sum_policy{}, sm, spin,
                                                   rank))
    return false;
  copy_bytes(dst, src, p.tail(), bytes, g);
  return __syncthreads_and(1) != 0;
}

// Whether a copy's source sits at another misalignment than its (co-aligned) destinations.
template <typename T>
PK_DEV bool copy_is_shifted(const ptrs<T>& dst, const T* src) {
  const int md = dst.misalignment();
  return md >= 0 && static_cast<unsigned>(md) != mis16(src);
}

template <class C, bool Shift, class R, typename T>
PK_DEV bool tma_reduce_body(const ptr_table& tab, int nsrc, int ndst, const move_plan& p, size_t base, const R& r,
                            block_smem& sm, const pk::spin_ctx& spin, int rank) {
  static_assert(PKC_SET_SLOTS <= 8 && PKC_TMA_MAX_SOURCES <= PKC_SET_SLOTS,
                "tma_reduce instantiates source counts 1..8");
  const size_t body = 16 * p.nv;
#define PKC_REDUCE_CASE(S) \
  case S:                  \
    return tma_stage_n<C, S, Shift, false, R, T>(tab, ndst, body, p.shifts, base, r, sm, spin, rank);
  switch (nsrc) {
    PKC_REDUCE_CASE(1)
    PKC_REDUCE_CASE(2)
    PKC_REDUCE_CASE(3)
    PKC_REDUCE_CASE(4)
    PKC_REDUCE_CASE(5)
    PKC_REDUCE_CASE(6)
    PKC_REDUCE_CASE(7)
    PKC_REDUCE_CASE(8)
    default: return true;
  }
#undef PKC_REDUCE_CASE
}

// dst[d] = R over src[q] (up to PKC_SET_SLOTS of each) through TMA: head and tail through
// registers, the body staged (shifted sources realigned in the stage); destinations at several
// misalignments, all through registers. `base`: the position of element 0 (R's epilogue).
template <class C, may_shift S = may_shift::any, class R = sum_policy, typename T>
PK_DEV bool tma_reduce(const ptrs<T>& dst, const cptrs<T>& src, size_t n, block_smem& sm,
                       const pk::spin_ctx& spin, int rank, const R& r = R{}, size_t base = 0) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const move_plan p = S == may_shift::no ? plan_coaligned<T>(dst, src, bytes)
                                         : staged(plan_move<T>(dst, src, bytes), bytes, src.n);
  const size_t head = p.head / sizeof(T), tail = p.tail() / sizeof(T);
  __shared__ ptr_table tab;
  if (threadIdx.x == 0) tab.fill(dst, src, p);
  reduce_elems<T>(dst, src, 0, head, base, r, g);
  bool ok;
  if constexpr (S != may_shift::no) {
    ok = p.shifted() ? tma_reduce_body<C, true, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank)
                     : tma_reduce_body<C, false, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank);
  } else {
    ok = tma_reduce_body<C, false, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank);
  }
  if (!ok) return false;
  reduce_elems<T>(dst, src, tail, n, base, r, g);
  return __syncthreads_and(1) != 0;
}

}  // namespace pkc

#endif  // __CUDACC__
