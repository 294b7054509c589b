// collectives/moves.cuh: the element loops of every move the generated collectives make: copy one
// source to up to PKC_SET_SLOTS destinations, or reduce sources into them, by registers or TMA,
// for sets (ptr_set) and for lists of any length (peer_list). Part of collective.cuh, which
// includes it after the sets and the stage state it works on; collective.cuh's dispatch
// (copy_to, copy_range, reduce_to, copy_list, reduce_list) is how the algorithms call it.
//
// One cut for every move (move_plan): a head element by element up to the destinations' 16-byte
// boundary, a body of 16-byte vectors stored on that grid, a tail element by element. A source
// whose misalignment equals the destinations' is read by plain vector loads; one whose
// misalignment differs (a shard at r x count of one buffer moved to the start of another, a -v
// block at different displacements on its two sides) is read by aligned vector loads and
// realigned: by registers, each lane takes the next vector from the next lane (a warp stores 31
// vectors of the 32 it loads); by TMA, the source's aligned span, one vector longer, is
// bulk-loaded into the stage and the threads realign it there before the bulk stores. The body
// reads only bytes of the move's range (a shifted source's first vector moves into the head
// where it would start before the range, its last into the tail where it would end past it).
// Destinations that do not share one misalignment (no algorithm makes such a set) are moved
// element by element (copies: pk::ldst::copy each). docs/decisions.md D58.
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
// byte head - shift(q) + 16 i + shift(q): with shift(q) != 0, bytes shift(q).. of the aligned
// pair at head - shift(q) + 16 i (its vectors i and i + 1).
struct move_plan {
  size_t head = 0, nv = 0;
  unsigned shifts = 0;   // source q: bits [4q, 4q + 4)
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
// ... and the body, once the nsrc sources are in. In a shifted move every source's loads run one
// vector past the body (a shifted source's last vector needs its next; the others load it too,
// so that the loop's bound is one for all): a source whose first aligned vector would start
// before its range gives the head one vector more, one whose vector past the body would end
// past its range gives the body one vector less.
PK_HD void plan_body(move_plan& p, size_t bytes, int nsrc) {
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
}
// Everything element by element.
PK_HD move_plan plan_scalar(size_t bytes) {
  move_plan p;
  p.head = bytes;
  return p;
}

// The plan of a set of sources into a set or list of destinations.
template <typename T, class D, typename P>
PK_DEV move_plan plan_move(const D& dst, const ptr_set<P>& src, size_t bytes) {
  const int md = dst.misalignment();
  if (md < 0) return plan_scalar(bytes);
  move_plan p = plan_head(static_cast<unsigned>(md), bytes);
  PKC_EACH(q, src.n) plan_source(p, q, mis16(src.p[q]));
  plan_body(p, bytes, src.n);
  return p;
}
// ... of a list of sources (one misalignment: every shift is shift(0); a set of mixed
// misalignments moves element by element).
template <typename T, class D, class S>
PK_DEV move_plan plan_list(const D& dst, const S& src, size_t bytes) {
  const int md = dst.misalignment(), ms = src.misalignment();
  if (md < 0 || ms < 0) return plan_scalar(bytes);
  move_plan p = plan_head(static_cast<unsigned>(md), bytes);
  plan_source(p, 0, static_cast<unsigned>(ms));
  plan_body(p, bytes, 1);
  return p;
}

// ... of a set whose every pointer shares one misalignment, else element by element (no shifts).
template <typename T, class D, typename P>
PK_DEV move_plan plan_coaligned(const D& dst, const ptr_set<P>& src, size_t bytes) {
  const int md = dst.misalignment();
  bool co = md >= 0;
  PKC_EACH(q, src.n) co = co && static_cast<int>(mis16(src.p[q])) == md;
  if (!co) return plan_scalar(bytes);
  move_plan p = plan_head(static_cast<unsigned>(md), bytes);
  p.nv = (bytes - p.head) / 16;
  return p;
}

// The 16 bytes at byte sh (0..15) of the 32 bytes lo, hi; E: the element size, a divisor of sh
// (words need no byte shift when E >= 4).
template <int E>
PK_DEV uint4 funnel16(const uint4& lo, const uint4& hi, unsigned sh) {
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint32_t v[5];   // words sh / 4 .. sh / 4 + 4
#pragma unroll
  for (int j = 0; j < 5; ++j) {
    const uint32_t a = (sh & 8u) ? w[j + 2] : w[j];
    const uint32_t b = (sh & 8u) ? w[j + 3] : w[j + 1];
    v[j] = (sh & 4u) ? b : a;
  }
  (void)E;
  const unsigned bits = (sh & 3u) * 8u;
  return make_uint4(__funnelshift_r(v[0], v[1], bits), __funnelshift_r(v[1], v[2], bits),
                    __funnelshift_r(v[2], v[3], bits), __funnelshift_r(v[3], v[4], bits));
}

// v realigned by sh bytes with the next lane's vector (every lane of the warp calls it).
template <int E>
PK_DEV uint4 realign(const uint4& v, unsigned sh) {
  const uint4 next = make_uint4(__shfl_down_sync(~0u, v.x, 1), __shfl_down_sync(~0u, v.y, 1),
                                __shfl_down_sync(~0u, v.z, 1), __shfl_down_sync(~0u, v.w, 1));
  return funnel16<E>(v, next, sh);
}

// Whether a group can realign by lanes: whole warps, lane = tid % 32 (every group of the
// collectives: a block's or a grid's threads).
PK_DEV bool warp_shaped(pk::ldst::group g) { return (g.size & 31u) == 0; }

// The body's vectors a lane works on: aligned, g.tid, g.tid + g.size, ...; shifted, warp
// windows of 31 vectors (the warp's 32 lanes load 32, lane 31's only for lane 30), the lane's
// place in its warp's window, windows of all warps in turn. at(k, u): round k's unroll u;
// more(k): whether round k has work (shifted: for the whole warp alike, so that every lane
// takes part in the shuffles).
template <bool Shift>
struct body_index {
  size_t lanes, step, first;   // vectors between unrolls, between rounds, the lane's first
  unsigned lane;
  PK_DEV body_index(pk::ldst::group g, int U) {
    lane = static_cast<unsigned>(g.tid & 31u);
    lanes = Shift ? g.size / 32 * 31 : g.size;
    step = static_cast<size_t>(U) * lanes;
    first = Shift ? g.tid / 32 * 31 + lane : g.tid;
  }
  PK_DEV bool more(size_t k, size_t nv) const { return Shift ? k - lane < nv : k < nv; }
  PK_DEV size_t at(size_t k, int u) const { return k + u * lanes; }
  // whether this lane stores vector i of nv
  PK_DEV bool stores(size_t i, size_t nv) const { return i < nv && (!Shift || lane < 31); }
};

// The same in 32 bits, for the shifted sums' loops (registers: a piece holds fewer than 2^32
// vectors, which reg_reduce checks).
struct window_index {
  unsigned lanes, step, first, lane;
  PK_DEV window_index(pk::ldst::group g, int U) {
    lane = static_cast<unsigned>(g.tid & 31u);
    lanes = static_cast<unsigned>(g.size / 32 * 31);
    step = static_cast<unsigned>(U) * lanes;
    first = static_cast<unsigned>(g.tid / 32 * 31) + lane;
  }
  PK_DEV bool more(unsigned k, unsigned nv) const { return k - lane < nv; }
  PK_DEV unsigned at(unsigned k, int u) const { return k + static_cast<unsigned>(u) * lanes; }
  PK_DEV bool stores(unsigned i, unsigned nv) const { return i < nv && lane < 31; }
};

// ---- register path: copies ----------------------------------------------------------------------

// The body of reg_copy: U vectors a thread in flight, each stored to every destination.
template <bool Shift, typename T>
PK_DEV void reg_copy_body(const ptrs<T>& dst, const unsigned char* src, const move_plan& p,
                          pk::ldst::group g) {
  constexpr int U = pk::ldst::UNROLL;
  const uint4* sv = reinterpret_cast<const uint4*>(src + p.head - p.shift(0));
  const size_t nv = p.nv;
  auto out = [&](int d) { return reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(dst.p[d]) + p.head); };
  if constexpr (!Shift) {
    size_t i = g.tid;
    for (; i + (U - 1) * g.size < nv; i += U * g.size) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = __ldcg(sv + i + u * g.size);
      PKC_EACH(d, dst.n) {
        uint4* dv = out(d);
#pragma unroll
        for (int u = 0; u < U; ++u) dv[i + u * g.size] = v[u];
      }
    }
    for (; i < nv; i += g.size) {
      const uint4 v = __ldcg(sv + i);
      PKC_EACH(d, dst.n) out(d)[i] = v;
    }
  } else {
    const unsigned sh = p.shift(0);
    const body_index<true> ix(g, U);
    for (size_t k = ix.first; ix.more(k, nv); k += ix.step) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const size_t i = ix.at(k, u);
        v[u] = i <= nv ? __ldcg(sv + i) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = realign<1>(v[u], sh);
      PKC_EACH(d, dst.n) {
        uint4* dv = out(d);
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (ix.stores(ix.at(k, u), nv)) dv[ix.at(k, u)] = v[u];
      }
    }
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

