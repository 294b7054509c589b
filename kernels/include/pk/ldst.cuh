// pk/ldst.cuh: register-path peer loads and stores, 16 bytes per thread, coalesced.
//
// Provides (device side, namespace pk::ldst)
//   * group: the threads that share a loop (index within the group, group size); helpers for
//     a warp, a block, and all blocks of one (virtual) rank;
//   * copy(dst, src, bytes, g): byte-exact copy between global buffers (either side may be a
//     peer's). The body moves the widest word w in {16, 8, 4, 2, 1} for which
//     dst == src (mod w) -- 16-byte uint4 whenever the two are co-aligned -- after a short
//     byte head that aligns dst; the remaining tail is copied byte by byte. Any size, any
//     offsets;
//   * add_into(dst, src, n, g): dst[i] += src[i] for float or bf16, non-atomic (each element
//     of dst must have a single writer), float4 / 4 x bf16x2 per 16 bytes;
//   * red_into(dst, src, n, g): dst[i] += src[i] atomically at system scope, for several
//     writers (e.g. every rank adding into every peer): red.relaxed.sys.global.add.v4.f32 and
//     red.relaxed.sys.global.add.noftz.v4.bf16x2 for the body, scalar reds for head and tail.
//
// Both pointers must be global memory (local or peer): loads use ld.global.cg (__ldcg), which
// reads at L2 and never through the non-coherent read-only path, so data a peer wrote before a
// signal this thread acquired is seen. Elements of one 16-byte vector are consecutive, and
// consecutive threads of a group take consecutive vectors, so a warp moves 512 contiguous
// bytes per load instruction; each thread keeps UNROLL vectors in flight.
//
// Ordering: these are plain (weak) accesses and relaxed atomics. Publish them to a peer with
// pk::signal / pk::barrier after a __syncthreads() (see pk/sync.cuh); nothing else is needed
// since they all belong to the generic proxy.
#pragma once

#include <cuda_bf16.h>

#include "common.cuh"

namespace pk {
namespace ldst {

constexpr int UNROLL = 4;

struct group {
  size_t tid;   // this thread's index in the group
  size_t size;  // number of threads in the group
};

PK_DEV group warp_group() { return group{threadIdx.x & 31u, 32}; }
PK_DEV group block_group() { return group{threadIdx.x, blockDim.x}; }
// All blocks of one rank when a rank owns `blocks_per_rank` consecutive blocks of the grid.
PK_DEV group rank_group(unsigned int blocks_per_rank) {
  const unsigned int local_block = blockIdx.x % blocks_per_rank;
  return group{static_cast<size_t>(local_block) * blockDim.x + threadIdx.x,
               static_cast<size_t>(blocks_per_rank) * blockDim.x};
}

namespace detail {

template <typename W>
PK_DEV void copy_words(W* dst, const W* src, size_t n, group g) {
  size_t i = g.tid;
  for (; i + (UNROLL - 1) * g.size < n; i += UNROLL * g.size) {
    W v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldcg(src + i + u * g.size);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) dst[i + u * g.size] = v[u];
  }
  for (; i < n; i += g.size) dst[i] = __ldcg(src + i);
}

PK_DEV void copy_bytes(unsigned char* dst, const unsigned char* src, size_t n, group g) {
  for (size_t i = g.tid; i < n; i += g.size) dst[i] = __ldcg(src + i);
}

// n words of type W between byte pointers that are both aligned to sizeof(W).
template <typename W>
PK_DEV void copy_words_as(unsigned char* dst, const unsigned char* src, size_t n, group g) {
  copy_words(reinterpret_cast<W*>(dst), reinterpret_cast<const W*>(src), n, g);
}

// Element split of a typed span into [0, head) scalar, `nvec` 16-byte vectors, then scalar
// tail. Vectors are only used when dst and src are co-aligned modulo 16.
struct plan {
  size_t head;
  size_t nvec;
  size_t tail_begin;
};

template <typename T>
PK_DEV plan plan16(const T* dst, const T* src, size_t n) {
  constexpr size_t V = 16 / sizeof(T);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  plan p{n, 0, n};
  if (((d ^ s) & 15u) == 0) {
    p.head = ((16u - (d & 15u)) & 15u) / sizeof(T);
    if (p.head > n) p.head = n;
    p.nvec = (n - p.head) / V;
    p.tail_begin = p.head + p.nvec * V;
  }
  return p;
}

PK_DEV float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// 8 bf16 (4 x bf16x2) packed in a uint4.
PK_DEV uint4 add8_bf16(uint4 a, uint4 b) {
  uint4 r;
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&b);
  __nv_bfloat162* z = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int k = 0; k < 4; ++k) z[k] = __hadd2(x[k], y[k]);
  return r;
}

PK_DEV float add1(float a, float b) { return a + b; }
PK_DEV __nv_bfloat16 add1(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }

// 16-byte vector type used for T's body loop.
template <typename T> struct vec16;
template <> struct vec16<float> { using type = float4; };
template <> struct vec16<__nv_bfloat16> { using type = uint4; };

