// collectives/broadcast.cuh: broadcast, direct.
//
// count = elements of the buffer; every rank's output receives the root's input.
//
// direct  one phase: every rank copies the root's input into its own output (a pull, so the
//         work is spread over every rank's SMs or copy engines instead of the root's alone; the
//         root's data crosses each link once either way).
#pragma once

#include "collective.cuh"

namespace pkc {

struct broadcast_direct : algorithm_defaults {

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    return copy_range<C>(g, c, one(g.out[c.rank]), g.in[g.root], g.count, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    ce_copy_elems(g.out[r], g.in[g.root], g.count * sizeof(T), x);
  }
};

}  // namespace pkc
