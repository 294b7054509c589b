// collectives/moves.cuh: the element loops of every move the generated collectives make: copy one
// source to up to PKC_SET_SLOTS destinations, or reduce sources into them, by registers or TMA,
// for sets (ptr_set) and for lists of any length (peer_list). Part of collective.cuh, which
// includes it after the sets and the stage state it works on; collective.cuh's dispatch
// (copy_to, copy_range, reduce_to, copy_list, reduce_list) is how the algorithms call it.
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
// are moved element by element (copies: pk::ldst::copy each). docs/decisions.md D58.
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

// ---- register path: copies ----------------------------------------------------------------------

// The body of reg_copy: U vectors a thread in flight, each stored to every destination.
template <int W, typename T>
PK_DEV void reg_copy_body(const ptrs<T>& dst, const unsigned char* src, const move_plan& p,
                          pk::ldst::group g) {
  constexpr int U = pk::ldst::UNROLL;
  const unsigned char* sb = src + p.head;
  const size_t nv = p.nv;
  auto out = [&](int d) { return reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(dst.p[d]) + p.head); };
  size_t i = g.tid;
  for (; i + (U - 1) * g.size < nv; i += U * g.size) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = load16<W>(sb + 16 * (i + u * g.size));
    PKC_EACH(d, dst.n) {
      uint4* dv = out(d);
#pragma unroll
      for (int u = 0; u < U; ++u) dv[i + u * g.size] = v[u];
    }
  }
  for (; i < nv; i += g.size) {
    const uint4 v = load16<W>(sb + 16 * i);
    PKC_EACH(d, dst.n) out(d)[i] = v;
  }
}

// Bytes [lo, hi) of src to every destination, a byte a thread at a time.
template <typename T>
PK_DEV void copy_bytes(const ptrs<T>& dst, const T* src, size_t lo, size_t hi, pk::ldst::group g) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
  for (size_t i = lo + g.tid; i < hi; i += g.size) {
    const unsigned char v = __ldcg(s + i);
    PKC_EACH(d, dst.n) reinterpret_cast<unsigned char*>(dst.p[d])[i] = v;
  }
}

// dst[d][0..n) = src[0..n) for every destination: a 16-byte vector loaded once (in words when
// the source sits at another misalignment), stored to every destination (the destinations
// co-aligned; else pk::ldst::copy each).
template <typename T>
PK_DEV void reg_copy(const ptrs<T>& dst, const T* src, size_t n, pk::ldst::group g) {
  const size_t bytes = n * sizeof(T);
  if (bytes == 0 || dst.n == 0) return;
  if (dst.misalignment() < 0) {
    PKC_EACH(d, dst.n) pk::ldst::copy(dst.p[d], src, bytes, g);
    return;
  }
  const move_plan p = words(plan_move<T>(dst, one(src), bytes), bytes);
  const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
  copy_bytes(dst, src, 0, p.head, g);
  PKC_WITH_WORD(T, p, (reg_copy_body<W>(dst, s, p, g)));
  copy_bytes(dst, src, p.tail(), bytes, g);
}

// ---- register path: sums ------------------------------------------------------------------------

// Elements [lo, hi): dst[d][i] = R over src[q][i], finished at position base + i; sets (at
// compile-time slots) and lists alike.
template <typename T, class R, class D, class S>
PK_DEV void reduce_elems(const D& dst, const S& src, size_t lo, size_t hi, size_t base, const R& r,
                         pk::ldst::group g) {
  for (size_t i = lo + g.tid; i < hi; i += g.size) {
    float a = R::init();
    src.each([&](const T* p) { a = R::apply(a, to_f32(__ldcg(p + i))); });
    r.template finish_index<T, 1>(&a, base + i);
    dst.each([&](T* p) { p[i] = from_f32<T>(a); });
  }
}

// What misalignments a caller's sums can meet, so that the loops it cannot meet are left out
// (each costs registers where the kernels sit at the register cap): co-aligned only (the one-
// and two-shot all-reduces: pieces of whole lines); every source at one shift (every rank's
// buffer at one offset); any.
enum class may_shift { no, common, any };

