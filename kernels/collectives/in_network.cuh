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
//
// Streamed (all-reduce, reduce-scatter, all-gather): a rank's range runs in chunks of
// config::kChunkBytes (the schedule's chunk_bytes; pksim_core.kernel_contract), each cut among the
// rank's blocks; a thread holds kInFlight vectors a batch (256 threads x 4 x 16 B = 16 KiB a
// block, the default chunk's share) and issues the next batch's loads (ld_reduce) before this
// batch's stores (multimem.st), so chunk i + 1's ld_reduce overlaps chunk i's st (pksim models
// the chunks as lanes, two in flight: pksim_core.collective_model.streamed_in_network).
//
// Emulation switch, -DPKC_EMULATE_MULTIMEM=1 (without PK_ENABLE_MULTIMEM): the same chunk loop
// and flags (the entry and exit barriers of ranks in separate processes), with multimem.ld_reduce
// replaced by loads from every rank's buffer and a sum in fp32 (ranks in order 0, 1, ...), and
// multimem.st by a store into every rank's buffer. No multicast address is needed, so it runs
// as virtual ranks on one GPU (validation/prepare/collectives.py --in-network-emulated).
#pragma once

#include "collective.cuh"

#ifndef PKC_EMULATE_MULTIMEM
#define PKC_EMULATE_MULTIMEM 0
#endif
#if PKC_EMULATE_MULTIMEM || (defined(PK_ENABLE_MULTIMEM) && PK_ENABLE_MULTIMEM)
#define PKC_IN_NETWORK_DEVICE 1
#else
#define PKC_IN_NETWORK_DEVICE 0
#endif

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

#if defined(__CUDACC__) && PK_ENABLE_MULTIMEM

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

#if defined(__CUDACC__) && PKC_IN_NETWORK_DEVICE

// Vectors a thread holds per batch of the stream: 4 x 16 B.
constexpr int kInFlight = 4;

// A rank's chunk in elements: config::kChunkBytes rounded down to whole 16-byte vectors.
template <class C, typename T>
PK_DEV size_t chunk_elems() {
  const size_t e = static_cast<size_t>(C::kChunkBytes) / sizeof(T);
  return e >= kVec<T> ? e - e % kVec<T> : kVec<T>;
}

// This thread's vectors of [0, n), chunk by chunk: chunk k is [k chunk, (k + 1) chunk), cut among
// the rank's blocks (block_piece); a thread takes every blockDim.x-th vector of its block's piece.
template <typename T>
struct chunk_cursor {
  size_t n, chunk, k, i, end;
  ctx c;
  PK_DEV chunk_cursor(size_t n_, size_t chunk_, const ctx& c_) : n(n_), chunk(chunk_), k(0), i(0), end(0), c(c_) {
    open();
  }
  PK_DEV void open() {
    const size_t lo = min_size(n, k * chunk), hi = min_size(n, lo + chunk);
    const span s = block_piece<T>(hi - lo, c);
    i = lo + s.lo + static_cast<size_t>(threadIdx.x) * kVec<T>;
    end = lo + s.hi;
  }
  // The next vector's first element, or false past the range.
  PK_DEV bool next(size_t& at) {
    while (true) {
      if (i < end) {
        at = i;
        i += static_cast<size_t>(blockDim.x) * kVec<T>;
        return true;
      }
      ++k;
      if (k * chunk >= n) return false;
      open();
    }
  }
};

// The stream: load a batch, then for every batch: issue the next batch's loads, store this one.
template <class C, typename T, class Load, class Store>
PK_DEV void stream_chunks(size_t n, const ctx& c, Load load, Store store) {
  using V = typename mm_vec<T>::type;
  chunk_cursor<T> cur(n, chunk_elems<C, T>(), c);
  V a[kInFlight], b[kInFlight];
  size_t at_a[kInFlight], at_b[kInFlight];
  int na = 0;
#pragma unroll
  for (int m = 0; m < kInFlight; ++m)
    if (na == m && cur.next(at_a[m])) a[na++] = load(at_a[m]);
  while (na > 0) {
    int nb = 0;
#pragma unroll
    for (int m = 0; m < kInFlight; ++m)  // chunk i + 1: its loads in flight ...
      if (nb == m && cur.next(at_b[m])) b[nb++] = load(at_b[m]);
#pragma unroll
    for (int m = 0; m < kInFlight; ++m)  // ... while chunk i's stores drain
      if (m < na) store(at_a[m], a[m]);
#pragma unroll
    for (int m = 0; m < kInFlight; ++m) {
      a[m] = b[m];
      at_a[m] = at_b[m];
    }
    na = nb;
  }
}

