// collectives/epilogue.cuh: reductions with a reduce op and a fused element-wise epilogue, and the
// all-reduce / reduce-scatter algorithms that use them.
//
// A config of the extended kernels (codegen's rooted, -v, send/recv and epilogue kernels) names
//   using reduce_op = pkc::op_sum | op_avg | op_min | op_max;
//   using epilogue  = pkc::ep_none | ep_scale | ep_bias | ep_scale_bias;
// and every output element is
//   out[i] = round_T( reduce_op over ranks of in_r[i]  [x 1/world: avg]  [x alpha]  [+ bias[i % bias_count]] )
// accumulated in fp32 (the sources in the rank order of the move), i the element's index in the
// reduced buffer (the whole buffer of an all-reduce or reduce, the unscattered input of a
// reduce-scatter), alpha and bias run-time arguments (pkc_args). AVG is a sum scaled by 1/world;
// MIN and MAX of bf16 values are exact; NaNs are dropped as fminf / fmaxf drop them.
//
// The plain sum (op_sum, ep_none) goes through collective.cuh's tuned routines (reduce_to,
// reduce_list); anything else through the routines below, which mirror them move for move
// (registers: the same 16-byte loads in flight per thread; TMA: the same stages, the op and
// the epilogue applied in the stage before its bulk stores), so the moves the model costs are
// the same (pksim.workloads.phases; the epilogue's arithmetic and its bias reads, a vector that
// stays in L2, are not costed: docs/decisions.md D53).
//
// one-shot / two-shot all-reduce and direct reduce-scatter with an epilogue: the kernels of
// all_reduce.cuh / reduce_scatter.cuh with reduce_ep in place of reduce_to. No copy-engine form
// (a copy engine cannot apply the op; codegen emits these for tma and register).
#pragma once

#include <math.h>

#include <type_traits>

#include "collective.cuh"
#include "all_reduce.cuh"

namespace pkc {

// ---- reduce ops and epilogues ---------------------------------------------------------------

struct op_sum {
  static constexpr bool kAvg = false;
  PK_HD static float init() { return 0.f; }
#ifdef __CUDACC__
  PK_DEV static float apply(float a, float b) { return a + b; }
#endif
};
struct op_avg : op_sum {
  static constexpr bool kAvg = true;
};
struct op_min {
  static constexpr bool kAvg = false;
  PK_HD static float init() { return INFINITY; }
#ifdef __CUDACC__
  PK_DEV static float apply(float a, float b) { return fminf(a, b); }
#endif
};
struct op_max {
  static constexpr bool kAvg = false;
  PK_HD static float init() { return -INFINITY; }
#ifdef __CUDACC__
  PK_DEV static float apply(float a, float b) { return fmaxf(a, b); }
#endif
};

struct ep_none { static constexpr bool kScale = false, kBias = false; };
struct ep_scale { static constexpr bool kScale = true, kBias = false; };
struct ep_bias { static constexpr bool kScale = false, kBias = true; };
struct ep_scale_bias { static constexpr bool kScale = true, kBias = true; };

// Whether config C reduces by the plain sum with no epilogue (collective.cuh's routines).
template <class C>
constexpr bool plain_sum =
    std::is_same<typename C::reduce_op, op_sum>::value && std::is_same<typename C::epilogue, ep_none>::value;

// The run-time terms: scale = 1/world (avg) x alpha (scale epilogues), the bias vector.
struct ep_args {
  float scale;
  const void* bias;
  size_t bias_count;
};

// What every algorithm without a copy-engine form declares for the host (entry.cuh traits).
struct sm_only {
  static constexpr sync_kind kCeSync = sync_kind::none;
  PK_HD static size_t ce_scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int ce_phases(int) { return 1; }
  template <class C, class G>
  static void ce_phase(const G&, int, int, const ce_ctx&) {}
};

#ifdef __CUDACC__

template <class C, class G>
PK_DEV ep_args make_ep(const G& g) {
  float s = 1.f;
  // 1/world rounded once (__frcp_rn: a division's subroutine cost the register one-shot 8-16 B
  // of stack at the 128-register cap; ptxas -v, sm_90a, CUDA 13.0)
  if (C::reduce_op::kAvg) s = __frcp_rn(static_cast<float>(g.in.world));
  if (C::epilogue::kScale) s *= g.alpha;
  return ep_args{s, g.bias, static_cast<size_t>(g.bias_count)};
}

// The V elements of a 16-byte vector as floats.
PK_DEV void unpack_vec(float* f, const uint4& raw, float) {
  const float* x = reinterpret_cast<const float*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) f[k] = x[k];
}
PK_DEV void unpack_vec(float* f, const uint4& raw, __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 x = __bfloat1622float2(h[k]);
    f[2 * k] = x.x;
    f[2 * k + 1] = x.y;
  }
}

