// pk/tma.cuh: TMA (bulk copy engine) transfers to and from peer memory, and their completion.
//
// Provides (device side, namespace pk::tma; every copy is issued by ONE thread)
//   * mbarrier helpers: mbar_init, mbar_init_fence, mbar_arrive_expect_tx, mbar_try_wait,
//     mbar_wait (parity wait with a clock64() deadline);
//   * load_async: global (local or peer) -> shared, completing on an mbarrier (complete_tx);
//   * store_async: shared -> global (local or peer), bulk-group completion;
//   * store_add_async: shared -> global reduce-add, for float (.add.f32) and bf16
//     (.add.noftz.bf16), bulk-group completion;
//   * commit_group, wait_group<N>, wait_group_read<N>;
//   * load_tile_async / store_tile_async / store_add_tile_async: 2-D tensor-map tile copies
//     (cp.async.bulk.tensor.2d) taking a `const CUtensorMap*` that points at a
//     __grid_constant__ kernel parameter (or __constant__ / global memory), and prefetch_map;
//     maps come from pk::make_tile_map_2d (pk/host.cuh); stores at a ragged right edge write
//     up to the next 16-byte boundary (see the tile section below);
//   * fence_shared_to_async, fence_global_async, complete_writes, acquire_for_async_reads;
//   * split_for_bulk: how much of a transfer may go through the bulk path; align_smem;
//   * lds128 / sts128: 16-byte ld.shared / st.shared at a shared-memory address (smem_u32),
//     for the threads that work on staged data.
//
// Constraints (PTX ISA): non-tensor bulk copies need 16-byte aligned addresses on both sides
// and a size that is a multiple of 16. split_for_bulk() returns the part that qualifies; the
// rest (the tail, or everything when an address is misaligned) goes through the register
// path in pk/ldst.cuh. Tensor-copy shared-memory buffers must be 128-byte aligned.
//
// Memory ordering: what must happen between "the TMA writes to a peer are done" and
// "the peer may read them".
//   1. Bulk copies run in the async proxy. Completion of a bulk group is observed with
//      cp.async.bulk.wait_group N. The .read variant only waits until the SOURCE (our shared
//      memory) has been read, so the buffer may be reused; the destination writes may still
//      be in flight. Before signalling a peer we therefore need the plain form,
//      cp.async.bulk.wait_group 0, which waits until the writes themselves have been performed
//      and made visible to the executing thread.
//   2. Those writes were made by the async proxy. The signal is a generic-proxy release
//      (red.release.sys, pk/sync.cuh), and release/acquire orders memory operations of one
//      proxy only: the memory model requires a proxy fence to order async-proxy accesses with
//      generic-proxy accesses to the same state space. So after the wait the issuing thread
//      executes fence.proxy.async.global (bidirectional, .global state space). Now the async
//      writes precede, in this thread's order, the generic release.
//   3. The release at .sys scope is cumulative: a peer whose ld.acquire.sys (wait()) reads the
//      signalled value then observes the data with ordinary loads. If the peer reads it
//      through the async proxy instead (a TMA load), it needs the mirror image on its side:
//      acquire, then fence.proxy.async.global (acquire_for_async_reads), then the load.
//   4. When several threads of a block issue bulk copies, each issuer runs complete_writes()
//      on its own groups (bulk groups are per thread), then __syncthreads(), then one thread
//      signals; bar.sync carries the ordering to the signalling thread.
//   complete_writes() = steps 1 + 2. The mirror problem exists on the way in: shared memory
//   written with ordinary stores must be fenced with fence.proxy.async.shared::cta by the
//   writing threads, followed by __syncthreads(), before a bulk store reads it.
//
// Reductions: the PTX ISA performs each element update of cp.reduce.async.bulk as an atomic
// read-modify-write (relaxed, .gpu scope) at the destination, so several blocks or virtual
// ranks may reduce into the same buffer concurrently; the order of the additions (and so the
// bf16 rounding) is not fixed. Concurrent reductions from several GPUs into one peer buffer
// rely on the owner's L2 performing them, which is what ParallelKittens' store_add relies on
// too; only a real multi-GPU run confirms it.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only; no driver API is called here)
#include <cuda_bf16.h>

#include "common.cuh"

