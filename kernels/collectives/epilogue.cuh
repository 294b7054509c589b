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
// Every sum runs the element loops of moves.cuh (reduce_to, reduce_list) with a policy: the plain
// sum's for op_sum and ep_none, else ep_policy below, which applies the op as it accumulates and
// the epilogue before the stores (registers: one 16-byte vector of each source a thread in
// flight; TMA: in the stage before its bulk stores), so the moves the model costs are the sum's
// (pksim_core.workloads.phases; the epilogue's arithmetic and its bias reads, a vector that stays in
// L2, are not costed: docs/decisions/D53.md).
//
// one-shot / two-shot all-reduce and direct reduce-scatter with an epilogue: the kernels of
// all_reduce.cuh / reduce_scatter.cuh, whose phases take the config's policy (policy_of), without
// their copy-engine form (a copy engine cannot apply the op; codegen emits these for tma and
// register).
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

// The epilogue of `count` consecutive elements whose first is bias entry j (< bias_count, which
// the host keeps below 2^32: 32-bit positions). kVecBias: read a vector of the bias at once when
// it lies on the 16-byte grid (the TMA stage: 2 % faster with it; the register path 5 % slower,
// its per-element reads kept: docs/validation/comm.md).
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

// The policy of a sum with reduce op Op and epilogue Ep (moves.cuh's loops call it).
template <class Op, class Ep>
struct ep_policy {
  // One vector of each source per thread and round in registers: the op and the epilogue take
  // the registers a second vector would (with two, the bias kernels spilled at the 128-register
  // cap and the avg two-shot at 4 ranks, at the cap without spilling, ran 1.8x slower than with
  // a bias and one; docs/validation/comm.md).
  static constexpr int kRegVectors = 1;
  ep_args e;
  PK_DEV static float init() { return Op::init(); }
  PK_DEV static float apply(float a, float x) { return Op::apply(a, x); }
  PK_DEV bias_walk walk(size_t i) const { return walk_from<Ep>(i, e); }
  PK_DEV unsigned stride(size_t d) const { return stride_mod<Ep>(d, e); }
  template <typename T, int count, bool kVecBias = false>
  PK_DEV void finish(float* acc, unsigned j) const { finish_at<Op, Ep, T, count, kVecBias>(acc, j, e); }
  template <typename T, int count>
  PK_DEV void finish_index(float* acc, size_t i) const { pkc::finish<Op, Ep, T, count>(acc, i, e); }
};

#endif  // __CUDACC__

// A config that names a reduce op and an epilogue: its sums' policy (the plain sum's for
// op_sum and ep_none, so that they run the plain sum's loops).
template <class C>
struct policy_of<C, std::void_t<typename C::reduce_op, typename C::epilogue>> {
#ifdef __CUDACC__
  template <class G>
  PK_DEV static auto make(const G& g) {
    if constexpr (plain_sum<C>) return sum_policy{};
    else return ep_policy<typename C::reduce_op, typename C::epilogue>{make_ep<C>(g)};
  }
#endif
};

// ---- all-reduce and reduce-scatter with an epilogue ------------------------------------------------

// The one-shot and two-shot all-reduce and the direct reduce-scatter of all_reduce.cuh and
// reduce_scatter.cuh: their phases reduce by the config's policy (the op and the epilogue; the
// bias of a reduce-scatter indexed from the shard's place in the input, r x count).
using all_reduce_one_shot_ep = sm_only_of<all_reduce_one_shot>;
using all_reduce_two_shot_ep = sm_only_of<all_reduce_two_shot>;
using reduce_scatter_direct_ep = sm_only_of<reduce_scatter_direct>;

}  // namespace pkc