// The vector part of reg_reduce: U vectors of each of up to Q sources per thread and round, QB
// sources loaded at a time (then added, in source order: the sum is that of one pass), each
// vector in W-byte words.
template <int U, int Q, int QB, int W, class R, typename T>
PK_DEV void reg_reduce_body(const ptrs<T>& dst, const cptrs<T>& src, size_t head, size_t nv, size_t base,
                            const R& r, pk::ldst::group g) {
  constexpr size_t V = kVec<T>;
  static_assert(Q % QB == 0, "sources are loaded in whole batches");
  static_assert(U <= 2, "the position of unroll u is the first's or one stride on");
  auto at = r.walk(base + head + g.tid * V);         // the position of vector i0
  const unsigned du = r.stride(g.size * V);          // ... of vector i0 + g.size
  const unsigned dround = r.stride(U * g.size * V);  // ... of the next round
  for (size_t i0 = g.tid; i0 < nv; i0 += U * g.size, at.advance(dround)) {
    float acc[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (size_t k = 0; k < V; ++k) acc[u][k] = R::init();
#pragma unroll
    for (int q0 = 0; q0 < Q; q0 += QB) {
      uint4 raw[U][QB];
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        if (q0 + q < src.n) {
          const uint4* sv = reinterpret_cast<const uint4*>(src.p[q0 + q] + head);
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (i0 + u * g.size < nv) {
              if constexpr (W == 16) raw[u][q] = __ldcg(sv + i0 + u * g.size);
              else raw[u][q] = load16<W>(reinterpret_cast<const unsigned char*>(sv + i0 + u * g.size));
            }
        }
      }
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        if (q0 + q < src.n) {
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (i0 + u * g.size < nv) combine_vec<R, T>(acc[u], raw[u][q]);
        }
      }
      // keep the next batch's loads behind this batch's adds: its registers are reused
      if (q0 + QB < Q) asm volatile("" ::: "memory");
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * g.size < nv) r.template finish<T, static_cast<int>(V)>(acc[u], u == 0 ? at.j : at.plus(du));
    PKC_EACH(d, dst.n) {
      uint4* dv = reinterpret_cast<uint4*>(dst.p[d] + head);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * g.size < nv) dv[i0 + u * g.size] = pack_vec(acc[u], T{});
    }
  }
}

// dst[d][i] = R over src[q][i] for lists of any length (peer_list, or a ptr_set): the sources
// PKC_SET_SLOTS at a time into one fp32 accumulator per vector (each batch's 16-byte loads in
// flight together, in W-byte words, its pointers filled at compile-time slots), the result
// stored to the destinations PKC_SET_SLOTS at a time. The sum's order is the list's; rounded once.
template <int W, class R, typename T, class D, class S>
PK_DEV void reg_reduce_many_body(const D& dst, const S& src, const move_plan& p, size_t base, const R& r,
                                 pk::ldst::group g) {
  constexpr size_t V = kVec<T>;
  const size_t head = p.head / sizeof(T), nv = p.nv;
  auto at = r.walk(base + head + g.tid * V);
  const unsigned dround = r.stride(g.size * V);
  for (size_t i = g.tid; i < nv; i += g.size, at.advance(dround)) {
    float acc[V];
#pragma unroll
    for (size_t e = 0; e < V; ++e) acc[e] = R::init();
    for (int q0 = 0; q0 < src.n; q0 += PKC_SET_SLOTS) {
      cptrs<T> b;
      src.fill_set(b, q0);
      constexpr int SB = kLeanShiftedSums ? word_batch(PKC_SET_SLOTS, W) : PKC_SET_SLOTS;
#pragma unroll
      for (int q0 = 0; q0 < PKC_SET_SLOTS; q0 += SB) {   // SB sources' loads in flight at a time
        uint4 raw[SB];
#pragma unroll
        for (int q = 0; q < SB; ++q)
          if (q0 + q < b.n) raw[q] = load16<W>(reinterpret_cast<const unsigned char*>(b.p[q0 + q] + head) + 16 * i);
#pragma unroll
        for (int q = 0; q < SB; ++q)
          if (q0 + q < b.n) combine_vec<R, T>(acc, raw[q]);
        if (q0 + SB < PKC_SET_SLOTS) asm volatile("" ::: "memory");
      }
    }
    r.template finish<T, static_cast<int>(V)>(acc, at.j);
    const uint4 v = pack_vec(acc, T{});
    for (int d0 = 0; d0 < dst.n; d0 += PKC_SET_SLOTS) {
      ptrs<T> b;
      dst.fill_set(b, d0);
      PKC_EACH(d, b.n) reinterpret_cast<uint4*>(b.p[d] + head)[i] = v;
    }
  }
}

