// collectives/rooted.cuh: the collectives with a root (g.root, pkc_args::root): reduce, gather,
// scatter.
//
// reduce    count = elements of the buffer; the root's output receives the reduction over ranks
//           of every rank's input (config::reduce_op, and config::epilogue: epilogue.cuh); the
//           other ranks' outputs are not written.
//   direct    one phase: the root's blocks pull the whole buffer of every rank and write the
//             result (world reads, one write per element; the other ranks' blocks do nothing).
//   two-shot  one phase: rank r reduces chunk r of every rank's input (pkc::chunk_of) and
//             stores it into chunk r of the root's output: every rank's SMs work, the root's
//             links carry (world - 1) / world of the buffer in.
// gather    count = elements of each rank's shard; the root's output holds world shards, shard r
//           at r x count (nccl-tests: the --bytes of a gather are the gathered buffer).
//   direct    one phase: rank r stores its shard into slot r of the root's output (a push).
// scatter   count = elements of each rank's shard; the root's input holds world shards, rank r
//           receives shard r (nccl-tests: the --bytes of a scatter are the root's input).
//   direct    one phase: rank r copies shard r of the root's input into its own output (a pull,
//             so every rank's SMs or copy engines work, not the root's alone).
// Copy engines (gather, scatter): the same copies with cudaMemcpyAsync, one stream per rank.
// Every rank's buffers are sized alike (in_count / out_count), as the caller allocates them.
#pragma once

#include "collective.cuh"
#include "all_reduce.cuh"
#include "epilogue.cuh"

namespace pkc {

struct reduce_direct : sm_only {
  PK_HD static int sources(int world) { return world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    if (c.rank != g.root) return true;
    const span s = block_piece<T>(g.count, c);
    return reduce_from_ranks<C, may_shift::no>(g, c, g.out[c.rank] + s.lo, s.lo, s.size(), s.lo, sm);  // whole lines
  }
#endif
};

struct reduce_two_shot : sm_only {
  PK_HD static int sources(int world) { return world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span ch = chunk_of<T>(g.count, c.world, c.rank);
    const span s = block_piece<T>(ch.size(), c);
    const size_t at = ch.lo + s.lo;
    return reduce_from_ranks<C, may_shift::no>(g, c, g.out[g.root] + at, at, s.size(), at, sm);  // whole lines
  }
#endif
};

struct gather_direct : algorithm_defaults {
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    return copy_range<C>(g, c, one(g.out[g.root] + c.rank * g.count), g.in[c.rank], g.count, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    ce_copy_elems(g.out[g.root] + r * g.count, g.in[r], g.count * sizeof(T), x);
  }
};

struct scatter_direct : algorithm_defaults {
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    return copy_range<C>(g, c, one(g.out[c.rank]), g.in[g.root] + c.rank * g.count, g.count, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    ce_copy_elems(g.out[r], g.in[g.root] + r * g.count, g.count * sizeof(T), x);
  }
};

}  // namespace pkc