// 16-byte vectors: a plain (L2) load, a sum in fp32.
template <typename V>
PK_DEV V ld_vec(const void* p) {
  const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(p));
  V v;
  memcpy(&v, &raw, sizeof(v));
  return v;
}

struct vsum_f32 {
  float x[8];
  PK_DEV void zero() {
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = 0.f;
  }
  PK_DEV void add(const float4& v) {
    x[0] += v.x, x[1] += v.y, x[2] += v.z, x[3] += v.w;
  }
  PK_DEV void add(const pk::multimem::bf16x8& v) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(v.h[k]);
      x[2 * k] += f.x, x[2 * k + 1] += f.y;
    }
  }
  PK_DEV void get(float4& v) const { v = make_float4(x[0], x[1], x[2], x[3]); }
  PK_DEV void get(pk::multimem::bf16x8& v) const {
#pragma unroll
    for (int k = 0; k < 4; ++k) v.h[k] = __floats2bfloat162_rn(x[2 * k], x[2 * k + 1]);
  }
};

// multimem.ld_reduce of element `at` of every rank's buffer: through the multicast address, or
// (emulated) loads from every rank and a sum in fp32.
template <typename T, class L>
PK_DEV typename mm_vec<T>::type reduce_vec(const L& buf, size_t at) {
  using V = typename mm_vec<T>::type;
#if PKC_EMULATE_MULTIMEM
  vsum_f32 acc;
  acc.zero();
  for (int q = 0; q < buf.world; ++q) acc.add(ld_vec<V>(buf[q] + at));
  V v;
  acc.get(v);
  return v;
#else
  return pk::multimem::ld_reduce_add(reinterpret_cast<const V*>(buf.mc + at));
#endif
}

// multimem.st of v at element `at` of every rank's buffer: through the multicast address, or
// (emulated) a store into every rank's buffer.
template <typename T, class L>
PK_DEV void store_all(const L& buf, size_t at, const typename mm_vec<T>::type& v) {
  using V = typename mm_vec<T>::type;
#if PKC_EMULATE_MULTIMEM
  for (int q = 0; q < buf.world; ++q) *reinterpret_cast<V*>(buf[q] + at) = v;
#else
  pk::multimem::st(reinterpret_cast<V*>(buf.mc + at), v);
#endif
}

#endif

struct all_reduce_in_network : sm_only {
#if defined(__CUDACC__) && PKC_IN_NETWORK_DEVICE
  // Rank r's piece of the buffer, chunk by chunk: ld_reduce from every rank, st to every rank.
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    using V = typename mm_vec<T>::type;
    const span ch = piece(g.count, c.world, c.rank, kVec<T>);
    stream_chunks<C, T>(ch.size(), c, [&](size_t at) { return reduce_vec<T>(g.in, ch.lo + at); },
                        [&](size_t at, const V& v) { store_all<T>(g.out, ch.lo + at, v); });
    return true;
  }
#endif
};

struct all_gather_in_network : sm_only {
  PK_HD static size_t out_count(size_t n, int world) { return n * world; }
#if defined(__CUDACC__) && PKC_IN_NETWORK_DEVICE
  // The rank's shard, chunk by chunk: a load of its input, st to every rank's slot r.
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    using V = typename mm_vec<T>::type;
    const T* src = g.in[c.rank];
    const size_t slot = static_cast<size_t>(c.rank) * g.count;
    stream_chunks<C, T>(g.count, c, [&](size_t at) { return ld_vec<V>(src + at); },
                        [&](size_t at, const V& v) { store_all<T>(g.out, slot + at, v); });
    return true;
  }
#endif
};

struct reduce_scatter_in_network : sm_only {
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
#if defined(__CUDACC__) && PKC_IN_NETWORK_DEVICE
  // Shard r of every rank's input, chunk by chunk: ld_reduce, a store into the rank's output.
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem&) {
    using T = typename G::value_type;
    using V = typename mm_vec<T>::type;
    T* dst = g.out[c.rank];
    const size_t slot = static_cast<size_t>(c.rank) * g.count;
    stream_chunks<C, T>(g.count, c, [&](size_t at) { return reduce_vec<T>(g.in, slot + at); },
                        [&](size_t at, const V& v) { *reinterpret_cast<V*>(dst + at) = v; });
    return true;
  }
#endif
};

struct broadcast_in_network : sm_only {
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