// One element: dst[d][i] = R over src[q][i], finished at position `at`.
template <typename T, class R>
PK_DEV void reduce_elem(const ptrs<T>& dst, const cptrs<T>& src, size_t i, size_t at, const R& r) {
  float a = R::init();
  PKC_EACH(q, src.n) a = R::apply(a, to_f32(__ldcg(src.p[q] + i)));
  r.template finish_index<T, 1>(&a, at);
  PKC_EACH(d, dst.n) dst.p[d][i] = from_f32<T>(a);
}

// reg_reduce for callers whose moves are co-aligned (may_shift::no): 16-byte vectors when every
// pointer shares one misalignment, else element by element; no word loops. Written as the
// register two-shot (8 sources, 8 destinations, at the 128-register cap) was tuned: a plan of
// the general form here put it on 8-24 B of stack (ptxas -v, sm_90a, CUDA 13.0).
template <int QB, class R, typename T>
PK_DEV void reg_reduce_coaligned(const ptrs<T>& dst, const cptrs<T>& src, size_t n, pk::ldst::group g,
                                 const R& r, size_t base) {
  constexpr size_t V = kVec<T>;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(dst.p[0]) & 15u;
  bool co = true;
  PKC_EACH(d, dst.n) co = co && ((reinterpret_cast<uintptr_t>(dst.p[d]) & 15u) == a0);
  PKC_EACH(q, src.n) co = co && ((reinterpret_cast<uintptr_t>(src.p[q]) & 15u) == a0);
  size_t head = n, nv = 0;
  if (co) {
    head = ((16u - a0) & 15u) / sizeof(T);
    if (head > n) head = n;
    nv = (n - head) / V;
  }
  for (size_t i = g.tid; i < head; i += g.size) reduce_elem<T>(dst, src, i, base + i, r);
  constexpr int U = R::kRegVectors;
  // bf16 takes two sources through the four-slot body: the two-slot one, two vectors a source,
  // put the 8-rank one-shot all-reduce and direct reduce on 8 B of stack (ptxas -v, sm_90a,
  // CUDA 13.0); the four-slot body guards the missing sources' loads.
  if (sizeof(T) == 4 && src.n <= 2) reg_reduce_body<U, 2, 2, 16>(dst, src, head, nv, base, r, g);
  else if (src.n <= 4) reg_reduce_body<U, 4, 4, 16>(dst, src, head, nv, base, r, g);
  else reg_reduce_body<1, PKC_SET_SLOTS, QB, 16>(dst, src, head, nv, base, r, g);
  for (size_t i = head + nv * V + g.tid; i < n; i += g.size) reduce_elem<T>(dst, src, i, base + i, r);
}