PK_DEV float4 vadd(float4 a, float4 b) { return add4(a, b); }
PK_DEV uint4 vadd(uint4 a, uint4 b) { return add8_bf16(a, b); }

}  // namespace detail

// ---- system-scope relaxed reductions (atomic per element) -------------------------------

PK_DEV void red_add(float* dst, float v) {
  asm volatile("red.relaxed.sys.global.add.f32 [%0], %1;"
               :
               : "l"(__cvta_generic_to_global(dst)), "f"(v)
               : "memory");
}

PK_DEV void red_add(__nv_bfloat16* dst, __nv_bfloat16 v) {
  asm volatile("red.relaxed.sys.global.add.noftz.bf16 [%0], %1;"
               :
               : "l"(__cvta_generic_to_global(dst)), "h"(__bfloat16_as_ushort(v))
               : "memory");
}

PK_DEV void red_add_vec(float* dst, float4 v) {
  asm volatile("red.relaxed.sys.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
               :
               : "l"(__cvta_generic_to_global(dst)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

PK_DEV void red_add_vec(__nv_bfloat16* dst, uint4 v) {
  asm volatile("red.relaxed.sys.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};"
               :
               : "l"(__cvta_generic_to_global(dst)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// ---- bulk loops --------------------------------------------------------------------------

PK_DEV void copy(void* dst, const void* src, size_t bytes, group g) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  const uintptr_t da = reinterpret_cast<uintptr_t>(d);
  // Widest w <= 16 with dst == src (mod w): the lowest set bit of (dst - src) mod 16.
  const unsigned int delta =
      static_cast<unsigned int>((da - reinterpret_cast<uintptr_t>(s)) & 15u);
  const unsigned int w = delta == 0 ? 16u : (delta & (0u - delta));
  size_t head = (w - (da & (w - 1))) & (w - 1);
  if (head > bytes) head = bytes;
  detail::copy_bytes(d, s, head, g);
  const size_t nw = (bytes - head) / w;
  d += head;
  s += head;
  switch (w) {
    case 16: detail::copy_words_as<uint4>(d, s, nw, g); break;
    case 8: detail::copy_words_as<uint2>(d, s, nw, g); break;
    case 4: detail::copy_words_as<unsigned int>(d, s, nw, g); break;
    case 2: detail::copy_words_as<unsigned short>(d, s, nw, g); break;
    default: detail::copy_bytes(d, s, nw, g); break;
  }
  detail::copy_bytes(d + nw * w, s + nw * w, bytes - head - nw * w, g);
}

// dst[i] += src[i], i < n; T is float or __nv_bfloat16. Non-atomic: one writer per element.
template <typename T>
PK_DEV void add_into(T* dst, const T* src, size_t n, group g) {
  using V = typename detail::vec16<T>::type;
  const detail::plan p = detail::plan16(dst, src, n);
  for (size_t i = g.tid; i < p.head; i += g.size)
    dst[i] = detail::add1(__ldcg(dst + i), __ldcg(src + i));
  V* dv = reinterpret_cast<V*>(dst + p.head);
  const V* sv = reinterpret_cast<const V*>(src + p.head);
  size_t i = g.tid;
  for (; i + (UNROLL - 1) * g.size < p.nvec; i += UNROLL * g.size) {
    V a[UNROLL], b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      a[u] = __ldcg(dv + i + u * g.size);
      b[u] = __ldcg(sv + i + u * g.size);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) dv[i + u * g.size] = detail::vadd(a[u], b[u]);
  }
  for (; i < p.nvec; i += g.size) dv[i] = detail::vadd(__ldcg(dv + i), __ldcg(sv + i));
  for (size_t j = p.tail_begin + g.tid; j < n; j += g.size)
    dst[j] = detail::add1(__ldcg(dst + j), __ldcg(src + j));
}

// dst[i] += src[i] atomically (system scope), i < n; T is float or __nv_bfloat16.
template <typename T>
PK_DEV void red_into(T* dst, const T* src, size_t n, group g) {
  using V = typename detail::vec16<T>::type;
  const detail::plan p = detail::plan16(dst, src, n);
  for (size_t i = g.tid; i < p.head; i += g.size) red_add(dst + i, __ldcg(src + i));
  T* dv = dst + p.head;
  const V* sv = reinterpret_cast<const V*>(src + p.head);
  constexpr size_t E = 16 / sizeof(T);
  size_t i = g.tid;
  for (; i + (UNROLL - 1) * g.size < p.nvec; i += UNROLL * g.size) {
    V b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) b[u] = __ldcg(sv + i + u * g.size);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) red_add_vec(dv + (i + u * g.size) * E, b[u]);
  }
  for (; i < p.nvec; i += g.size) red_add_vec(dv + i * E, __ldcg(sv + i));
  for (size_t j = p.tail_begin + g.tid; j < n; j += g.size) red_add(dst + j, __ldcg(src + j));
}

}  // namespace ldst
}  // namespace pk
