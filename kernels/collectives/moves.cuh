// collectives/moves.cuh: the element loops of every move the generated collectives make: copy one
// source to up to PKC_SET_SLOTS destinations, or reduce sources into them, by registers or TMA,
// for sets (ptr_set) and for lists of any length (peer_list). Part of collective.cuh, which
// includes it after the sets and the stage state it works on; collective.cuh's dispatch
// (copy_to, copy_range, reduce_to, copy_list, reduce_list) is how the algorithms call it.
// This file: the vector helpers, a sum's policy and the cut of a move (move_plan, the word
// loads); the register loops are in moves_reg.cuh, the TMA ones in moves_tma.cuh, both
// included at its end.
//
// One cut for every move (move_plan): a head element by element up to the destinations' 16-byte
// boundary, a body of 16-byte vectors stored on that grid, a tail element by element. A source
// whose misalignment equals the destinations' is read by 16-byte loads; one whose misalignment
// differs (a shard at r x count of one buffer moved to the start of another, a -v block at
// different displacements on its two sides) is read, by registers, in the widest words its
// shift allows (8, 4 or 2 bytes: load16), assembled into the same 16-byte vectors; by TMA, its
// aligned span, one vector longer, is bulk-loaded into the stage and the threads realign it
// there (funnel16) before the bulk stores (every byte loaded lies in the move's range:
// staged()). Destinations that do not share one misalignment (no algorithm makes such a set)
// are moved element by element (copies: pk::ldst::copy each). docs/decisions/D58.md.
//
// A sum's arithmetic is its policy R: sum_policy here (fp32 sum, nothing after), epilogue.cuh's
// ep_policy for a reduce op and an element-wise epilogue. R provides init() / apply(a, x) (the
// fp32 reduction, sources in the given order, rounded once), walk(i) / stride(d) (the position
// of element i in the reduced buffer as the loops step through it: the bias entry), finish<T,
// count, kVecBias>(acc, j) and finish_index<T, count>(acc, i) (the epilogue on count consecutive
// elements), and kRegVectors (16-byte vectors of each source a thread loads per round in
// registers, up to 4 sources).
#pragma once

#ifdef __CUDACC__

namespace pkc {

PK_DEV float to_f32(float x) { return x; }
PK_DEV float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
PK_DEV T from_f32(float x);
template <>
PK_DEV float from_f32<float>(float x) { return x; }
template <>
PK_DEV __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// acc[0..V) += the V elements packed in a 16-byte vector.
PK_DEV void add_vec(float* acc, const uint4& raw, float) {
  const float* f = reinterpret_cast<const float*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[k] += f[k];
}
PK_DEV void add_vec(float* acc, const uint4& raw, __nv_bfloat16) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    acc[2 * k] += f.x;
    acc[2 * k + 1] += f.y;
  }
}
PK_DEV uint4 pack_vec(const float* acc, float) {
  uint4 r;
  float* f = reinterpret_cast<float*>(&r);
#pragma unroll
  for (int k = 0; k < 4; ++k) f[k] = acc[k];
  return r;
}
PK_DEV uint4 pack_vec(const float* acc, __nv_bfloat16) {
  uint4 r;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
  return r;
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

// acc[k] = R::apply(acc[k], element k of the vector).
template <class R, typename T>
PK_DEV void combine_vec(float* acc, const uint4& raw) {
  float f[kVec<T>];
  unpack_vec(f, raw, T{});
#pragma unroll
  for (size_t k = 0; k < kVec<T>; ++k) acc[k] = R::apply(acc[k], f[k]);
}

// ---- what a sum computes: the plain sum -------------------------------------------------------

// A position that never moves (no epilogue reads by position).
struct no_walk {
  unsigned j = 0;
  PK_DEV unsigned plus(unsigned) const { return 0u; }
  PK_DEV void advance(unsigned) {}
};

struct sum_policy {
  static constexpr int kRegVectors = 2;
  PK_DEV static float init() { return 0.f; }
  PK_DEV static float apply(float a, float x) { return a + x; }
  PK_DEV no_walk walk(size_t) const { return {}; }
  PK_DEV unsigned stride(size_t) const { return 0u; }
  template <typename T, int count, bool kVecBias = false>
  PK_DEV void finish(float*, unsigned) const {}
  template <typename T, int count>
  PK_DEV void finish_index(float*, size_t) const {}
};

// The policy of config C's sums: the plain sum, unless C names a reduce op (epilogue.cuh
// specialises this for such configs).
template <class C, class = void>
struct policy_of {
  template <class G>
  PK_DEV static sum_policy make(const G&) { return {}; }
};

// ---- the cut of a move --------------------------------------------------------------------------

PK_HD unsigned mis16(const void* p) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) & 15u); }