// dst[d][i] = R over sources of src[q][i] (fp32, sources in the given order), for every
// destination; `base`: the position of element 0 in the reduced buffer (R's epilogue).
// QB: how many of more than 4 sources the plain sum loads at a time (below). S: what the
// caller can meet (may_shift); the word loops of a caller that cannot meet shifts are left out
// (the register two-shot, 8 sources and 8 destinations at the 128-register cap, keeps no stack
// only so: ptxas -v, sm_90a, CUDA 13.0), and its shifted sources go element by element. In
// 2-byte words, more than 4 sources load 4 at a time (8 gave the register reduce-scatter-v 8 B
// of stack).
template <int QB = PKC_SET_SLOTS, may_shift S = may_shift::any, class R = sum_policy, typename T>
PK_DEV void reg_reduce(const ptrs<T>& dst, const cptrs<T>& src, size_t n, pk::ldst::group g, const R& r = R{},
                       size_t base = 0) {
  if (n == 0 || dst.n == 0) return;
  if constexpr (S == may_shift::no) {
    reg_reduce_coaligned<QB>(dst, src, n, g, r, base);
    return;
  }
  const size_t bytes = n * sizeof(T);
  const move_plan p =
      words(S == may_shift::common ? plan_list<T>(dst, src, bytes) : plan_move<T>(dst, src, bytes), bytes);
  const size_t head = p.head / sizeof(T);
  reduce_elems<T>(dst, src, 0, head, base, r, g);
  // Loads in flight per thread: U vectors of every source (U = R::kRegVectors up to 4 sources,
  // else 1), at most 8 16-byte registers of raw data, so that a 512-thread block (128 registers
  // a thread) keeps its pointer sets in registers (ptxas -v). The two-shot all-reduce in fp32
  // (up to 8 sources and 8 destinations) loads 4 sources at a time (QB = 4): it keeps both
  // pointer sets in registers (88 -> 16 B of stack; none since fill writes every slot) but waits
  // two memory latencies a vector; in bf16, its pointer sets filled at compile-time indices, it
  // loads all 8 with no stack. Loading 4 at a time everywhere made the 8-rank one-shot all-reduce
  // and direct reduce-scatter by registers 1.5-1.8x slower at 16 MiB and up (H200), so they keep
  // all 8 in flight (docs/decisions.md D24). A reduce op or an epilogue takes the registers a
  // second vector would (R::kRegVectors = 1; epilogue.cuh).
  constexpr int U = R::kRegVectors;
#define PKC_REG_REDUCE_BODY                                                     \
  if (src.n <= 2) reg_reduce_body<U, 2, 2, W>(dst, src, head, p.nv, base, r, g); \
  else if (src.n <= 4) reg_reduce_body<U, 4, 4, W>(dst, src, head, p.nv, base, r, g); \
  else reg_reduce_body<1, PKC_SET_SLOTS, (W == 2 && QB > 4 ? 4 : QB), W>(dst, src, head, p.nv, base, r, g)
  if (kLeanShiftedSums && p.word != 16) {
    PKC_WITH_WORD(T, p, (reg_reduce_many_body<W, R, T>(dst, src, p, base, r, g)));
  } else {
    PKC_WITH_WORD(T, p, PKC_REG_REDUCE_BODY);
  }
#undef PKC_REG_REDUCE_BODY
  reduce_elems<T>(dst, src, p.tail() / sizeof(T), n, base, r, g);
}

template <typename T, class D, class S, class R = sum_policy>
PK_DEV void reg_reduce_many(const D dst, const S src, size_t n, pk::ldst::group g, const R& r = R{},
                            size_t base = 0) {
  if (n == 0 || dst.n == 0 || src.n == 0) return;
  const size_t bytes = n * sizeof(T);
  const move_plan p = words(plan_list<T>(dst, src, bytes), bytes);
  reduce_elems<T>(dst, src, 0, p.head / sizeof(T), base, r, g);
  PKC_WITH_WORD(T, p, (reg_reduce_many_body<W, R, T>(dst, src, p, base, r, g)));
  reduce_elems<T>(dst, src, p.tail() / sizeof(T), n, base, r, g);
}

// ---- TMA path -----------------------------------------------------------------------------------

template <class C>
PK_DEV unsigned char* stage_at(const block_smem& sm, int s) {
  return sm.stage + static_cast<size_t>(s) * C::kStageBytes;
}

// Parity bookkeeping for `nchunks` chunks dealt round-robin over the stages, for threads that
// did not wait themselves.
template <class C>
PK_DEV void advance_parity(block_smem& sm, size_t nchunks) {
  for (int s = 0; s < C::kStages; ++s) {
    const size_t uses = nchunks > static_cast<size_t>(s) ? (nchunks - s + C::kStages - 1) / C::kStages : 0;
    if (uses & 1u) sm.parity ^= 1u << s;
  }
}

// Which stage-sized chunks of a range a block moves: first, first + step, first + 2 step, ...
struct chunk_deal {
  size_t first = 0, step = 1;
  PK_HD size_t count(size_t total) const { return total > first ? (total - first + step - 1) / step : 0; }
  PK_HD size_t at(size_t c) const { return first + c * step; }
};