template <class Op, typename T>
PK_DEV void combine_vec(float* acc, const uint4& raw) {
  float f[kVec<T>];
  unpack_vec(f, raw, T{});
#pragma unroll
  for (size_t k = 0; k < kVec<T>; ++k) acc[k] = Op::apply(acc[k], f[k]);
}

// The epilogue of `count` consecutive elements whose first is bias entry j (< bias_count, which
// the host keeps below 2^32: 32-bit positions). kVecBias: read a vector of the bias at once when
// it lies on the 16-byte grid (the TMA stage: 2 % faster with it; the register path 5 % slower,
// its per-element reads kept: comm suite runs 2 and 3, docs/validation/comm.md).
template <class Op, class Ep, typename T, int count, bool kVecBias = false>
PK_DEV void finish_at(float* acc, unsigned j, const ep_args& e) {
  if constexpr (Op::kAvg || Ep::kScale) {
#pragma unroll
    for (int k = 0; k < count; ++k) acc[k] *= e.scale;
  }
  if constexpr (Ep::kBias) {
    const T* b = static_cast<const T*>(e.bias);
    const unsigned bc = static_cast<unsigned>(e.bias_count);
    if (kVecBias && count == static_cast<int>(kVec<T>) && j % count == 0 && j + count <= bc && aligned16(b)) {
      // a whole vector of the bias (a row of a multiple of 16 bytes, vectors on its grid)
      float f[kVec<T>];
      unpack_vec(f, *reinterpret_cast<const uint4*>(b + j), T{});
#pragma unroll
      for (int k = 0; k < count; ++k) acc[k] += f[k];
      return;
    }
#pragma unroll
    for (int k = 0; k < count; ++k) {
      acc[k] += to_f32(b[j]);
      if (++j == bc) j = 0;
    }
  }
}

// ... whose first has index i in the reduced buffer (a modulo: for a few elements only).
template <class Op, class Ep, typename T, int count>
PK_DEV void finish(float* acc, size_t i, const ep_args& e) {
  finish_at<Op, Ep, T, count>(acc, Ep::kBias ? static_cast<unsigned>(i % e.bias_count) : 0u, e);
}

// A bias position that walks a loop: the loops below step their element index by a fixed
// stride, so the bias entry advances by stride % bias_count with one wrap, in 32 bits; a 64-bit
// modulo per vector in the loop gave the register reduce-scatter with a bias 40-72 B of stack at
// the 128-register cap and ran it 15-30 % slower than the sum (ptxas -v, sm_90a, CUDA 13.0; H200).
struct bias_walk {
  unsigned j = 0, bc = 1;
  PK_DEV unsigned plus(unsigned d) const {   // d < bc < 2^32: j + d < 2^33 in 64 bits, once
    const unsigned x = j + d;
    return (x < j || x >= bc) ? x - bc : x;
  }
  PK_DEV void advance(unsigned d) { j = plus(d); }
};
template <class Ep>
PK_DEV bias_walk walk_from(size_t i, const ep_args& e) {
  bias_walk w;
  if constexpr (Ep::kBias) {
    w.bc = static_cast<unsigned>(e.bias_count);
    w.j = static_cast<unsigned>(i % e.bias_count);
  }
  return w;
}
template <class Ep>
PK_DEV unsigned stride_mod(size_t d, const ep_args& e) {
  if constexpr (Ep::kBias) return static_cast<unsigned>(d % e.bias_count);
  else return 0u;
}

// ---- register path ---------------------------------------------------------------------------