// dst[d][0..n) = src[0..n) for every destination: one 16-byte load a vector, stored to every
// destination (the destinations co-aligned; else pk::ldst::copy each).
template <typename T>
PK_DEV void reg_copy(const ptrs<T>& dst, const T* src, size_t n, pk::ldst::group g) {
  const size_t bytes = n * sizeof(T);
  if (bytes == 0 || dst.n == 0) return;
  const int md = dst.misalignment();
  if (md < 0 || (!warp_shaped(g) && static_cast<unsigned>(md) != mis16(src))) {
    PKC_EACH(d, dst.n) pk::ldst::copy(dst.p[d], src, bytes, g);
    return;
  }
  const move_plan p = plan_move<T>(dst, one(src), bytes);
  copy_bytes(dst, src, 0, p.head, g);
  if (p.shifted()) reg_copy_body<true>(dst, reinterpret_cast<const unsigned char*>(src), p, g);
  else reg_copy_body<false>(dst, reinterpret_cast<const unsigned char*>(src), p, g);
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
    const T v = from_f32<T>(a);
    dst.each([&](T* p) { p[i] = v; });
  }
}

// What misalignments a caller's sums can meet, so that the loops it cannot meet are left out
// (each costs registers where the kernels sit at the register cap): co-aligned only (the one-
// and two-shot all-reduces: pieces of whole lines); every source at one shift (every rank's
// buffer at one offset); any.
enum class may_shift { no, common, any };