// dst[d][0..n) = src[0..n) with the destinations co-aligned with the source: thread 0 streams
// the body through the stages with bulk loads and bulk-stores every stage to each destination;
// the head and the tail (< 16 bytes each) go through registers. A source at another
// misalignment, or destinations at several, go through registers (reg_copy; the collectives
// send a shifted source to tma_copy_shifted instead: copy_to). Returns false (in every thread)
// on a timeout. With a deal other than {0, 1} the block moves only its chunks of the body; the
// block dealt chunk 0 also moves the head and the tail.
template <class C, typename T>
PK_DEV bool tma_copy(const ptrs<T>& dst, const T* src, size_t n, block_smem& sm,
                     const pk::spin_ctx& spin, int rank, chunk_deal deal = {}) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const int md = dst.misalignment();
  if (md < 0 || static_cast<unsigned>(md) != mis16(src)) {
    if (deal.first == 0) reg_copy(dst, src, n, g);
    return __syncthreads_and(1) != 0;
  }
  const move_plan p = words(plan_move<T>(dst, one(src), bytes), bytes);   // co-aligned: no shift
  int ok = 1;
  const size_t chunk = C::kStageBytes;
  const size_t body = 16 * p.nv;
  const size_t nchunks = dst.n ? deal.count(ceil_div(body, chunk)) : 0;
  const unsigned char* from = reinterpret_cast<const unsigned char*>(src) + p.head;
  if (nchunks != 0 && threadIdx.x == 0) {
    auto issue = [&](size_t c) {
      const int s = static_cast<int>(c % C::kStages);
      const size_t off = deal.at(c) * chunk;
      const unsigned len = static_cast<unsigned>(min_size(chunk, body - off));
      pk::tma::mbar_arrive_expect_tx(&sm.bar[s], len);
      pk::tma::load_async(stage_at<C>(sm, s), from + off, len, &sm.bar[s]);
    };
    for (size_t c = 0; c < nchunks && c < static_cast<size_t>(C::kStages); ++c) issue(c);
    unsigned parity = sm.parity;
    for (size_t c = 0; c < nchunks; ++c) {
      const int s = static_cast<int>(c % C::kStages);
      const size_t off = deal.at(c) * chunk;
      const unsigned len = static_cast<unsigned>(min_size(chunk, body - off));
      if (!pk::tma::mbar_wait(&sm.bar[s], (parity >> s) & 1u, spin, rank)) {
        ok = 0;
        break;
      }
      parity ^= 1u << s;
      PKC_EACH(d, dst.n)
        pk::tma::store_async(reinterpret_cast<unsigned char*>(dst.p[d]) + p.head + off, stage_at<C>(sm, s), len);
      pk::tma::commit_group();
      // Refill the stage of the previous chunk, whose stores (one group back) have finished
      // reading it by now, while this chunk's stores are still reading theirs.
      if (c >= 1 && c - 1 + C::kStages < nchunks) {
        pk::tma::wait_group_read<1>();
        issue(c - 1 + C::kStages);
      }
    }
    pk::tma::complete_writes();
  }
  advance_parity<C>(sm, nchunks);
  if (deal.first == 0) {
    copy_bytes(dst, src, 0, p.head, g);
    copy_bytes(dst, src, p.tail(), bytes, g);
  }
  return __syncthreads_and(ok) != 0;
}

// Thread 0's copy of a staged move's pointers, in shared memory: it alone fills it, issues the
// bulk loads and stores and reads it (the other threads must not: nothing orders their reads
// after its writes), at run-time indices, which in registers would put them on the
// stack and, kept in registers by unrolling, made the 8-way reductions spill 2-15 KB (ptxas -v).
// Sources at their body's aligned start (head - shift), destinations at their body's start.
struct ptr_table {
  const unsigned char* src[PKC_SET_SLOTS];
  unsigned char* dst[PKC_SET_SLOTS];
  int ndst;
  template <typename T>
  PK_DEV void fill(const ptrs<T>& d, const cptrs<T>& s, const move_plan& p) {
    PKC_EACH(k, d.n) dst[k] = reinterpret_cast<unsigned char*>(d.p[k]) + p.head;
    PKC_EACH(k, s.n) src[k] = reinterpret_cast<const unsigned char*>(s.p[k]) + p.head - p.shift(k);
    ndst = d.n;
  }
};

// One stage's result: output vector i = R over the NS sources' vector i (source q realigned by
// its shift when Shift), finished (R's epilogue; `at` walks the positions from this thread's
// first vector, dstep a thread's stride); Copy: the one source's vector as it is. Shared-memory
// addresses, so the loads are ld.shared rather than generic loads.
template <int NS, bool Shift, bool Copy, class R, typename T, class W>
PK_DEV void stage_op(uint32_t in, uint32_t out, uint32_t slot, unsigned nvec, unsigned shifts, W at,
                     unsigned dstep, const R& r) {
  for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x, at.advance(dstep)) {
    uint4 raw[NS];
#pragma unroll
    for (int q = 0; q < NS; ++q) {
      raw[q] = pk::tma::lds128(in + q * slot + i * 16u);
      if constexpr (Shift) {
        const unsigned sh = (shifts >> (4 * q)) & 15u;
        if (sh != 0) raw[q] = funnel16(raw[q], pk::tma::lds128(in + q * slot + i * 16u + 16u), sh);
      }
    }
    if constexpr (Copy) {
      pk::tma::sts128(out + i * 16u, raw[0]);
    } else {
      float acc[kVec<T>];
#pragma unroll
      for (size_t k = 0; k < kVec<T>; ++k) acc[k] = R::init();
#pragma unroll
      for (int q = 0; q < NS; ++q) combine_vec<R, T>(acc, raw[q]);
      r.template finish<T, static_cast<int>(kVec<T>), true>(acc, at.j);
      pk::tma::sts128(out + i * 16u, pack_vec(acc, T{}));
    }
  }
}