// One element: dst[d][i] = finish(op over sources of src[q][i]); `at` its index in the buffer.
// Sets at compile-time slots (PKC_EACH: no stack), lists through at() (wide kernels).
template <class Op, class Ep, typename T>
PK_DEV void reg_ep_scalar(const ptrs<T>& dst, const cptrs<T>& src, size_t i, size_t at, const ep_args& e) {
  float a = Op::init();
  PKC_EACH(q, src.n) a = Op::apply(a, to_f32(__ldcg(src.p[q] + i)));
  finish<Op, Ep, T, 1>(&a, at, e);
  PKC_EACH(d, dst.n) dst.p[d][i] = from_f32<T>(a);
}
template <class Op, class Ep, typename T, class D, class S>
PK_DEV void reg_ep_scalar_list(const D& dst, const S& src, size_t i, size_t at, const ep_args& e) {
  float a = Op::init();
  for (int q = 0; q < src.n; ++q) a = Op::apply(a, to_f32(__ldcg(src.at(q) + i)));
  finish<Op, Ep, T, 1>(&a, at, e);
  for (int d = 0; d < dst.n; ++d) dst.at(d)[i] = from_f32<T>(a);
}

// The vector part: U vectors of each of up to Q sources per thread and round, all loaded before
// any is combined (reg_reduce_body's loads in flight).
template <int U, int Q, class Op, class Ep, typename T>
PK_DEV void reg_ep_body(const ptrs<T>& dst, const cptrs<T>& src, size_t head, size_t nv, size_t base,
                        const ep_args& e, pk::ldst::group g) {
  constexpr size_t V = kVec<T>;
  bias_walk at = walk_from<Ep>(base + head + g.tid * V, e);   // the bias entry of vector i0
  const unsigned du = stride_mod<Ep>(g.size * V, e);         // ... of vector i0 + g.size
  const unsigned dround = stride_mod<Ep>(U * g.size * V, e); // ... of the next round
  for (size_t i0 = g.tid; i0 < nv; i0 += U * g.size, at.advance(dround)) {
    float acc[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (size_t k = 0; k < V; ++k) acc[u][k] = Op::init();
    uint4 raw[U][Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      if (q < src.n) {
        const uint4* sv = reinterpret_cast<const uint4*>(src.p[q] + head);
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (i0 + u * g.size < nv) raw[u][q] = __ldcg(sv + i0 + u * g.size);
      }
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      if (q < src.n) {
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (i0 + u * g.size < nv) combine_vec<Op, T>(acc[u], raw[u][q]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * g.size < nv) finish_at<Op, Ep, T, static_cast<int>(V)>(acc[u], u == 0 ? at.j : at.plus(du), e);
    PKC_EACH(d, dst.n) {
      uint4* dv = reinterpret_cast<uint4*>(dst.p[d] + head);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * g.size < nv) dv[i0 + u * g.size] = pack_vec(acc[u], T{});
    }
  }
}

// dst[d][i] = finish(op over src[q][i]) for up to PKC_SET_SLOTS of each (reg_reduce's shape:
// 16-byte vectors when every pointer is co-aligned, else scalars); `base`: the index of
// element 0 in the reduced buffer.
template <class Op, class Ep, typename T>
PK_DEV void reg_reduce_ep(const ptrs<T>& dst, const cptrs<T>& src, size_t n, size_t base, const ep_args& e,
                          pk::ldst::group g) {
  if (n == 0 || dst.n == 0) return;
  constexpr size_t V = kVec<T>;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(dst.p[0]) & 15u;
  bool co = true;
  PKC_EACH(d, dst.n) co = co && ((reinterpret_cast<uintptr_t>(dst.p[d]) & 15u) == a0);
  PKC_EACH(q, src.n) co = co && ((reinterpret_cast<uintptr_t>(src.p[q]) & 15u) == a0);
  size_t head = n, nv = 0;
  if (co && a0 % sizeof(T) == 0) {
    head = ((16u - a0) & 15u) / sizeof(T);
    if (head > n) head = n;
    nv = (n - head) / V;
  }
  for (size_t i = g.tid; i < head; i += g.size) reg_ep_scalar<Op, Ep, T>(dst, src, i, base + i, e);
  // One vector of each source per thread and round (the op and the epilogue take the registers
  // a second vector would: with two, the bias kernels spilled at the 128-register cap and the
  // avg two-shot at 4 ranks, at the cap without spilling, ran 1.8x slower than with a bias and
  // one; docs/validation/comm.md).
  constexpr int U = 1;
  if (src.n <= 2) reg_ep_body<U, 2, Op, Ep>(dst, src, head, nv, base, e, g);
  else if (src.n <= 4) reg_ep_body<U, 4, Op, Ep>(dst, src, head, nv, base, e, g);
  else reg_ep_body<1, PKC_SET_SLOTS, Op, Ep>(dst, src, head, nv, base, e, g);
  for (size_t i = head + nv * V + g.tid; i < n; i += g.size) reg_ep_scalar<Op, Ep, T>(dst, src, i, base + i, e);
}

// The same for lists of any length (wide kernels): sources PKC_SET_SLOTS at a time into one
// accumulator per vector, the result stored PKC_SET_SLOTS destinations at a time (reg_reduce_many).
template <class Op, class Ep, typename T, class D, class S>
PK_DEV void reg_reduce_many_ep(const D dst, const S src, size_t n, size_t base, const ep_args& e,
                               pk::ldst::group g) {
  if (n == 0 || dst.n == 0 || src.n == 0) return;
  constexpr size_t V = kVec<T>;
  const int a0 = dst.misalignment();
  size_t head = n, nv = 0;
  if (a0 >= 0 && a0 == src.misalignment() && a0 % sizeof(T) == 0) {
    head = ((16u - a0) & 15u) / sizeof(T);
    if (head > n) head = n;
    nv = (n - head) / V;
  }
  for (size_t i = g.tid; i < head; i += g.size) reg_ep_scalar_list<Op, Ep, T>(dst, src, i, base + i, e);
  for (size_t i = g.tid; i < nv; i += g.size) {
    float acc[V];
#pragma unroll
    for (size_t k = 0; k < V; ++k) acc[k] = Op::init();
    for (int q0 = 0; q0 < src.n; q0 += PKC_SET_SLOTS) {
      cptrs<T> b;
      src.fill_set(b, q0);
      uint4 raw[PKC_SET_SLOTS];
      PKC_EACH(q, b.n) raw[q] = __ldcg(reinterpret_cast<const uint4*>(b.p[q] + head) + i);
      PKC_EACH(q, b.n) combine_vec<Op, T>(acc, raw[q]);
    }
    finish<Op, Ep, T, static_cast<int>(V)>(acc, base + head + i * V, e);
    const uint4 v = pack_vec(acc, T{});
    for (int d0 = 0; d0 < dst.n; d0 += PKC_SET_SLOTS) {
      ptrs<T> b;
      dst.fill_set(b, d0);
      PKC_EACH(d, b.n) reinterpret_cast<uint4*>(b.p[d] + head)[i] = v;
    }
  }
  for (size_t i = head + nv * V + g.tid; i < n; i += g.size) reg_ep_scalar_list<Op, Ep, T>(dst, src, i, base + i, e);
}

// ---- TMA path ----------------------------------------------------------------------------------

// One stage's result: output vector i = finish(op over the NS sources' vector i), in source
// order; `at` walks the bias from this thread's first vector, dstep a thread's stride.
template <int NS, class Op, class Ep, typename T>
PK_DEV void stage_ep(uint32_t in, uint32_t out, uint32_t chunk, unsigned nvec, bias_walk at, unsigned dstep,
                     const ep_args& e) {
  for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x, at.advance(dstep)) {
    uint4 raw[NS];
#pragma unroll
    for (int q = 0; q < NS; ++q) raw[q] = pk::tma::lds128(in + q * chunk + i * 16u);
    float acc[kVec<T>];
#pragma unroll
    for (size_t k = 0; k < kVec<T>; ++k) acc[k] = Op::init();
#pragma unroll
    for (int q = 0; q < NS; ++q) combine_vec<Op, T>(acc, raw[q]);
    finish_at<Op, Ep, T, static_cast<int>(kVec<T>), true>(acc, at.j, e);
    pk::tma::sts128(out + i * 16u, pack_vec(acc, T{}));
  }
}

// collective.cuh tma_reduce_n with stage_ep in place of stage_sum: per chunk thread 0 bulk-loads
// the chunk of every source into one stage, every thread applies the op and the epilogue into
// the stage's output slot, thread 0 bulk-stores it to every destination.
template <class C, int NS, class Op, class Ep, typename T>
PK_DEV bool tma_reduce_ep_n(const ptr_table& tab, int ndst, size_t body, size_t base, const ep_args& e,
                            block_smem& sm, const pk::spin_ctx& spin, int rank) {
  constexpr size_t chunk = (C::kStageBytes / (NS + 1)) & ~static_cast<size_t>(15);
  const size_t nchunks = (body != 0 && ndst != 0) ? ceil_div(body, chunk) : 0;
  int ok = 1;
  auto issue = [&](size_t c) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    pk::tma::mbar_arrive_expect_tx(&sm.bar[s], len * static_cast<unsigned>(NS));
#pragma unroll
    for (int q = 0; q < NS; ++q)
      pk::tma::load_async(stage_at<C>(sm, s) + q * chunk, tab.src[q] + c * chunk, len, &sm.bar[s]);
  };
  if (threadIdx.x == 0)
    for (size_t c = 0; c < nchunks && c < static_cast<size_t>(C::kStages); ++c) issue(c);
  // the bias entry of this thread's first vector in chunk c, and the steps between
  bias_walk at = walk_from<Ep>(base + threadIdx.x * kVec<T>, e);
  const unsigned dchunk = stride_mod<Ep>(chunk / sizeof(T), e);
  const unsigned dstep = stride_mod<Ep>(static_cast<size_t>(blockDim.x) * kVec<T>, e);
  for (size_t c = 0; c < nchunks; ++c, at.advance(dchunk)) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    ok = pk::tma::mbar_wait(&sm.bar[s], (sm.parity >> s) & 1u, spin, rank) ? 1 : 0;
    sm.parity ^= 1u << s;
    if (threadIdx.x == 0) pk::tma::wait_group_read<C::kStages - 1>();
    if (!__syncthreads_and(ok)) return false;
    unsigned char* in = stage_at<C>(sm, s);
    unsigned char* out = in + NS * chunk;
    stage_ep<NS, Op, Ep, T>(pk::tma::smem_u32(in), pk::tma::smem_u32(out), chunk, len / 16, at, dstep, e);
    pk::tma::fence_shared_to_async();
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int d = 0; d < tab.ndst; ++d) pk::tma::store_async(tab.dst[d] + c * chunk, out, len);
      pk::tma::commit_group();
      if (c + C::kStages < nchunks) issue(c + C::kStages);
    }
  }
  if (threadIdx.x == 0 && nchunks != 0) pk::tma::complete_writes();
  return true;
}

