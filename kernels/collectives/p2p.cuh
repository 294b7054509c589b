// collectives/p2p.cuh: send/recv between given ranks, as one call (torch's batch_isend_irecv:
// a ring shift, a neighbour / halo exchange, a pipeline stage's hand-off).
//
// splits: world x world, S[r][p] = elements rank r sends to rank p (0: no message; pksim's
// send-recv names the pairs, e.g. offsets +1,-1 for a halo exchange, and builds the matrix).
// Packed buffers (varsize.cuh's split table): rank r's input holds its messages in the order of
// their destinations, rank p's output the messages it receives in the order of their sources.
// Ranks that neither send nor receive take part in nothing but the launch.
//
// direct  one phase: the sender pushes each of its messages into the receiver's output (copy_range,
//         destinations in the config's order from the sender); no flags: a call is complete when
//         the launch is (virtual ranks), or at the exit barrier (ranks in separate processes).
// Copy engines: one cudaMemcpyAsync per message on the sender's stream.
#pragma once

#include "varsize.cuh"

namespace pkc {

struct send_recv_direct : split_matrix {
  static constexpr sync_kind kSync = sync_kind::none;
  static constexpr sync_kind kCeSync = sync_kind::all;
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static size_t ce_scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }
  PK_HD static int ce_phases(int) { return 1; }

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

}  // namespace pkc