// How a sum's sources sit against its destinations: all co-aligned; all at one shift (every
// rank's buffer at one offset), realigned once, the result; each at its own (a ring's or a
// halving's two: the rank's shard and a slot of scratch), each source realigned.
enum class shift_mode { none, common, each };

PK_DEV bool common_shift(const move_plan& p, int nsrc) {
  bool same = true;
#pragma unroll
  for (int q = 1; q < PKC_SET_SLOTS; ++q) same = same && (q >= nsrc || p.shift(q) == p.shift(0));
  return same;
}

// The vector part of reg_reduce, every source co-aligned with the destinations: U vectors of
// each of up to Q sources per thread and round, QB sources loaded at a time (then added, in
// source order: the sum is that of one pass).
template <int U, int Q, int QB, class R, typename T>
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
            if (i0 + u * g.size < nv) raw[u][q] = __ldcg(sv + i0 + u * g.size);
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

// The same for shifted sources: each lane loads and sums the vector of the sources' aligned
// grid that starts its output (lane 31 loads the next window's first, for lane 30), then takes
// the rest from the next lane: common (every source at one shift), the packed result, realigned
// once (the epilogue placed by the sources' grid, s elements before the output's); each, every
// source's vector as it is loaded. Either way the same fp32 operations in the same order as the
// aligned loop. Every source's loads run one vector past the body (plan_body).
template <int U, int Q, int QB, shift_mode M, class R, typename T>
PK_DEV void reg_reduce_shifted(const ptrs<T>& dst, const cptrs<T>& src, const move_plan& p, size_t base,
                               const R& r, pk::ldst::group g) {
  constexpr size_t V = kVec<T>;
  static_assert(M != shift_mode::none && Q % QB == 0 && U <= 2, "as reg_reduce_body, shifted");
  const unsigned nv = static_cast<unsigned>(p.nv), last = nv + 1;
  const window_index ix(g, U);
  const size_t head = p.head / sizeof(T);
  // More than 4 sources: their aligned starts in shared memory, read at each use (volatile: not
  // held in registers across the loop), so that the block's 8 pointers take no registers.
  constexpr bool kTable = Q > 4;
  __shared__ const uint4* table[PKC_SET_SLOTS];
  auto start = [&](int q) {
    return reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(src.p[q]) + p.head -
                                          (M == shift_mode::each ? p.shift(q) : p.shift(0)));
  };
  if constexpr (kTable) {
    __syncthreads();   // the previous move's reads of the table are done
    PKC_EACH(q, src.n) if (threadIdx.x == static_cast<unsigned>(q)) table[q] = start(q);
    __syncthreads();
  }
  auto from = [&](int q) {
    if constexpr (kTable) return static_cast<const uint4* volatile*>(table)[q];
    else return start(q);
  };
  const unsigned sh = p.shift(0);
  const size_t lead = M == shift_mode::common ? sh / sizeof(T) : 0;   // where the sum's grid starts
  auto at = r.walk(base + head - lead + ix.first * V);   // the lane's first vector
  const unsigned du = r.stride(ix.lanes * V);            // ... to unroll u + 1
  const unsigned dround = r.stride(ix.step * V);         // ... to the next round
  for (unsigned k = ix.first; ix.more(k, nv); k += ix.step, at.advance(dround)) {
    float acc[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (size_t e = 0; e < V; ++e) acc[u][e] = R::init();
#pragma unroll
    for (int q0 = 0; q0 < Q; q0 += QB) {
      uint4 raw[U][QB];
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        if (q0 + q < src.n) {
          const uint4* sv = from(q0 + q);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const unsigned i = ix.at(k, u);
            if (i < last) raw[u][q] = __ldcg(sv + i);   // past `last`: neither this lane nor the one before stores
          }
        }
      }
      if constexpr (M == shift_mode::each) {
#pragma unroll
        for (int q = 0; q < QB; ++q)
          if (q0 + q < src.n && p.shift(q0 + q) != 0)
#pragma unroll
            for (int u = 0; u < U; ++u) raw[u][q] = realign<sizeof(T)>(raw[u][q], p.shift(q0 + q));
      }
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        if (q0 + q < src.n) {
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (ix.at(k, u) < last) combine_vec<R, T>(acc[u], raw[u][q]);
        }
      }
      // keep the next batch's loads behind this batch's adds: its registers are reused
      if (q0 + QB < Q) asm volatile("" ::: "memory");
    }
    uint4 out[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      r.template finish<T, static_cast<int>(V)>(acc[u], u == 0 ? at.j : at.plus(du));
      out[u] = pack_vec(acc[u], T{});
      if constexpr (M == shift_mode::common) out[u] = realign<sizeof(T)>(out[u], sh);
    }
    PKC_EACH(d, dst.n) {
      uint4* dv = reinterpret_cast<uint4*>(dst.p[d] + head);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ix.stores(ix.at(k, u), nv)) dv[ix.at(k, u)] = out[u];
    }
  }
}