// collective.cuh tma_reduce with the op and the epilogue: every pointer 16-byte aligned (else the
// register path does it all), the tail (< 16 bytes) through registers.
template <class C, class Op, class Ep, typename T>
PK_DEV bool tma_reduce_ep(const ptrs<T>& dst, const cptrs<T>& src, size_t n, size_t base, const ep_args& e,
                          block_smem& sm, const pk::spin_ctx& spin, int rank) {
  bool all_aligned = true;
  PKC_EACH(d, dst.n) all_aligned = all_aligned && aligned16(dst.p[d]);
  PKC_EACH(q, src.n) all_aligned = all_aligned && aligned16(src.p[q]);
  const size_t bytes = n * sizeof(T);
  const size_t body = all_aligned ? (bytes & ~static_cast<size_t>(15)) : 0;
  __shared__ ptr_table tab;
  if (threadIdx.x == 0) tab.fill(dst, src);
  bool ok = true;
#define PKC_EP_CASE(S) \
  case S:              \
    ok = tma_reduce_ep_n<C, S, Op, Ep, T>(tab, dst.n, body, base, e, sm, spin, rank); \
    break;
  switch (src.n) {
    PKC_EP_CASE(1)
    PKC_EP_CASE(2)
    PKC_EP_CASE(3)
    PKC_EP_CASE(4)
    PKC_EP_CASE(5)
    PKC_EP_CASE(6)
    PKC_EP_CASE(7)
    PKC_EP_CASE(8)
    default: break;
  }
#undef PKC_EP_CASE
  if (!ok) return false;
  if (body < bytes) {
    const size_t first = body / sizeof(T);
    ptrs<T> d2{};
    cptrs<T> s2{};
    PKC_EACH(d, dst.n) d2.add(dst.p[d] + first);
    PKC_EACH(q, src.n) s2.add(src.p[q] + first);
    reg_reduce_ep<Op, Ep>(d2, s2, n - first, base + first, e, pk::ldst::block_group());
  }
  return __syncthreads_and(1) != 0;
}