// A move of `bytes` bytes: [0, head) and [tail(), bytes) element by element, nv 16-byte vectors
// between, stored at destination byte head + 16 i. Source q's vector i is the 16 bytes at its
// byte head + 16 i, shift(q) bytes past a 16-byte boundary: by registers, read as W-byte words,
// W = `word` the widest power of two that divides every shift (16 when none has one); by TMA,
// the aligned pair at head - shift(q) + 16 i, realigned in the stage (staged()).
struct move_plan {
  size_t head = 0, nv = 0;
  unsigned shifts = 0;   // source q: bits [4q, 4q + 4)
  unsigned word = 16;
  PK_HD bool shifted() const { return shifts != 0; }
  PK_HD unsigned shift(int q) const { return (shifts >> (4 * q)) & 15u; }
  PK_HD size_t tail() const { return head + 16 * nv; }
};

// The head up to the destinations' boundary (misalignment md) ...
PK_HD move_plan plan_head(unsigned md, size_t bytes) {
  move_plan p;
  p.head = min_size((16u - md) & 15u, bytes);
  return p;
}
// ... the shift of source q (misalignment ms) ...
PK_HD void plan_source(move_plan& p, int q, unsigned ms) { p.shifts |= ((ms + p.head) & 15u) << (4 * q); }
// Everything element by element.
PK_HD move_plan plan_scalar(size_t bytes) {
  move_plan p;
  p.head = bytes;
  return p;
}

// ... and the body, for registers: whole vectors, read in the widest word every shift allows.
PK_HD move_plan words(move_plan p, size_t bytes) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int q = 0; q < PKC_SET_SLOTS; ++q) {
    const unsigned s = p.shift(q);
    if (s != 0 && (s & (0u - s)) < p.word) p.word = s & (0u - s);
  }
  p.nv = (bytes - p.head) / 16;
  return p;
}
// ... or for TMA's staging: the nsrc sources' loads run one vector past the body (a shifted
// source's last vector needs its next; the others load it too, one length for all): a shifted
// source whose first aligned vector would start before its range gives the head one vector
// more, one whose vector past the body would end past its range gives the body one vector less.
PK_HD move_plan staged(move_plan p, size_t bytes, int nsrc) {
  unsigned lo = 16, hi = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int q = 0; q < PKC_SET_SLOTS; ++q) {
    const unsigned s = p.shift(q);
    if (q < nsrc && s < lo) lo = s;
    if (s > hi) hi = s;
  }
  if (hi > p.head) p.head = min_size(p.head + 16, bytes);
  const size_t rem = bytes - p.head;
  p.nv = rem / 16;
  if (hi != 0 && p.nv != 0 && rem % 16 + lo < 16) --p.nv;
  return p;
}

// The head and shifts of a set of sources into a set or list of destinations (destinations at
// several misalignments: element by element) ...
template <typename T, class D, typename P>
PK_DEV move_plan plan_move(const D& dst, const ptr_set<P>& src, size_t bytes) {
  const int md = dst.misalignment();
  if (md < 0) return plan_scalar(bytes);
  move_plan p = plan_head(static_cast<unsigned>(md), bytes);
  PKC_EACH(q, src.n) plan_source(p, q, mis16(src.p[q]));
  return p;
}
// ... of a list of sources, which share one misalignment (every shift is shift(0); a set of
// mixed misalignments: element by element) ...
template <typename T, class D, class S>
PK_DEV move_plan plan_list(const D& dst, const S& src, size_t bytes) {
  const int md = dst.misalignment(), ms = src.misalignment();
  if (md < 0 || ms < 0) return plan_scalar(bytes);
  move_plan p = plan_head(static_cast<unsigned>(md), bytes);
  plan_source(p, 0, static_cast<unsigned>(ms));
  return p;
}
// ... of a set that the caller knows co-aligned, with its body (else element by element: no
// shifts).
template <typename T, typename Q, typename P>
PK_DEV move_plan plan_coaligned(const ptr_set<Q>& dst, const ptr_set<P>& src, size_t bytes) {
  const unsigned md = mis16(dst.p[0]);
  bool co = true;
  PKC_EACH(d, dst.n) co = co && mis16(dst.p[d]) == md;
  PKC_EACH(q, src.n) co = co && mis16(src.p[q]) == md;
  move_plan p = co ? plan_head(md, bytes) : plan_scalar(bytes);
  p.nv = (bytes - p.head) / 16;
  return p;
}

