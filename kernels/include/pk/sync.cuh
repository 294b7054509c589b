// pk/sync.cuh: signal / wait / barrier across ranks.
//
// Provides (device side)
//   * signal(f, peer, idx, v): add v to counter idx of rank `peer`
//         red.release.sys.global.add.u32
//   * signal_all(f, idx, v): the same on every rank;
//   * wait(f, rank, idx, expected, from_peer): spin on counter idx of `rank` (the caller's
//     own rank) until it reaches `expected` (ld.acquire.sys.global.u32), with a clock64()
//     deadline;
//   * wait_geq(ptr, expected, ctx, ...): the same on a raw counter address;
//   * barrier(f, rank, base, epoch, arrivals_per_rank): all blocks of all ranks meet, every
//     rank signalling every rank (world^2 signals: for a handful of ranks);
//   * dissemination_barrier(f, rank, world, block, blocks, base, epoch): the same meeting in
//     ceil(log2 world) rounds of one signal per rank (any world);
//   * ld_acquire_sys / red_release_sys / red_relaxed_sys / st_release_sys /
//     fence_acq_rel_sys building blocks.
//
// Memory ordering
//   signal is a release at system scope and wait an acquire at system scope, so everything
//   the signalling thread wrote (or observed) before the signal, by any path the generic
//   proxy covers (plain stores, peer stores over NVLink, atomics), is visible to every
//   thread that reads the signal's value through wait() and to whatever follows it. Writes
//   by other threads of the same block are covered because the leader signals after a
//   __syncthreads() (bar.sync puts them before the release in causality order, and release
//   is cumulative). Writes made by TMA (the async proxy) additionally need the proxy fence
//   in tma::complete_writes() before the signal; see pk/tma.cuh. barrier() and signal_all()
//   publish with one fence.acq_rel.sys followed by relaxed system-scope reds, which the PTX
//   memory model treats as a release pattern for each of them.
//
// Epochs, not resets
//   Counters only grow. Each rank keeps its own count of completed rounds (the epoch) and
//   waits for "counter >= epoch * arrivals". A barrier that reset its counter by subtracting
//   would race with a fast peer that already arrived at the next barrier; a monotonic count
//   has no such window. Comparisons are modulo 2^32 ((int)(seen - expected) >= 0), so the
//   counters may wrap.
//
// Deadlines
//   Every spin gives up after spin_ctx::timeout_cycles clock64() cycles, records
//   {rank, peer, flag index, expected, seen} in the error record (first failure wins) and
//   returns false. It also gives up early once any other thread has recorded a failure, so
//   one missing rank does not cost every waiter a full deadline. The caller must then leave
//   the kernel; the host turns the record into a message (pk/host.cuh).
#pragma once

#include "pgl.cuh"

namespace pk {

PK_DEV unsigned int ld_acquire_sys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];"
               : "=r"(v)
               : "l"(__cvta_generic_to_global(p))
               : "memory");
  return v;
}

PK_DEV void red_release_sys(unsigned int* p, unsigned int v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;"
               :
               : "l"(__cvta_generic_to_global(p)), "r"(v)
               : "memory");
}

PK_DEV void red_relaxed_sys(unsigned int* p, unsigned int v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;"
               :
               : "l"(__cvta_generic_to_global(p)), "r"(v)
               : "memory");
}

PK_DEV void st_release_sys(unsigned int* p, unsigned int v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;"
               :
               : "l"(__cvta_generic_to_global(p)), "r"(v)
               : "memory");
}

PK_DEV void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Spin until *flag >= expected (mod 2^32). `rank`, `peer` and `flag_index` only label the
// error record. Returns false on timeout or when another thread has already failed.
PK_DEV bool wait_geq(const unsigned int* flag, unsigned int expected, const spin_ctx& ctx,
                     int rank, int peer, int flag_index) {
  const long long start = clock64();
  unsigned int seen = ld_acquire_sys(flag);
  for (unsigned int iter = 0; static_cast<int>(seen - expected) < 0; ++iter) {
    if (clock64() - start > ctx.timeout_cycles) {
      record_error(ctx.err, PK_ERR_FLAG_TIMEOUT, rank, peer, flag_index, expected, seen);
      return false;
    }
    if ((iter & 63u) == 63u) {
      if (error_raised(ctx.err)) return false;
      __nanosleep(64);
    }
    seen = ld_acquire_sys(flag);
  }
  return true;
}

// Add v to counter `idx` of rank `peer`, releasing this thread's prior writes.
template <int M>
PK_DEV void signal(const flags<M>& f, int peer, int idx, unsigned int v = 1) {
  red_release_sys(f.at(peer, idx), v);
}