// ---- dispatch: the plain sum through collective.cuh, anything else through the above ------------

// dst[d] = finish(op over src[q]) for up to PKC_SET_SLOTS of each; `base`: the index of element 0
// in the reduced buffer (the bias's position).
template <class C, class G, typename T>
PK_DEV bool reduce_ep(const G& g, const ctx& c, const ptrs<T>& dst, const cptrs<T>& src, size_t n,
                      size_t base, block_smem& sm) {
  if constexpr (plain_sum<C>) {
    return reduce_to<C>(g, c, dst, src, n, sm);
  } else {
    using Op = typename C::reduce_op;
    using Ep = typename C::epilogue;
    const ep_args e = make_ep<C>(g);
    if constexpr (C::kMech == mech::tma) {
      return tma_reduce_ep<C, Op, Ep>(dst, src, n, base, e, sm, g.flags.spin, c.rank);
    } else {
      reg_reduce_ep<Op, Ep>(dst, src, n, base, e, pk::ldst::block_group());
      return true;
    }
  }
}

// The same over lists of any length (wide kernels: registers only, as collective.cuh reduce_list).
template <class C, class G, class D, class S>
PK_DEV bool reduce_ep_list(const G& g, const ctx& c, const D& dst, const S& src, size_t n, size_t base,
                           block_smem& sm) {
  using T = typename G::value_type;
  if constexpr (plain_sum<C> || C::kMech == mech::tma) {
    return reduce_list<C>(g, c, dst, src, n, sm);   // TMA: the error record (the host refuses it)
  } else {
    reg_reduce_many_ep<typename C::reduce_op, typename C::epilogue, T>(dst, src, n, base, make_ep<C>(g),
                                                                       pk::ldst::block_group());
    return true;
  }
}

