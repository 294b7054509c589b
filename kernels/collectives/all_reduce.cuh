// collectives/all_reduce.cuh: all-reduce, one-shot (direct), two-shot and ring.
//
// count = elements of the buffer; every rank's output receives the element-wise sum of every
// rank's input. Sums accumulate in fp32 and are rounded once to the element type (one-shot and
// two-shot; the ring rounds each partial sum it passes on).
//
// The buffer is cut into world chunks (pkc::piece, 16-byte aligned, the last ones possibly
// short): chunk c is "owned" by rank c.
//
// one-shot  one phase: every rank reads the whole buffer of every rank and writes the sum.
//           world x the reads of the other algorithms; for small buffers.
// two-shot  one phase: rank r sums chunk r over every rank's input (the reduce-scatter shot)
//           and stores the sum straight into chunk r of every rank's output (the all-gather
//           shot), so no reduced chunk is written and read back: W reads and W writes of a
//           chunk per rank, 2 W N bytes in all, the least an all-reduce can move.
// ring      2 world - 1 phases: a ring reduce-scatter through scratch slots (see
//           reduce_scatter.cuh) whose last phase leaves chunk r, reduced, in rank r's output,
//           then world - 1 ring all-gather phases forwarding chunks through the outputs.
// Copy engines: one-shot gathers every input into each rank's scratch and reduces locally;
// two-shot copies foreign chunks to their owner, whose reduction kernel then writes the sum into
// every rank's output;
// ring as for reduce-scatter, then copies.
#pragma once

#include "collective.cuh"
#include "reduce_scatter.cuh"

namespace pkc {

template <typename T>
PK_HD span chunk_of(size_t n, int world, int c) {
  return piece(n, world, c, kVec<T>);
}
PK_HD size_t chunk_slot_bytes(size_t n, int world, size_t elem) {
  return round_up(ceil_div(n, static_cast<size_t>(world)) * elem, 16);
}

struct all_reduce_one_shot : algorithm_defaults {
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t ce_scratch_bytes(size_t n, int world, size_t elem) {
    return world * slot_elems_bytes(n, elem);
  }
  PK_HD static int ce_phases(int) { return 2; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    return reduce_from_ranks<C, may_shift::no>(g, c, g.out[c.rank] + s.lo, s.lo, s.size(), s.lo, sm);  // whole lines
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
        if (q != r) ce_copy_elems(g.scratch[q] + r * slot, g.in[r], g.count * sizeof(T), x);
      }
      return;
    }
    cptrs<T> src{};
    for (int k = 0; k < w; ++k) {
      const int q = peer<C>(r, k, w);
      src.add(q == r ? g.in[r] : g.scratch[r] + q * slot);
    }
    ce_reduce(one(g.out[r]), src, g.count, x);
  }
};

