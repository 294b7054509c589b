// collectives/moves_reg.cuh: the register path of the moves (moves.cuh: the cut and the policy):
// copies to a set or a list of destinations and sums of a set or a list of sources, in 16-byte
// vectors on the destinations' grid, shifted sources read in the widest words they allow.
#pragma once

#ifdef __CUDACC__

namespace pkc {

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
  // all 8 in flight (docs/decisions/D24.md). A reduce op or an epilogue takes the registers a
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

}  // namespace pkc

#endif  // __CUDACC__
