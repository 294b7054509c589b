// collectives/all_gather.cuh: all-gather, direct (one-shot) and ring.
//
// count = elements of each rank's input shard; every rank's output holds world shards, shard r
// at offset r * count (nccl-tests: the --bytes of an all-gather are the output per rank).
//
// direct  one phase: rank r stores its shard into slot r of every rank's output (itself
//         included), peers in the config's order. TMA: one bulk load per stage, one bulk store
//         per destination; registers: one 16-byte load, one store per destination.
// ring    world - 1 phases: in phase 0 rank r stores its shard into its own slot r and into
//         slot r of the next rank; in phase p it forwards slot (r - p) mod world, which the
//         previous rank stored into it in phase p - 1, to the next rank. Block b of every rank
//         moves the same share of every slot (copy_range), so block b waits only for block b
//         of the previous rank.
// Copy engines do the same moves with cudaMemcpyAsync, one stream per (virtual) rank.
#pragma once

#include "collective.cuh"

namespace pkc {

struct all_gather_direct : algorithm_defaults {
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    return copy_to_ranks<C>(g, c, g.in[c.rank], c.rank * g.count, g.count, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    for (int k = 0; k < w; ++k)
      ce_copy_elems(g.out[peer<C>(r, k, w)] + r * g.count, g.in[r], g.count * sizeof(T), x);
  }
};

struct all_gather_ring : algorithm_defaults {
  static constexpr sync_kind kSync = sync_kind::ring;
  static constexpr sync_kind kCeSync = sync_kind::ring;
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }
  PK_HD static int phases(int world) { return world - 1; }
  PK_HD static int ce_phases(int world) { return world - 1; }
  // Every phase but the last tells the next rank its data has landed; the last one's would
  // wait for nobody (it cost the w2 ring, one phase, a release and a system-scope flag).
  PK_HD static bool sends(int p, int world) { return p != world - 2; }
  PK_HD static unsigned signals_before(int p, int) { return static_cast<unsigned>(p); }
  PK_HD static unsigned signals_per_launch(int world) { return static_cast<unsigned>(world - 2); }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    using T = typename G::value_type;
    const int slot = (c.rank - p + c.world) % c.world;
    const size_t at = slot * g.count;
    // phase 0 also copies the rank's own shard into its output: destinations {next, own}
    ptrs<T> dst{};
    dst.fill(p == 0 ? 2 : 1, [&](int k) { return g.out[k == 0 ? c.next() : c.rank] + at; });
    const T* src = p == 0 ? g.in[c.rank] : g.out[c.rank] + at;
    return copy_range<C>(g, c, dst, src, g.count, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int p, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const int next = (r + 1) % w;
    const int slot = (r - p + w) % w;
    const size_t bytes = g.count * sizeof(T);
    if (p == 0) {
      ce_copy_elems(g.out[r] + r * g.count, g.in[r], bytes, x);
      ce_copy_elems(g.out[next] + r * g.count, g.in[r], bytes, x);
    } else {
      ce_copy_elems(g.out[next] + slot * g.count, g.out[r] + slot * g.count, bytes, x);
    }
  }
};

}  // namespace pkc