// A staged move of `body` bytes (whole vectors): per chunk, thread 0 bulk-loads the chunk of
// every source into one stage (a shifted source with one vector more), every thread computes
// the stage's output slot (stage_op), thread 0 bulk-stores it to every destination. The source
// count is a template argument because the chunk's critical path (thread 0's issue, the sum) is
// 1.3-1.7x faster per block with it known than with a loop over a run-time count
// (validation/experiments/tma_align.cu at commit 7cc519e; docs/decisions.md D6). `base`: the
// position of the body's first element (R's epilogue).
template <class C, int NS, bool Shift, bool Copy, class R, typename T>
PK_DEV bool tma_stage_n(const ptr_table& tab, int ndst, size_t body, unsigned shifts, size_t base,
                        const R& r, block_smem& sm, const pk::spin_ctx& spin, int rank) {
  constexpr size_t pad = Shift ? 16 : 0;   // a source slot's extra vector
  constexpr size_t chunk = ((C::kStageBytes - NS * pad) / (NS + 1)) & ~static_cast<size_t>(15);
  constexpr size_t slot = chunk + pad;
  const size_t nchunks = (body != 0 && ndst != 0) ? ceil_div(body, chunk) : 0;
  int ok = 1;
  auto extra = [&](int q) -> unsigned { return Shift && ((shifts >> (4 * q)) & 15u) != 0 ? 16u : 0u; };
  // The stages' and the barriers' shared addresses, converted once: converted per load (generic
  // pointers to load_async), ptxas kept the barrier's in a per-thread register and made it
  // uniform again inside every bulk load's one-thread loop, an R2UR per source on thread 0's
  // path through each chunk, which the chunk waits for (8 sources 6 % slower at 1-16 blocks; D58).
  const uint32_t stage0 = pk::tma::smem_u32(sm.stage), bar0 = pk::tma::smem_u32(sm.bar);
  auto issue = [&](size_t c) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    unsigned tx = 0;
#pragma unroll
    for (int q = 0; q < NS; ++q) tx += len + extra(q);
    pk::tma::mbar_arrive_expect_tx(&sm.bar[s], tx);
    const uint32_t st = stage0 + static_cast<uint32_t>(s) * C::kStageBytes;
    const uint32_t bar = bar0 + static_cast<uint32_t>(s * sizeof(uint64_t));
#pragma unroll
    for (int q = 0; q < NS; ++q)
      pk::tma::load_async_u32(st + static_cast<uint32_t>(q * slot), tab.src[q] + c * chunk, len + extra(q), bar);
  };
  if (threadIdx.x == 0)
    for (size_t c = 0; c < nchunks && c < static_cast<size_t>(C::kStages); ++c) issue(c);
  // the position of this thread's first vector in chunk c, and the steps between
  auto at = r.walk(base + threadIdx.x * kVec<T>);
  const unsigned dchunk = r.stride(chunk / sizeof(T));
  const unsigned dstep = r.stride(static_cast<size_t>(blockDim.x) * kVec<T>);
  for (size_t c = 0; c < nchunks; ++c, at.advance(dchunk)) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    ok = pk::tma::mbar_wait(&sm.bar[s], (sm.parity >> s) & 1u, spin, rank) ? 1 : 0;
    sm.parity ^= 1u << s;
    // This stage's output slot was last stored from kStages chunks ago: that group (and only
    // it, among the groups still pending) must have finished reading it.
    if (threadIdx.x == 0) pk::tma::wait_group_read<C::kStages - 1>();
    if (!__syncthreads_and(ok)) return false;
    unsigned char* in = stage_at<C>(sm, s);
    unsigned char* out = in + NS * slot;
    stage_op<NS, Shift, Copy, R, T>(pk::tma::smem_u32(in), pk::tma::smem_u32(out), slot, len / 16, shifts, at,
                                    dstep, r);
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

