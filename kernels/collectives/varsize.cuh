// collectives/varsize.cuh: the -v forms, with split sizes per rank (pkc_args::splits, elements):
// all-to-all-v, all-gather-v, reduce-scatter-v; and send/recv, whose kernel is all-to-all-v's.
//
// Buffers are packed, as torch.distributed lays them out: a rank's blocks follow each other in
// rank order, each at the sum of the sizes before it (its displacement). count = every rank's
// input and output buffer in elements (at least each rank's total; the caller sizes them so).
//
// all-to-all-v     splits: world x world, S[r][p] = elements rank r sends to rank p. Rank r's
//                  input holds its blocks for ranks 0, 1, ... (S[r][p] each); rank p's output
//                  holds the blocks from ranks 0, 1, ... (S[r][p] each).
//   direct         one phase: rank r copies its block p into rank p's output, for every p with
//                  S[r][p] > 0, peers in the config's order (copy_range: all of the rank's
//                  blocks on one block of data, then the next).
// all-gather-v     splits: world, c[r] = rank r's share. Every rank's output holds every share,
//                  share r at sum(c[q], q < r).
//   direct         one phase: rank r stores its share into its slot of every rank's output (a
//                  fan-out: one read, world stores).
// reduce-scatter-v splits: world, c[r] = rank r's share. Every rank's input holds world shares;
//                  rank r receives the reduction of share r over ranks (config::reduce_op and
//                  config::epilogue, epilogue.cuh; the bias indexed from the share's place).
//   direct         one phase: rank r pulls share r of every input and writes the result.
// send-recv        between given ranks, as one call (torch's batch_isend_irecv: a ring shift, a
//                  neighbour / halo exchange, a pipeline stage's hand-off): all-to-all-v's
//                  kernel. splits: S[r][p] = elements rank r sends to rank p (0: no message;
//                  pksim's send-recv names the pairs, e.g. offsets +1,-1 for a halo exchange,
//                  and builds the matrix). Ranks that neither send nor receive take part in
//                  nothing but the launch; no flags: a call is complete when the launch is
//                  (virtual ranks), or at the exit barrier (ranks in separate processes).
// Copy engines (all-to-all-v, send-recv, all-gather-v): the same copies, cudaMemcpyAsync per
// block, on the sender's stream.
//
// The split table. The library writes, after the peer table's pointers (abi.h; pkc_table), the
// sizes and their displacements, 64-bit words, so that no kernel sums them: a matrix (all-to-all-v,
// send/recv) as count[r][p], send displacement[r][p] (where in r's input), receive
// displacement[r][p] (where in p's output); a vector (all-gather-v, reduce-scatter-v) as
// count[r], displacement[r]. These collectives take a table at every world; the kernel checks
// that it was written for this call's pointers and splits (splits_current).
#pragma once

#include <cstdio>

#include "collective.cuh"
#include "epilogue.cuh"

