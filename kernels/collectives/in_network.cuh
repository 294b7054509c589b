// collectives/in_network.cuh: NVLink-multicast (NVLS) collectives through pk::multimem.
//
// COMPILE-ONLY in this project: the machines it runs on never enable NVLink multicast (doing so
// can take shared GPUs out of service), so these kernels are built with -DPK_ENABLE_MULTIMEM=1
// and simulated, never run; their entry points refuse to launch without multicast addresses
// (pkc_args::in_mc / out_mc), which nothing here creates.
//
// all-reduce      rank r loads chunk r through the input's multicast address with
//                 multimem.ld_reduce (the switch sums every rank's copy, bf16 accumulating in
//                 fp32) and stores the sum through the output's multicast address
//                 (multimem.st: every rank receives it).
// all-gather      rank r stores its shard through the output's multicast address at slot r.
// reduce-scatter  rank r loads shard r through the input's multicast address with ld_reduce
//                 and writes its own output.
// broadcast       the root stores its input through the output's multicast address.
// 16-byte vectors only: the host checks that the bytes per rank are a multiple of 16.
#pragma once

#include "collective.cuh"

namespace pkc {

template <typename T>
struct mm_vec;
template <>
struct mm_vec<float> {
  using type = float4;
};
template <>
struct mm_vec<__nv_bfloat16> {
  using type = pk::multimem::bf16x8;
};

struct in_network_base {
  static constexpr sync_kind kSync = sync_kind::none;
  static constexpr sync_kind kCeSync = sync_kind::none;
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static size_t ce_scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }
  PK_HD static int ce_phases(int) { return 1; }
  template <class C, class G>
  static void ce_phase(const G&, int, int, const ce_ctx&) {}
};

#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM

template <typename T>
PK_DEV void mm_reduce_span(T* dst_mc_or_local, const T* src_mc, size_t n, bool to_multicast) {
  using V = typename mm_vec<T>::type;
  const size_t nv = n / kVec<T>;
  const V* s = reinterpret_cast<const V*>(src_mc);
  V* d = reinterpret_cast<V*>(dst_mc_or_local);
  for (size_t i = threadIdx.x; i < nv; i += blockDim.x) {
    const V v = pk::multimem::ld_reduce_add(s + i);
    if (to_multicast) pk::multimem::st(d + i, v);
    else d[i] = v;
  }
}

template <typename T>
PK_DEV void mm_store_span(T* dst_mc, const T* src, size_t n) {
  using V = typename mm_vec<T>::type;
  const size_t nv = n / kVec<T>;
  const V* s = reinterpret_cast<const V*>(src);
  V* d = reinterpret_cast<V*>(dst_mc);
  for (size_t i = threadIdx.x; i < nv; i += blockDim.x) {
    const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(s + i));
    V v;
    memcpy(&v, &raw, sizeof(v));
    pk::multimem::st(d + i, v);
  }
}

#endif

struct all_reduce_in_network : in_network_base {
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    const span ch = piece(g.count, c.world, c.rank, kVec<T>);
    const span s = block_piece<T>(ch.size(), c);
    mm_reduce_span(g.out.mc + ch.lo + s.lo, g.in.mc + ch.lo + s.lo, s.size(), true);
    return true;
  }
#endif
};

struct all_gather_in_network : in_network_base {
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }
#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    mm_store_span(g.out.mc + c.rank * g.count + s.lo, g.in[c.rank] + s.lo, s.size());
    return true;
  }
#endif
};

struct reduce_scatter_in_network : in_network_base {
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    mm_reduce_span(g.out[c.rank] + s.lo, g.in.mc + c.rank * g.count + s.lo, s.size(), false);
    return true;
  }
#endif
};

struct broadcast_in_network : in_network_base {
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    if (c.rank != g.root) return true;
    const span s = block_piece<T>(g.count, c);
    mm_store_span(g.out.mc + s.lo, g.in[g.root] + s.lo, s.size());
    return true;
  }
#endif
};

}  // namespace pkc
