// collectives/reduce_scatter.cuh: reduce-scatter, direct and ring.
//
// count = elements of each rank's output shard; every rank's input holds world shards and rank r
// receives the sum over ranks of shard r (nccl-tests: the --bytes of a reduce-scatter are the
// input per rank). Sums accumulate in fp32 and are rounded once to the element type.
//
// direct  one phase: rank r reads shard r of every rank's input (peers in the config's order),
//         sums and writes its output: world reads and one write per element, no atomics.
// ring    world phases: in phase 0 rank r stores shard (r - 1) of its input into slot 0 of the
//         next rank's scratch; in phase p (1 .. world-2) it adds shard (r - p - 1) of its input
//         to scratch slot p - 1 (the partial sum the previous rank sent) and stores the result
//         into slot p of the next rank's scratch; in the last phase it adds its own shard r to
//         slot world - 2 and writes its output. Block b of every rank handles piece b of every
//         shard, so block b waits only for block b of the previous rank.
// Copy engines: direct copies every foreign shard into the owner's scratch, then a local
// reduction kernel sums; ring stages each partial sum locally (reduction kernel) and copies it
// to the next rank.
#pragma once

#include "collective.cuh"

namespace pkc {

// Scratch slots hold whole shards, rounded up so that every slot starts 16-byte aligned.
template <typename T>
PK_HD size_t slot_elems(size_t n) {
  return round_up(n, kVec<T>);
}
PK_HD size_t slot_elems_bytes(size_t n, size_t elem) { return round_up(n * elem, 16); }

struct reduce_scatter_direct : algorithm_defaults {
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t ce_scratch_bytes(size_t n, int world, size_t elem) {
    return world * slot_elems_bytes(n, elem);
  }
  PK_HD static int ce_phases(int) { return 2; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    const size_t at = c.rank * g.count + s.lo;
    return reduce_from_ranks<C>(g, c, g.out[c.rank] + s.lo, at, s.size(), at, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int p, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const size_t slot = slot_elems<T>(g.count);
    if (p == 0) {
      for (int k = 0; k < w; ++k) {
        const int q = peer<C>(r, k, w);
        if (q != r) ce_copy_elems(g.scratch[q] + r * slot, g.in[r] + q * g.count, g.count * sizeof(T), x);
      }
      return;
    }
    cptrs<T> src{};
    for (int k = 0; k < w; ++k) {
      const int q = peer<C>(r, k, w);
      src.add(q == r ? g.in[r] + r * g.count : g.scratch[r] + q * slot);
    }
    ce_reduce(one(g.out[r]), src, g.count, x);
  }
};

struct reduce_scatter_ring : algorithm_defaults {
  static constexpr sync_kind kSync = sync_kind::ring;
  static constexpr sync_kind kCeSync = sync_kind::ring;
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t scratch_bytes(size_t n, int world, size_t elem) {
    return (world - 1) * slot_elems_bytes(n, elem);
  }
  PK_HD static size_t ce_scratch_bytes(size_t n, int world, size_t elem) {
    return world * slot_elems_bytes(n, elem);  // world - 1 receive slots + one staging slot
  }
  PK_HD static int phases(int world) { return world; }
  PK_HD static int ce_phases(int world) { return world; }
  PK_HD static bool sends(int p, int world) { return p <= world - 2; }
  PK_HD static unsigned signals_before(int p, int) { return static_cast<unsigned>(p); }
  PK_HD static unsigned signals_per_launch(int world) { return static_cast<unsigned>(world - 1); }
  // The input shard rank r handles in phase p.
  PK_HD static int shard(int r, int p, int world) {
    return p == world - 1 ? r : ((r - p - 1) % world + world) % world;
  }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    const size_t slot = slot_elems<T>(g.count);
    const T* mine = g.in[c.rank] + shard(c.rank, p, c.world) * g.count + s.lo;
    if (p == 0) return copy_to<C>(g, c, one(g.scratch[c.next()] + s.lo), mine, s.size(), sm);
    cptrs<T> src{};
    src.add(mine);
    src.add(g.scratch[c.rank] + (p - 1) * slot + s.lo);
    T* dst = p == c.world - 1 ? g.out[c.rank] + s.lo : g.scratch[c.next()] + p * slot + s.lo;
    return reduce_to<C>(g, c, one(dst), src, s.size(), sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int p, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const int next = (r + 1) % w;
    const size_t slot = slot_elems<T>(g.count);
    const T* mine = g.in[r] + shard(r, p, w) * g.count;
    if (p == 0) {
      ce_copy_elems(g.scratch[next], mine, g.count * sizeof(T), x);
      return;
    }
    cptrs<T> src{};
    src.add(mine);
    src.add(g.scratch[r] + (p - 1) * slot);
    if (p == w - 1) {
      ce_reduce(one(g.out[r]), src, g.count, x);
      return;
    }
    T* staging = g.scratch[r] + (w - 1) * slot;
    ce_reduce(one(staging), src, g.count, x);
    ce_copy_elems(g.scratch[next] + p * slot, staging, g.count * sizeof(T), x);
  }
};

}  // namespace pkc