namespace pk {
namespace tma {

PK_DEV uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
PK_DEV uint64_t gmem_u64(const void* p) {
  return static_cast<uint64_t>(__cvta_generic_to_global(p));
}

PK_DEV uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
PK_DEV void sts128(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// Round a (dynamic) shared-memory pointer up to `A` bytes; allocate A - 16 bytes of slack.
template <size_t A = 128>
PK_DEV unsigned char* align_smem(void* p) {
  static_assert(A >= 16 && (A & (A - 1)) == 0, "alignment must be a power of two >= 16");
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<unsigned char*>((u + (A - 1)) & ~static_cast<uintptr_t>(A - 1));
}

// ---- what may go through the bulk path -------------------------------------------------

struct bulk_split {
  size_t body;  // leading bytes for the bulk path (a multiple of 16; may be 0)
  size_t tail;  // remaining bytes, for the register path
};

// Split a dst <- src transfer of `bytes`; a single bulk instruction should move at most a
// shared-memory stage, so callers cut `body` into chunks.
PK_HD bulk_split split_for_bulk(const void* dst, const void* src, size_t bytes) {
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u) == 0;
  bulk_split s;
  s.body = aligned ? (bytes & ~static_cast<size_t>(15)) : 0;
  s.tail = bytes - s.body;
  return s;
}

// ---- mbarrier ---------------------------------------------------------------------------
// A phase completes when all `arrivals` arrivals have happened and every byte announced by
// arrive_expect_tx has been delivered. Waiters name the phase by its parity: the first phase
// after init has parity 0, the next 1, and so on; flip your parity after each completed wait.
// One phase can await at most 2^20 - 1 bytes (the tx-count range).

PK_DEV void mbar_init(uint64_t* bar, unsigned int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
               :
               : "r"(smem_u32(bar)), "r"(arrivals)
               : "memory");
}

// After mbar_init and before the __syncthreads() that publishes the barrier: makes the
// initialisation visible to the async proxy, which performs the complete_tx updates.
PK_DEV void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

PK_DEV void mbar_arrive_expect_tx(uint64_t* bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :
               : "r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

PK_DEV bool mbar_try_wait(uint64_t* bar, unsigned int parity) {
  uint32_t done;
  asm volatile(
      "{\n\t"
      ".reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t"
      "}"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// Wait for the phase with this parity to complete. try_wait has acquire semantics at CTA
// scope, so the bytes TMA delivered are visible to this thread afterwards. Returns false
// (and records PK_ERR_MBAR_TIMEOUT) after the deadline.
PK_DEV bool mbar_wait(uint64_t* bar, unsigned int parity, const spin_ctx& ctx, int rank) {
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > ctx.timeout_cycles) {
      record_error(ctx.err, PK_ERR_MBAR_TIMEOUT, rank, -1, -1, parity, parity ^ 1u);
      return false;
    }
  }
  return true;
}

// ---- non-tensor bulk copies --------------------------------------------------------------

// global (any rank's) -> shared; `bytes` must also have been announced on `bar` by
// mbar_arrive_expect_tx (before or together with this call). load_async_u32 takes the
// destination and the mbarrier as shared-memory addresses (smem_u32), for callers that convert
// them once rather than per load (pkc::tma_stage_n: docs/decisions/D58.md).
PK_DEV void load_async_u32(uint32_t smem_dst, const void* gmem_src, unsigned int bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      :
      : "r"(smem_dst), "l"(gmem_u64(gmem_src)), "r"(bytes), "r"(bar)
      : "memory");
}
PK_DEV void load_async(void* smem_dst, const void* gmem_src, unsigned int bytes, uint64_t* bar) {
  load_async_u32(smem_u32(smem_dst), gmem_src, bytes, smem_u32(bar));
}

PK_DEV void store_async(void* gmem_dst, const void* smem_src, unsigned int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               :
               : "l"(gmem_u64(gmem_dst)), "r"(smem_u32(smem_src)), "r"(bytes)
               : "memory");
}

PK_DEV void store_add_async(float* gmem_dst, const float* smem_src, unsigned int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               :
               : "l"(gmem_u64(gmem_dst)), "r"(smem_u32(smem_src)), "r"(bytes)
               : "memory");
}

PK_DEV void store_add_async(__nv_bfloat16* gmem_dst, const __nv_bfloat16* smem_src,
                            unsigned int bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;"
      :
      : "l"(gmem_u64(gmem_dst)), "r"(smem_u32(smem_src)), "r"(bytes)
      : "memory");
}

PK_DEV void commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N of this thread's committed bulk groups are pending, writes included.
template <int N = 0>
PK_DEV void wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" : : "n"(N) : "memory");
}

// Wait until at most N groups still READ their shared-memory source (buffer reuse only).
template <int N = 0>
PK_DEV void wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" : : "n"(N) : "memory");
}

// ---- proxy fences ------------------------------------------------------------------------

// Generic-proxy writes to shared memory -> later async-proxy reads (bulk stores) of it.
PK_DEV void fence_shared_to_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Orders async-proxy and generic-proxy accesses to global memory, both directions.
PK_DEV void fence_global_async() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// In every thread that issued bulk writes, before the (generic, release) signal to a peer.
PK_DEV void complete_writes() {
  wait_group<0>();
  fence_global_async();
}

// After an acquire that published peer data, before reading that data with TMA loads.
PK_DEV void acquire_for_async_reads() { fence_global_async(); }

// ---- 2-D tensor-map tiles ----------------------------------------------------------------
// c0 is the innermost (contiguous) coordinate and c1 the outer one, both in elements. Out of
// bounds parts of a box read as zero on loads. Stores and reduce-adds skip out-of-bounds rows
// and whole out-of-bounds 16-byte chunks, but they write global memory in whole 16-byte
// chunks: when the inner extent (cols * element size) is not a multiple of 16 bytes, a box
// that crosses the right edge also writes the columns up to the next 16-byte boundary of
// every row it covers (pk::tma_store_cols in pk/host.cuh), with what the tile holds there.
// Keep those columns as scratch padding (make_tile_map_2d documents the rules).
//
// Completion bytes: a tensor load always delivers the whole box (out-of-bounds elements as
// fill), so mbar_arrive_expect_tx announces box_rows * box_cols * sizeof(T), also for a
// partial box at an edge.

PK_DEV void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" : : "l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

PK_DEV void load_tile_async(void* smem_dst, const CUtensorMap* map, int c0, int c1,
                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];"
      :
      : "r"(smem_u32(smem_dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1),
        "r"(smem_u32(bar))
      : "memory");
}

PK_DEV void store_tile_async(const CUtensorMap* map, int c0, int c1, const void* smem_src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
               :
               : "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(smem_src))
               : "memory");
}

// Element-wise atomic add of the tile into the tensor (element type from the map: f32 adds
// in f32, bf16 in bf16).
PK_DEV void store_add_tile_async(const CUtensorMap* map, int c0, int c1, const void* smem_src) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
      :
      : "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(smem_src))
      : "memory");
}

}  // namespace tma
}  // namespace pk