#endif  // __CUDACC__

// ---- all-reduce and reduce-scatter with an epilogue ------------------------------------------------

// all_reduce_one_shot with the op and the epilogue: every rank pulls the whole buffer of every
// rank and writes finish(op) into its output.
struct all_reduce_one_shot_ep : sm_only {
  static constexpr sync_kind kSync = sync_kind::none;
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    if constexpr (C::kWide) {
      return reduce_ep_list<C>(g, c, one(g.out[c.rank] + s.lo), all_peers<C>(g.in, c, s.lo), s.size(), s.lo, sm);
    } else {
      cptrs<T> src{};
      fill_peers<C>(src, g.in, c, s.lo);
      return reduce_ep<C>(g, c, one(g.out[c.rank] + s.lo), src, s.size(), s.lo, sm);
    }
  }
#endif
};

// all_reduce_two_shot with the op and the epilogue: rank r reduces chunk r of every input and
// stores finish(op) into chunk r of every output.
struct all_reduce_two_shot_ep : sm_only {
  static constexpr sync_kind kSync = sync_kind::none;
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t in_count(size_t n, int) { return n; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span ch = chunk_of<T>(g.count, c.world, c.rank);
    const span s = block_piece<T>(ch.size(), c);
    const size_t at = ch.lo + s.lo;
    if constexpr (C::kWide) {
      return reduce_ep_list<C>(g, c, all_peers<C>(g.out, c, at), all_peers<C>(g.in, c, at), s.size(), at, sm);
    } else {
      cptrs<T> src{};
      ptrs<T> dst{};
      fill_peers<C>(src, g.in, c, at);
      fill_peers<C>(dst, g.out, c, at);
      return reduce_ep<C>(g, c, dst, src, s.size(), at, sm);
    }
  }
#endif
};

// reduce_scatter_direct with the op and the epilogue: rank r reduces shard r of every input into
// its output (the bias indexed from the shard's place in the input, r x count).
struct reduce_scatter_direct_ep : sm_only {
  static constexpr sync_kind kSync = sync_kind::none;
  PK_HD static int sources(int world) { return world; }
  PK_HD static size_t in_count(size_t n, int world) { return n * world; }
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }

#ifdef __CUDACC__
  template <class C, class G>
  PK_DEV static bool phase(const G& g, const ctx& c, int, block_smem& sm) {
    using T = typename G::value_type;
    const span s = block_piece<T>(g.count, c);
    const size_t at = c.rank * g.count + s.lo;
    if constexpr (C::kWide) {
      return reduce_ep_list<C>(g, c, one(g.out[c.rank] + s.lo), all_peers<C>(g.in, c, at), s.size(), at, sm);
    } else {
      cptrs<T> src{};
      fill_peers<C>(src, g.in, c, at);
      return reduce_ep<C>(g, c, one(g.out[c.rank] + s.lo), src, s.size(), at, sm);
    }
  }
#endif
};

}  // namespace pkc
