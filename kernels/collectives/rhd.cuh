// collectives/rhd.cuh: recursive halving (reduce-scatter) and doubling (all-gather), and the
// all-reduce made of both, for power-of-two worlds w = 2^L.
//
// Units: reduce-scatter and all-gather move shards (count elements each, shard s at s x count);
// all-reduce moves the buffer's w chunks (pkc::chunk_of, 16-byte aligned, the last ones possibly
// short). In log2(w) phases of one partner each, a rank exchanges half of what it still holds:
//
// halving  phase k = 0 .. L-1: partner = rank ^ (w >> (k + 1)); the rank keeps the w >> (k + 1)
//          units whose top k + 1 bits are its own (a contiguous range) and sums its partial of
//          them with the partner's (a pull: both read, each writes its own half): phase 0 reads
//          the inputs, later phases the partials in scratch (in place, relative to the half of
//          the units the rank keeps in phase 0, which its later partners share), the last one
//          writes the rank's own unit, reduced, into its output. Sources: 2 per sum, fp32,
//          rounded to the element type between phases (as a ring).
// doubling phase j = 0 .. L-1: partner = rank ^ (1 << j); the rank pulls the partner's 2^j
//          finished units into its own output (all-gather: phase 0 pulls the partner's input
//          and copies its own).
//
// Point-to-point synchronisation (sync_kind::pairs, collective.cuh pair_wait / pair_signal):
// phase p reads what the partner and the rank's own blocks wrote in phase p - 1 (a block's
// piece of a phase is not the piece it wrote before), so before phase p >= 1 a rank waits until
// flag P2P + p counts every block of both. No region a partner reads is written again by its
// owner in the same call: a rank writes only the units it keeps (halving) or the partner's
// units it has not had (doubling). log2(w) waits a rank where a ring has w - 1.
#pragma once

#include "collective.cuh"
#include "all_reduce.cuh"

namespace pkc {

PK_HD bool power_of_two(int w) { return w >= 2 && (w & (w - 1)) == 0; }
PK_HD int log2_of(int w) {
  int l = 0;
  while ((1 << l) < w) ++l;
  return l;
}

// The partner of halving phase k and of doubling phase j.
PK_HD int halving_partner(int rank, int k, int world) { return rank ^ (world >> (k + 1)); }
PK_HD int doubling_partner(int rank, int j) { return rank ^ (1 << j); }

// What every recursive algorithm shares: power-of-two worlds, pairs, no copy-engine form
// (codegen emits these for tma and register only).
struct rhd_base : sm_only {
  static constexpr sync_kind kSync = sync_kind::pairs;
  PK_HD static bool world_ok(int world) { return power_of_two(world); }
};

// One halving phase on units of `unit(u)` = [lo, hi) elements: sum the rank's partial and the
// partner's over the units the rank keeps; phase 0 reads `in` at in_off(u), later phases the
// scratch (relative to the first unit kept in phase 0), the last phase writes `out`.
template <class C, class G, typename T, class Unit>
PK_DEV bool halving_phase(const G& g, const ctx& c, int k, int L, Unit unit, size_t in_base,
                          T* out_unit, block_smem& sm) {
  const int w = c.world;
  const int size = w >> (k + 1);
  const int lo = c.rank & ~(size - 1);
  const int partner = c.rank ^ size;
  const int base0 = c.rank & (w >> 1);
  const size_t e_lo = unit(lo).lo, e_hi = unit(lo + size - 1).hi;
  const size_t rel = e_lo - unit(base0).lo;
  const span s = block_piece<T>(e_hi - e_lo, c);
  cptrs<T> src{};
  if (k == 0) {
    src.add(g.in[c.rank] + in_base + e_lo + s.lo);
    src.add(g.in[partner] + in_base + e_lo + s.lo);
  } else {
    src.add(g.scratch[c.rank] + rel + s.lo);
    src.add(g.scratch[partner] + rel + s.lo);
  }
  T* dst = k == L - 1 ? out_unit + s.lo : g.scratch[c.rank] + rel + s.lo;
  return reduce_to<C>(g, c, one(dst), src, s.size(), sm);
}

// reduce-scatter: input w shards per rank, output shard `rank`.
struct reduce_scatter_rhd : rhd_base {
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t n, int world, size_t elem) {
    return world > 2 ? static_cast<size_t>(world / 2) * n * elem : 0;
  }
  PK_HD static int phases(int world) { return log2_of(world); }
  PK_HD static int partner(int rank, int p, int world) { return halving_partner(rank, p, world); }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    const size_t n = g.count;
    auto unit = [n](int u) { return span{static_cast<size_t>(u) * n, static_cast<size_t>(u + 1) * n}; };
    return halving_phase<C>(g, c, p, log2_of(c.world), unit, 0, g.out[c.rank], sm);
  }
#endif
};

// all-gather: rank r's shard to slot r of every output.
struct all_gather_rhd : rhd_base {
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }
  PK_HD static int phases(int world) { return log2_of(world); }
  PK_HD static int partner(int rank, int p, int) { return doubling_partner(rank, p); }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    using T = typename G::value_type;
    const size_t n = g.count;
    T* mine = g.out[c.rank];
    const int q = doubling_partner(c.rank, p);
    if (p == 0)  // own shard and the partner's, both from the inputs
      return copy_range<C>(g, c, one(mine + c.rank * n), g.in[c.rank], n, sm) &&
             copy_range<C>(g, c, one(mine + q * n), g.in[q], n, sm);
    const int size = 1 << p;
    const size_t at = static_cast<size_t>(q & ~(size - 1)) * n;
    return copy_range<C>(g, c, one(mine + at), g.out[q] + at, size * n, sm);
  }
#endif
};

// all-reduce: halving over the buffer's chunks, then doubling of the reduced chunks.
struct all_reduce_rhd : rhd_base {
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t n, int world, size_t elem) {
    return world > 2 ? round_up(n * elem, 16) : 0;
  }
  PK_HD static int phases(int world) { return 2 * log2_of(world); }
  PK_HD static int ce_phases(int world) { return 2 * log2_of(world); }
  PK_HD static int partner(int rank, int p, int world) {
    const int L = log2_of(world);
    return p < L ? halving_partner(rank, p, world) : doubling_partner(rank, p - L);
  }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int p, block_smem& sm) {
    using T = typename G::value_type;
    const int w = c.world, L = log2_of(w);
    const size_t n = g.count;
    auto unit = [n, w](int u) { return chunk_of<T>(n, w, u); };
    if (p < L) return halving_phase<C>(g, c, p, L, unit, 0, g.out[c.rank] + unit(c.rank).lo, sm);
    const int j = p - L, size = 1 << j;
    const int q = doubling_partner(c.rank, j);
    const int lo = q & ~(size - 1);
    const size_t e_lo = unit(lo).lo, e_hi = unit(lo + size - 1).hi;
    const span s = block_piece<T>(e_hi - e_lo, c);
    return copy_to<C>(g, c, one(g.out[c.rank] + e_lo + s.lo), g.out[q] + e_lo + s.lo, s.size(), sm);
  }
#endif
};

}  // namespace pkc