namespace pkc {

using u64 = unsigned long long;

// world x world sizes: count, send displacement, receive displacement.
struct split_matrix {
  PK_HD static size_t num_splits(int world) { return static_cast<size_t>(world) * world; }
  PK_HD static size_t split_words(int world) { return 3 * num_splits(world); }
  static void fill_split_table(const u64* s, int world, u64* out) {
    const size_t w = static_cast<size_t>(world);
    u64* cnt = out;
    u64* sdisp = out + w * w;
    u64* rdisp = out + 2 * w * w;
    for (size_t r = 0; r < w; ++r) {
      u64 at = 0;
      for (size_t p = 0; p < w; ++p) {
        cnt[r * w + p] = s[r * w + p];
        sdisp[r * w + p] = at;
        at += s[r * w + p];
      }
    }
    for (size_t p = 0; p < w; ++p) {
      u64 at = 0;
      for (size_t r = 0; r < w; ++r) {
        rdisp[r * w + p] = at;
        at += s[r * w + p];
      }
    }
  }
  // Every rank's sends (a row) and receives (a column) fit in count elements.
  static int check_splits(const u64* s, int world, u64 count, char* msg, size_t len) {
    const size_t w = static_cast<size_t>(world);
    for (size_t r = 0; r < w; ++r) {
      u64 out = 0, in = 0;
      for (size_t p = 0; p < w; ++p) {
        out += s[r * w + p];
        in += s[p * w + r];
      }
      if (out > count || in > count) {
        if (msg && len)
          snprintf(msg, len, "rank %zu %s %llu elements, more than count = %llu (every rank's buffer)", r,
                   out > count ? "sends" : "receives", out > count ? out : in, count);
        return PKC_BAD_ARGUMENT;
      }
    }
    return PKC_OK;
  }
};

// world sizes: count, displacement.
struct split_vector {
  PK_HD static size_t num_splits(int world) { return static_cast<size_t>(world); }
  PK_HD static size_t split_words(int world) { return 2 * num_splits(world); }
  static void fill_split_table(const u64* s, int world, u64* out) {
    u64 at = 0;
    for (int r = 0; r < world; ++r) {
      out[r] = s[r];
      out[world + r] = at;
      at += s[r];
    }
  }
  // The shares together fit in count elements (the gathered output, the scattered input).
  static int check_splits(const u64* s, int world, u64 count, char* msg, size_t len) {
    u64 total = 0;
    for (int r = 0; r < world; ++r) total += s[r];
    if (total > count) {
      if (msg && len)
        snprintf(msg, len, "the shares sum to %llu elements, more than count = %llu (every rank's buffer)", total,
                 count);
      return PKC_BAD_ARGUMENT;
    }
    return PKC_OK;
  }
};

// Host: the displacement of entry (r, p) of a matrix from the caller's sizes (copy engines).
inline u64 send_disp(const u64* s, int w, int r, int p) {
  u64 at = 0;
  for (int q = 0; q < p; ++q) at += s[static_cast<size_t>(r) * w + q];
  return at;
}
inline u64 recv_disp(const u64* s, int w, int r, int p) {
  u64 at = 0;
  for (int q = 0; q < r; ++q) at += s[static_cast<size_t>(q) * w + p];
  return at;
}

#ifdef __CUDACC__

// Whether the table (and so its splits) was written for this call (collective.cuh
// table_current without its barrier: every thread reads the hash, the same answer in all, since
// nothing writes the table during a launch. With the barrier the register reduce-scatter-v kept
// 8 B of stack at the 128-register cap; ptxas -v, sm_90a, CUDA 13.0).
__noinline__ PK_DEV void stale_splits(pk::error_record* err, int rank, unsigned long long want,
                                      unsigned long long got) {
  if (threadIdx.x == 0)
    pk::record_error(err, pk::PK_ERR_STALE_TABLE, rank, -1, -1, static_cast<unsigned>(want),
                     static_cast<unsigned>(got));
}
template <class G>
PK_DEV bool splits_current(const G& g, const ctx& c) {
  const unsigned long long h = g.table->hash;
  if (h == g.table_hash) return true;
  stale_splits(g.flags.spin.err, c.rank, g.table_hash, h);
  return false;
}

// Rank c.rank's blocks copy its block for every rank p (S[rank][p] > 0) into p's output, peers in
// the config's order: all-to-all-v and send/recv.
template <class C, class G>
PK_DEV bool push_matrix(const G& g, const ctx& c, block_smem& sm) {
  if (!splits_current(g, c)) return false;
  const int w = c.world;
  const size_t ww = static_cast<size_t>(w) * w;
  const u64* cnt = g.splits;
  const u64* sdisp = cnt + ww;
  const u64* rdisp = cnt + 2 * ww;
  for (int k = 0; k < w; ++k) {
    const int p = peer<C>(c.rank, k, w);
    const size_t at = static_cast<size_t>(c.rank) * w + p;
    const u64 n = cnt[at];
    if (n == 0) continue;
    if (!copy_range<C>(g, c, one(g.out[p] + rdisp[at]), g.in[c.rank] + sdisp[at], n, sm)) return false;
  }
  return true;
}

#endif

template <class C, class G>
void ce_push_matrix(const G& g, int r, const ce_ctx& x) {
  using T = typename G::value_type;
  const int w = g.in.world;
  const u64* s = g.host_splits;
  for (int k = 0; k < w; ++k) {
    const int p = peer<C>(r, k, w);
    const u64 n = s[static_cast<size_t>(r) * w + p];
    if (n != 0) ce_copy_elems(g.out[p] + recv_disp(s, w, r, p), g.in[r] + send_disp(s, w, r, p), n * sizeof(T), x);
  }
}

// all-to-all-v and send/recv (codegen names it for both: pksim_core.algorithms struct).
struct all_to_all_v_direct : algorithm_defaults, split_matrix {

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    return push_matrix<C>(g, c, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    ce_push_matrix<C>(g, r, x);
  }
};

struct all_gather_v_direct : algorithm_defaults, split_vector {

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    if (!splits_current(g, c)) return false;
    const u64 n = g.splits[c.rank];
    if (n == 0) return true;
    return copy_to_ranks<C>(g, c, g.in[c.rank], g.splits[c.world + c.rank], n, sm);
  }
#endif

  template <class C, class G>
  static void ce_phase(const G& g, int r, int, const ce_ctx& x) {
    using T = typename G::value_type;
    const int w = g.in.world;
    const u64* s = g.host_splits;
    u64 at = 0;
    for (int q = 0; q < r; ++q) at += s[q];
    if (s[r] == 0) return;
    for (int k = 0; k < w; ++k) ce_copy_elems(g.out[peer<C>(r, k, w)] + at, g.in[r], s[r] * sizeof(T), x);
  }
};

struct reduce_scatter_v_direct : sm_only, split_vector {
  PK_HD static int sources(int world) { return world; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    // a stale table (splits_current) moves nothing: its sizes are not this call's
    const span s = block_piece<T>(splits_current(g, c) ? g.splits[c.rank] : 0, c);
    const size_t at = g.splits[c.world + c.rank] + s.lo;
    return reduce_from_ranks<C>(g, c, g.out[c.rank] + s.lo, at, s.size(), at, sm);
  }
#endif
};

}  // namespace pkc
