// collectives/all_to_all.cuh: all-to-all, direct.
//
// count = elements of each block a rank sends to one peer; input and output hold world blocks
// (nccl-tests: the --bytes of an all-to-all are the input per rank). Block p of rank r's input
// lands in block r of rank p's output.
//
// direct  one phase: rank r stores its block p into every rank p's output, peers in the
//         config's order (staggered: r, r+1, ... so the ranks do not all hit rank 0 first).
#pragma once

#include "collective.cuh"

namespace pkc {

struct all_to_all_direct : algorithm_defaults {
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    for (int k = 0; k < c.world; ++k) {
      const int p = peer<C>(c.rank, k, c.world);
      if (!copy_range<C>(g, c, one(g.out[p] + c.rank * g.count), g.in[c.rank] + p * g.count, g.count, sm))
        return false;
    }
    return true;
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    for (int k = 0; k < w; ++k) {
      const int p = peer<C>(r, k, w);
      ce_copy_elems(g.out[p] + r * g.count, g.in[r] + p * g.count, g.count * sizeof(T), x);
    }
  }
};

}  // namespace pkc