// dst[d][0..n) = src[0..n) for a source whose misalignment differs from the (co-aligned)
// destinations': the body staged and realigned (tma_stage_n, one source), head and tail
// through registers.
template <class C, typename T>
PK_DEV bool tma_copy_shifted(const ptrs<T>& dst, const T* src, size_t n, block_smem& sm,
                             const pk::spin_ctx& spin, int rank) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const move_plan p = staged(plan_move<T>(dst, one(src), bytes), bytes, 1);
  __shared__ ptr_table tab;
  if (threadIdx.x == 0) tab.fill(dst, one(static_cast<const T*>(src)), p);
  copy_bytes(dst, src, 0, p.head, g);
  if (!tma_stage_n<C, 1, true, true, sum_policy, T>(tab, dst.n, 16 * p.nv, p.shifts, 0, sum_policy{}, sm, spin,
                                                   rank))
    return false;
  copy_bytes(dst, src, p.tail(), bytes, g);
  return __syncthreads_and(1) != 0;
}

// Whether a copy's source sits at another misalignment than its (co-aligned) destinations.
template <typename T>
PK_DEV bool copy_is_shifted(const ptrs<T>& dst, const T* src) {
  const int md = dst.misalignment();
  return md >= 0 && static_cast<unsigned>(md) != mis16(src);
}

template <class C, bool Shift, class R, typename T>
PK_DEV bool tma_reduce_body(const ptr_table& tab, int nsrc, int ndst, const move_plan& p, size_t base, const R& r,
                            block_smem& sm, const pk::spin_ctx& spin, int rank) {
  static_assert(PKC_SET_SLOTS <= 8 && PKC_TMA_MAX_SOURCES <= PKC_SET_SLOTS,
                "tma_reduce instantiates source counts 1..8");
  const size_t body = 16 * p.nv;
#define PKC_REDUCE_CASE(S) \
  case S:                  \
    return tma_stage_n<C, S, Shift, false, R, T>(tab, ndst, body, p.shifts, base, r, sm, spin, rank);
  switch (nsrc) {
    PKC_REDUCE_CASE(1)
    PKC_REDUCE_CASE(2)
    PKC_REDUCE_CASE(3)
    PKC_REDUCE_CASE(4)
    PKC_REDUCE_CASE(5)
    PKC_REDUCE_CASE(6)
    PKC_REDUCE_CASE(7)
    PKC_REDUCE_CASE(8)
    default: return true;
  }
#undef PKC_REDUCE_CASE
}

// dst[d] = R over src[q] (up to PKC_SET_SLOTS of each) through TMA: head and tail through
// registers, the body staged (shifted sources realigned in the stage); destinations at several
// misalignments, all through registers. `base`: the position of element 0 (R's epilogue).
template <class C, may_shift S = may_shift::any, class R = sum_policy, typename T>
PK_DEV bool tma_reduce(const ptrs<T>& dst, const cptrs<T>& src, size_t n, block_smem& sm,
                       const pk::spin_ctx& spin, int rank, const R& r = R{}, size_t base = 0) {
  const size_t bytes = n * sizeof(T);
  const pk::ldst::group g = pk::ldst::block_group();
  const move_plan p = S == may_shift::no ? plan_coaligned<T>(dst, src, bytes)
                                         : staged(plan_move<T>(dst, src, bytes), bytes, src.n);
  const size_t head = p.head / sizeof(T), tail = p.tail() / sizeof(T);
  __shared__ ptr_table tab;
  if (threadIdx.x == 0) tab.fill(dst, src, p);
  reduce_elems<T>(dst, src, 0, head, base, r, g);
  bool ok;
  if constexpr (S != may_shift::no) {
    ok = p.shifted() ? tma_reduce_body<C, true, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank)
                     : tma_reduce_body<C, false, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank);
  } else {
    ok = tma_reduce_body<C, false, R, T>(tab, src.n, dst.n, p, base + head, r, sm, spin, rank);
  }
  if (!ok) return false;
  reduce_elems<T>(dst, src, tail, n, base, r, g);
  return __syncthreads_and(1) != 0;
}

}  // namespace pkc

#endif  // __CUDACC__