// Add v to counter `idx` of every rank (multimem.cuh has the multicast form, which needs
// NVLink multicast). One fence.acq_rel.sys followed by relaxed reds is the PTX release
// pattern for every one of them, at the cost of one fence instead of one per rank.
template <int M>
PK_DEV void signal_all(const flags<M>& f, int idx, unsigned int v = 1) {
  fence_acq_rel_sys();
  for (int p = 0; p < f.world(); ++p) red_relaxed_sys(f.at(p, idx), v);
}

// Wait until counter `idx` of `rank` (the calling rank) reaches `expected`. `from_peer` (or
// -1) labels the error record with the rank this counter is fed by.
template <int M>
PK_DEV bool wait(const flags<M>& f, int rank, int idx, unsigned int expected, int from_peer = -1) {
  return wait_geq(f.at(rank, idx), expected, f.spin, rank, from_peer, idx);
}

// Block-level barrier across all ranks. Every thread of the block must call it (it contains
// __syncthreads); 1-D blocks. Counters [base, base + world) of every rank belong to it.
//
// Each participating block adds 1 to counter base + my_rank on every rank (itself included),
// then waits until, for every source s, counter base + s on this rank has reached
// epoch * arrivals_per_rank. `epoch` is 1 for the first barrier on these counters since they
// were zeroed, 2 for the second, ...; `arrivals_per_rank` is how many blocks of each rank
// take part (all of a rank's blocks, for a full grid barrier). Waiting per source names the
// missing rank in the error record when a peer never arrives.
//
// Returns false (in every thread of the block) if the wait gave up; leave the kernel then.
template <int M>
__device__ bool barrier(const flags<M>& f, int rank, int base, unsigned int epoch,
                        unsigned int arrivals_per_rank = 1) {
  __syncthreads();  // every thread's prior writes happen-before the leader's release
  int ok = 1;
  if (threadIdx.x == 0) {
    const int me = rank;
    fence_acq_rel_sys();  // release pattern for all the arrivals below (see signal_all)
    for (int k = 0; k < f.world(); ++k) {
      const int p = (me + k) % f.world();  // stagger so ranks do not all hit rank 0 first
      red_relaxed_sys(f.at(p, base + me), 1u);
    }
    const unsigned int expected = epoch * arrivals_per_rank;
    for (int k = 0; k < f.world() && ok; ++k) {
      const int s = (me + k) % f.world();
      ok = wait_geq(f.at(me, base + s), expected, f.spin, me, s, base + s) ? 1 : 0;
    }
  }
  // The leader's acquire happens-before every thread's later reads via this bar.sync.
  return __syncthreads_and(ok) != 0;
}

// Dissemination barrier: every block of every rank meets, for any world. Counters [base, base
// + 2 + ceil(log2 world)) of every rank belong to it: base counts the arrivals of the rank's
// own blocks, base + 1 their release, base + 2 + k round k. The rank's block 0 waits for its
// rank's `blocks` arrivals, then in round k signals rank (rank + 2^k) mod world and waits for
// rank (rank - 2^k) mod world; after the last round every rank has heard, directly or through
// earlier rounds, from every other (Hensgen, Finkel and Manber 1988), in ceil(log2 world)
// rounds of one signal each instead of world signals per rank. Then block 0 releases the
// rank's other blocks. `F` is any flag set with `at(rank, index)` (a counter's address) and
// `spin` (pk::spin_ctx); `epoch` counts this barrier's uses on these counters (1, 2, ...), so
// nothing is reset. Ordering: arrivals are a fence + relaxed reds (the release pattern), every
// round a release and an acquire, the release of the other blocks a release: the chain carries
// every block's earlier writes to every block after the barrier (release and acquire are
// cumulative). Returns false in every thread of the block if a wait gave up.
template <class F>
__device__ bool dissemination_barrier(const F& f, int rank, int world, int block, int blocks,
                                      int base, unsigned int epoch) {
  __syncthreads();
  int ok = 1;
  if (threadIdx.x == 0) {
    if (blocks > 1) {
      fence_acq_rel_sys();
      red_relaxed_sys(f.at(rank, base), 1u);
    }
    if (block == 0) {
      if (blocks > 1)
        ok = wait_geq(f.at(rank, base), epoch * static_cast<unsigned>(blocks), f.spin, rank, rank, base);
      for (int k = 0, dist = 1; ok && dist < world; ++k, dist <<= 1) {
        const int to = rank + dist < world ? rank + dist : rank + dist - world;
        const int from = rank - dist >= 0 ? rank - dist : rank - dist + world;
        red_release_sys(f.at(to, base + 2 + k), 1u);
        ok = wait_geq(f.at(rank, base + 2 + k), epoch, f.spin, rank, from, base + 2 + k);
      }
      if (ok && blocks > 1) red_release_sys(f.at(rank, base + 1), 1u);
    } else {
      ok = wait_geq(f.at(rank, base + 1), epoch, f.spin, rank, rank, base + 1);
    }
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace pk