// The 16 bytes at p, a W-byte boundary, by W-byte loads (ld.global.cg; little-endian: the word
// at the lower address in the lower bits). A warp's W-byte loads of consecutive vectors are
// coalesced as its 16-byte ones are: W = 8 and 4 move the same bytes per L1 wavefront in 2 and 4
// instructions, W = 2 half as many.
template <int W>
PK_DEV uint4 load16(const unsigned char* p) {
  if constexpr (W == 16) {
    return __ldcg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (W == 8) {
    const uint2* q = reinterpret_cast<const uint2*>(p);
    const uint2 a = __ldcg(q), b = __ldcg(q + 1);
    return make_uint4(a.x, a.y, b.x, b.y);
  } else if constexpr (W == 4) {
    const unsigned* q = reinterpret_cast<const unsigned*>(p);
    return make_uint4(__ldcg(q), __ldcg(q + 1), __ldcg(q + 2), __ldcg(q + 3));
  } else {
    static_assert(W == 2, "words of 16, 8, 4 or 2 bytes");
    const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = static_cast<unsigned>(__ldcg(q + 2 * k)) | (static_cast<unsigned>(__ldcg(q + 2 * k + 1)) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The 16 bytes at byte sh (0..15) of the 32 bytes lo, hi (TMA's staged realignment).
PK_DEV uint4 funnel16(const uint4& lo, const uint4& hi, unsigned sh) {
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint32_t v[5];   // words sh / 4 .. sh / 4 + 4
#pragma unroll
  for (int j = 0; j < 5; ++j) {
    const uint32_t a = (sh & 8u) ? w[j + 2] : w[j];
    const uint32_t b = (sh & 8u) ? w[j + 3] : w[j + 1];
    v[j] = (sh & 4u) ? b : a;
  }
  const unsigned bits = (sh & 3u) * 8u;
  return make_uint4(__funnelshift_r(v[0], v[1], bits), __funnelshift_r(v[1], v[2], bits),
                    __funnelshift_r(v[2], v[3], bits), __funnelshift_r(v[3], v[4], bits));
}

// CALL (a statement that names W) with W = p.word, a compile-time constant (words of 2 bytes
// only for 2-byte elements).
#define PKC_WITH_WORD(T, p, CALL)                  \
  switch ((p).word) {                              \
    case 16: {                                     \
      constexpr int W = 16;                        \
      CALL;                                        \
      break;                                       \
    }                                              \
    case 8: {                                      \
      constexpr int W = 8;                         \
      CALL;                                        \
      break;                                       \
    }                                              \
    case 4: {                                      \
      constexpr int W = 4;                         \
      CALL;                                        \
      break;                                       \
    }                                              \
    default:                                       \
      if constexpr (sizeof(T) == 2) {              \
        constexpr int W = 2;                       \
        CALL;                                      \
      }                                            \
      break;                                       \
  }

// Shifted register sums for sm_100 and later: ptxas put the direct reduce-scatter by registers
// (sums of up to 8 sources in words, at the 128-register cap) on 56-648 B of stack for sm_103a,
// and the fp32 reduce-scatter-v on 40 B for sm_100a, with the form sm_90a compiles without any
// (CUDA 13.0), so there they run the lists' loop for sets too and load one source's words at a
// time (word_batch). Not timed: no such GPU here.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr bool kLeanShiftedSums = true;
#else
constexpr bool kLeanShiftedSums = false;
#endif

// How many of QB sources a lean shifted sum loads at a time in W-byte words.
PK_HD constexpr int word_batch(int QB, int W) { return W >= 16 ? QB : 1; }

}  // namespace pkc

#endif  // __CUDACC__

#include "moves_reg.cuh"
#include "moves_tma.cuh"
