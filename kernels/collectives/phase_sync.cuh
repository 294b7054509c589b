// collectives/phase_sync.cuh: the synchronisation between a generated collective's phases
// (collective.cuh includes it after the sets, the contexts and the moves): the grid barrier,
// the ring and pair flags, and the check that the peer table was written for this call.
#pragma once

#ifdef __CUDACC__

namespace pkc {

// ---- synchronisation between phases --------------------------------------------------------------

// Every block of every rank meets (a dissemination barrier on flags [0, PKC_BARRIER_FLAGS):
// ceil(log2 world) rounds); `index` counts this launch's barriers, `per_launch` is how many each
// launch performs (counters grow monotonically across launches: pkc_args::seq).
template <class C, class G>
PK_DEV bool grid_barrier(const G& g, const ctx& c, unsigned index, unsigned per_launch) {
  const unsigned epoch = g.seq * per_launch + index + 1;
  if (!pk::dissemination_barrier(g.flags, c.rank, c.world, c.block, c.bpr, 0, epoch)) return false;
  if constexpr (C::kMech == mech::tma) {
    if (threadIdx.x == 0) pk::tma::acquire_for_async_reads();
  }
  return true;
}

// Block b of a rank waits until block b of the previous rank has signalled `cum` times in this
// launch (ring algorithms: the data it forwards or reduces has arrived).
template <class C, class G>
PK_DEV bool ring_wait(const G& g, const ctx& c, unsigned cum, unsigned per_launch) {
  int ok = 1;
  if (threadIdx.x == 0) {
    const int idx = PKC_P2P_FLAG_BASE + c.block;
    ok = pk::wait_geq(g.flags.at(c.rank, idx), g.seq * per_launch + cum, g.flags.spin, c.rank,
                      c.prev(), idx) ? 1 : 0;
    if constexpr (C::kMech == mech::tma) pk::tma::acquire_for_async_reads();
  }
  return __syncthreads_and(ok) != 0;
}

template <class G>
PK_DEV void ring_signal(const G& g, const ctx& c) {
  __syncthreads();  // every thread's writes before the leader's release
  if (threadIdx.x == 0) pk::red_release_sys(g.flags.at(c.next(), PKC_P2P_FLAG_BASE + c.block), 1u);
}

// Pairs (recursive halving / doubling): phase p of rank r reads data that its partner
// A::partner(r, p) and r's own blocks wrote in phase p - 1 (a block's piece of a phase is not
// the piece it wrote before). Counter PKC_P2P_FLAG_BASE + p of rank r counts, per launch, one
// arrival from every block of the partner and of r itself: 2 x blocks per rank.
template <class C, class G>
PK_DEV bool pair_wait(const G& g, const ctx& c, int p, int partner) {
  int ok = 1;
  if (threadIdx.x == 0) {
    const int idx = PKC_P2P_FLAG_BASE + p;
    ok = pk::wait_geq(g.flags.at(c.rank, idx), (g.seq + 1u) * 2u * static_cast<unsigned>(c.bpr),
                      g.flags.spin, c.rank, partner, idx) ? 1 : 0;
    if constexpr (C::kMech == mech::tma) pk::tma::acquire_for_async_reads();
  }
  return __syncthreads_and(ok) != 0;
}

// After phase p - 1: tell phase p's partner and this rank that this block's writes are done.
template <class G>
PK_DEV void pair_signal(const G& g, const ctx& c, int p, int partner) {
  __syncthreads();
  if (threadIdx.x == 0) {
    pk::fence_acq_rel_sys();
    pk::red_relaxed_sys(g.flags.at(partner, PKC_P2P_FLAG_BASE + p), 1u);
    pk::red_relaxed_sys(g.flags.at(c.rank, PKC_P2P_FLAG_BASE + p), 1u);
  }
}

// Barriers one launch performs: entry and exit (ranks in separate processes) and one between
// consecutive phases of a barrier-synchronised algorithm.
template <class A>
PK_HD unsigned barriers_per_launch(int world, bool edges) {
  return (edges ? 2u : 0u) + (A::kSync == sync_kind::barrier ? static_cast<unsigned>(A::phases(world) - 1) : 0u);
}

// Whether the peer table (world > PKC_INLINE_RANKS) was written for this call: block-uniform.
template <class G>
PK_DEV bool table_current(const G& g, const ctx& c) {
  if (g.table == nullptr) return true;
  int ok = 1;
  if (threadIdx.x == 0) {
    const unsigned long long h = g.table->hash;
    if (h != g.table_hash) {
      pk::record_error(g.flags.spin.err, pk::PK_ERR_STALE_TABLE, c.rank, -1, -1,
                       static_cast<unsigned>(g.table_hash), static_cast<unsigned>(h));
      ok = 0;
    }
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace pkc

#endif  // __CUDACC__