struct all_reduce_two_shot : algorithm_defaults {
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t ce_scratch_bytes(size_t n, int world, size_t elem) {
    return world * chunk_slot_bytes(n, world, elem);
  }
  PK_HD static int ce_phases(int) { return 2; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span ch = chunk_of<T>(g.count, c.world, c.rank);
    const span s = block_piece<T>(ch.size(), c);
    const size_t at = ch.lo + s.lo;
    // In bf16 by registers all 8 sources load at once (no stack: ptxas -v, sm_90a, CUDA 13.0; 4 a
    // round had cost 1.5 us a call at 8 ranks in block_moves_cross: docs/decisions/D24.md); in
    // fp32 4 a round (as the model's load_rounds has it; 8 at once in fp32 has not been timed).
    // With a reduce op or an epilogue the same (with a bias, the bf16 kernel at the
    // 128-register cap keeps 8 B of stack, and 4 a round ran it 5-27 % slower at 16 MiB:
    // docs/decisions/D58.md).
    constexpr int kLoads = C::kMech == mech::reg && sizeof(T) == 2 ? PKC_SET_SLOTS : 4;
    return reduce_ranks_to_ranks<C, kLoads>(g, c, at, s.size(), at, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int p, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const size_t slot = chunk_slot_bytes(g.count, w, sizeof(T)) / sizeof(T);
    const span mine = chunk_of<T>(g.count, w, r);
    if (p == 0) {
      for (int k = 0; k < w; ++k) {
        const int q = peer<C>(r, k, w);
        const span ch = chunk_of<T>(g.count, w, q);
        if (q != r) ce_copy_elems(g.scratch[q] + r * slot, g.in[r] + ch.lo, ch.size() * sizeof(T), x);
      }
      return;
    }
    cptrs<T> src{};
    ptrs<T> dst{};
    for (int k = 0; k < w; ++k) {
      const int q = peer<C>(r, k, w);
      src.add(q == r ? g.in[r] + mine.lo : g.scratch[r] + q * slot);
      dst.add(g.out[q] + mine.lo);
    }
    ce_reduce(dst, src, mine.size(), x);
  }
};

struct all_reduce_ring : algorithm_defaults {
  static constexpr sync_kind kSync = sync_kind::ring;
  static constexpr sync_kind kCeSync = sync_kind::ring;
  PK_HD static size_t scratch_bytes(size_t n, int world, size_t elem) {
    return (world - 1) * chunk_slot_bytes(n, world, elem);
  }
  PK_HD static size_t ce_scratch_bytes(size_t n, int world, size_t elem) {
    return world * chunk_slot_bytes(n, world, elem);
  }
  PK_HD static int phases(int world) { return 2 * world - 1; }
  PK_HD static int ce_phases(int world) { return 2 * world - 1; }
  // Phase world - 1 leaves the reduced chunk in the rank's own output (its all-gather starts
  // from there) and the last phase's signal would wait for nobody: neither sends.
  PK_HD static bool sends(int p, int world) { return p != world - 1 && p != 2 * world - 2; }
  PK_HD static unsigned signals_before(int p, int world) {
    return static_cast<unsigned>(p <= world - 1 ? p : p - 1);
  }
  PK_HD static unsigned signals_per_launch(int world) { return static_cast<unsigned>(2 * world - 3); }
  // The chunk rank r handles in phase p.
  PK_HD static int chunk(int r, int p, int world) {
    if (p < world) return reduce_scatter_ring::shard(r, p, world);
    return ((r - (p - world)) % world + world) % world;
  }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    using T = typename G::value_type;
    const int w = c.world;
    const size_t slot = chunk_slot_bytes(g.count, w, sizeof(T)) / sizeof(T);
    const span ch = chunk_of<T>(g.count, w, chunk(c.rank, p, w));
    const span s = block_piece<T>(ch.size(), c);
    const size_t at = ch.lo + s.lo;
    if (p >= w) return copy_to<C>(g, c, one(g.out[c.next()] + at), g.out[c.rank] + at, s.size(), sm);
    const T* mine = g.in[c.rank] + at;
    if (p == 0) return copy_to<C>(g, c, one(g.scratch[c.next()] + s.lo), mine, s.size(), sm);
    cptrs<T> src{};
    src.add(mine);
    src.add(g.scratch[c.rank] + (p - 1) * slot + s.lo);
    T* dst = p == w - 1 ? g.out[c.rank] + at : g.scratch[c.next()] + p * slot + s.lo;
    return reduce_to<C>(g, c, one(dst), src, s.size(), sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int p, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const int next = (r + 1) % w;
    const size_t slot = chunk_slot_bytes(g.count, w, sizeof(T)) / sizeof(T);
    const span ch = chunk_of<T>(g.count, w, chunk(r, p, w));
    const size_t bytes = ch.size() * sizeof(T);
    if (p >= w) {
      ce_copy_elems(g.out[next] + ch.lo, g.out[r] + ch.lo, bytes, x);
      return;
    }
    const T* mine = g.in[r] + ch.lo;
    if (p == 0) {
      ce_copy_elems(g.scratch[next], mine, bytes, x);
      return;
    }
    cptrs<T> src{};
    src.add(mine);
    src.add(g.scratch[r] + (p - 1) * slot);
    if (p == w - 1) {
      ce_reduce(one(g.out[r] + ch.lo), src, ch.size(), x);
      return;
    }
    T* staging = g.scratch[r] + (w - 1) * slot;
    ce_reduce(one(staging), src, ch.size(), x);
    ce_copy_elems(g.scratch[next] + p * slot, staging, bytes, x);
  }
};

}  // namespace pkc