// dst[d][i] = R over src[q][i] for lists of any length (peer_list, or a ptr_set): the sources
// PKC_SET_SLOTS at a time into one fp32 accumulator per vector (each batch's 16-byte loads in
// flight together, its pointers filled at compile-time slots), the result stored to the
// destinations PKC_SET_SLOTS at a time. The sum's order is the list's; rounded once. One shift
// for every source (lists of rank buffers at one offset share their misalignment): the result
// realigned once (reg_reduce_body, shift_mode::common).
template <bool Shift, class R, typename T, class D, class S>
PK_DEV void reg_reduce_many_body(const D& dst, const S& src, const move_plan& p, size_t base, const R& r,
                                 pk::ldst::group g) {
  constexpr size_t V = kVec<T>;
  const size_t nv = p.nv, last = Shift ? nv + 1 : nv;
  const unsigned sh = p.shift(0);
  const body_index<Shift> ix(g, 1);
  auto at = r.walk(base + p.head / sizeof(T) - sh / sizeof(T) + ix.first * V);
  const unsigned dround = r.stride(ix.step * V);
  for (size_t k = ix.first; ix.more(k, nv); k += ix.step, at.advance(dround)) {
    const size_t i = ix.at(k, 0);
    float acc[V];
#pragma unroll
    for (size_t e = 0; e < V; ++e) acc[e] = R::init();
    if (i < last) {
      for (int q0 = 0; q0 < src.n; q0 += PKC_SET_SLOTS) {
        cptrs<T> b;
        src.fill_set(b, q0);
        uint4 raw[PKC_SET_SLOTS];
        PKC_EACH(q, b.n) {
          raw[q] = __ldcg(reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(b.p[q]) + p.head - sh) + i);
        }
        PKC_EACH(q, b.n) combine_vec<R, T>(acc, raw[q]);
      }
    }
    r.template finish<T, static_cast<int>(V)>(acc, at.j);
    uint4 v = pack_vec(acc, T{});
    if constexpr (Shift) v = realign<sizeof(T)>(v, sh);
    if (!ix.stores(i, nv)) continue;
    for (int d0 = 0; d0 < dst.n; d0 += PKC_SET_SLOTS) {
      ptrs<T> b;
      dst.fill_set(b, d0);
      PKC_EACH(d, b.n) reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(b.p[d]) + p.head)[i] = v;
    }
  }
}

// Shifted sums: one shift for all sources, any count; one each, two sources (the rings' and
// halvings' sums; more with several shifts do not occur and go element by element).
template <int U, int Q, int QB, may_shift S, class R, typename T>
PK_DEV void reg_reduce_vectors(const ptrs<T>& dst, const cptrs<T>& src, const move_plan& p, size_t base,
                               const R& r, pk::ldst::group g) {
  if constexpr (S != may_shift::no) {
    if (p.shifted()) {
      if constexpr (S == may_shift::any && Q == 2) {
        if (!common_shift(p, src.n)) return reg_reduce_shifted<U, Q, QB, shift_mode::each>(dst, src, p, base, r, g);
      }
      return reg_reduce_shifted<U, Q, QB, shift_mode::common>(dst, src, p, base, r, g);
    }
  }
  reg_reduce_body<U, Q, QB>(dst, src, p.head / sizeof(T), p.nv, base, r, g);
}

// dst[d][i] = R over sources of src[q][i] (fp32, sources in the given order), for every
// destination; `base`: the position of element 0 in the reduced buffer (R's epilogue).
// QB: how many of more than 4 sources the plain sum loads at a time (below). S: what the
// caller can meet (may_shift); the shifted loops left out put the register two-shot (8 sources,
// 8 destinations, at the 128-register cap) on 80-230 B of stack, and the realigning of every
// source the direct reduce-scatter's (8 sources) on 16-100 B (ptxas -v, sm_90a, CUDA 13.0);
// what a caller cannot meet goes element by element (and a mix of shifts over more than two
// sources, which no algorithm makes).
template <int QB = PKC_SET_SLOTS, may_shift S = may_shift::any, class R = sum_policy, typename T>
PK_DEV void reg_reduce(const ptrs<T>& dst, const cptrs<T>& src, size_t n, pk::ldst::group g, const R& r = R{},
                       size_t base = 0) {
  if (n == 0 || dst.n == 0) return;
  const size_t bytes = n * sizeof(T);
  move_plan p = S == may_shift::no       ? plan_coaligned<T>(dst, src, bytes)
                : S == may_shift::common ? plan_list<T>(dst, src, bytes)
                                         : plan_move<T>(dst, src, bytes);
  if (p.shifted() && (!warp_shaped(g) || p.nv >= (1ull << 31) ||
                      (!common_shift(p, src.n) && (S == may_shift::common || src.n != 2))))
    p = plan_scalar(bytes);
  reduce_elems<T>(dst, src, 0, p.head / sizeof(T), base, r, g);
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
  if (src.n <= 2) reg_reduce_vectors<U, 2, 2, S>(dst, src, p, base, r, g);
  else if (src.n <= 4) reg_reduce_vectors<U, 4, 4, S>(dst, src, p, base, r, g);
  else reg_reduce_vectors<1, PKC_SET_SLOTS, QB, S>(dst, src, p, base, r, g);
  reduce_elems<T>(dst, src, p.tail() / sizeof(T), n, base, r, g);
}

template <typename T, class D, class S, class R = sum_policy>
PK_DEV void reg_reduce_many(const D dst, const S src, size_t n, pk::ldst::group g, const R& r = R{},
                            size_t base = 0) {
  if (n == 0 || dst.n == 0 || src.n == 0) return;
  const size_t bytes = n * sizeof(T);
  move_plan p = plan_list<T>(dst, src, bytes);
  if (p.shifted() && !warp_shaped(g)) p = plan_scalar(bytes);
  const size_t head = p.head / sizeof(T), tail = p.tail() / sizeof(T);
  reduce_elems<T>(dst, src, 0, head, base, r, g);
  if (p.shifted()) reg_reduce_many_body<true, R, T>(dst, src, p, base, r, g);
  else reg_reduce_many_body<false, R, T>(dst, src, p, base, r, g);
  reduce_elems<T>(dst, src, tail, n, base, r, g);
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
  const move_plan p = plan_move<T>(dst, one(src), bytes);
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
        if (sh != 0) raw[q] = funnel16<(Copy ? 1 : sizeof(T))>(raw[q], pk::tma::lds128(in + q * slot + i * 16u + 16u), sh);
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
  auto issue = [&](size_t c) {
    const int s = static_cast<int>(c % C::kStages);
    const unsigned len = static_cast<unsigned>(min_size(chunk, body - c * chunk));
    unsigned tx = 0;
#pragma unroll
    for (int q = 0; q < NS; ++q) tx += len + extra(q);
    pk::tma::mbar_arrive_expect_tx(&sm.bar[s], tx);
#pragma unroll
    for (int q = 0; q < NS; ++q)
      pk::tma::load_async(stage_at<C>(sm, s) + q * slot, tab.src[q] + c * chunk, len + extra(q), &sm.bar[s]);
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
  const move_plan p = plan_move<T>(dst, one(src), bytes);
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
  const move_plan p = S == may_shift::no ? plan_coaligned<T>(dst, src, bytes) : plan_move<T>(dst, src, bytes);
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
