// pk/multimem.cuh: NVLink-multicast (NVLS) register operations, behind PK_ENABLE_MULTIMEM.
//
// Provides (device side, namespace pk::multimem), for f32, float4, bf16x2 and bf16x8 (16 B):
//   * ld_reduce_add(mc): load the value at a multicast address from every rank bound to it
//     and return the sum (in-switch reduction; bf16 sums accumulate in f32: .acc::f32);
//   * st(mc, v): store v to every rank's copy;
//   * red_add(mc, v): atomically add v into every rank's copy;
//   * signal_all(mc_flag, v): multimem.red.release.sys add on a u32 counter of every rank.
//
// A multicast address (pgl::mc) comes from cuMulticastCreate + cuMulticastBindMem and is the
// only kind of address these instructions accept; any other address is undefined behaviour.
// The machines this project validates on never enable NVLink multicast (doing so can take
// shared GPUs out of service), so these wrappers are compiled and simulated, never run:
//   * with PK_ENABLE_MULTIMEM=1 they are real inline-PTX wrappers (sm_90+);
//   * otherwise (the default) every wrapper is a template whose instantiation fails a
//     static_assert, so calling one is a compile error that names the switch.
//
// Ordering: ld_reduce / st / red below are .relaxed.sys; signal_all is .release.sys, so it
// publishes this thread's earlier writes (including earlier multimem.st / red) to every rank
// that acquires the counter. Reading data that arrived by multimem.st after such an acquire
// needs nothing more: multimem operations belong to the generic proxy.
#pragma once

#include <cuda_bf16.h>
#include <cstring>
#include <type_traits>

#include "common.cuh"

#ifndef PK_ENABLE_MULTIMEM
#define PK_ENABLE_MULTIMEM 0
#endif

namespace pk {
namespace multimem {

// Eight bf16 values (16 bytes) for the vectorised forms.
struct alignas(16) bf16x8 {
  __nv_bfloat162 h[4];
};

#if PK_ENABLE_MULTIMEM

namespace detail {
PK_DEV uint64_t addr(const void* p) { return static_cast<uint64_t>(__cvta_generic_to_global(p)); }
PK_DEV unsigned int bits(__nv_bfloat162 v) {
  unsigned int u;
  memcpy(&u, &v, sizeof(u));
  return u;
}
PK_DEV __nv_bfloat162 from_bits(unsigned int u) {
  __nv_bfloat162 v;
  memcpy(&v, &u, sizeof(v));
  return v;
}
}  // namespace detail

// ---- ld_reduce ----
PK_DEV float ld_reduce_add(const float* mc) {
  float r;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];"
               : "=f"(r) : "l"(detail::addr(mc)) : "memory");
  return r;
}
PK_DEV float4 ld_reduce_add(const float4* mc) {
  float4 r;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(detail::addr(mc)) : "memory");
  return r;
}
PK_DEV __nv_bfloat162 ld_reduce_add(const __nv_bfloat162* mc) {
  unsigned int r;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2 %0, [%1];"
               : "=r"(r) : "l"(detail::addr(mc)) : "memory");
  return detail::from_bits(r);
}
PK_DEV bf16x8 ld_reduce_add(const bf16x8* mc) {
  unsigned int r[4];
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(detail::addr(mc)) : "memory");
  bf16x8 out;
#pragma unroll
  for (int k = 0; k < 4; ++k) out.h[k] = detail::from_bits(r[k]);
  return out;
}

// ---- st ----
PK_DEV void st(float* mc, float v) {
  asm volatile("multimem.st.relaxed.sys.global.f32 [%0], %1;"
               : : "l"(detail::addr(mc)), "f"(v) : "memory");
}
PK_DEV void st(float4* mc, float4 v) {
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};"
               : : "l"(detail::addr(mc)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
PK_DEV void st(__nv_bfloat162* mc, __nv_bfloat162 v) {
  asm volatile("multimem.st.relaxed.sys.global.bf16x2 [%0], %1;"
               : : "l"(detail::addr(mc)), "r"(detail::bits(v)) : "memory");
}
PK_DEV void st(bf16x8* mc, const bf16x8& v) {
  asm volatile("multimem.st.relaxed.sys.global.v4.bf16x2 [%0], {%1, %2, %3, %4};"
               : : "l"(detail::addr(mc)), "r"(detail::bits(v.h[0])), "r"(detail::bits(v.h[1])),
                   "r"(detail::bits(v.h[2])), "r"(detail::bits(v.h[3])) : "memory");
}

// ---- red ----
PK_DEV void red_add(float* mc, float v) {
  asm volatile("multimem.red.relaxed.sys.global.add.f32 [%0], %1;"
               : : "l"(detail::addr(mc)), "f"(v) : "memory");
}
PK_DEV void red_add(float4* mc, float4 v) {
  asm volatile("multimem.red.relaxed.sys.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
               : : "l"(detail::addr(mc)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
PK_DEV void red_add(__nv_bfloat162* mc, __nv_bfloat162 v) {
  asm volatile("multimem.red.relaxed.sys.global.add.bf16x2 [%0], %1;"
               : : "l"(detail::addr(mc)), "r"(detail::bits(v)) : "memory");
}
PK_DEV void red_add(bf16x8* mc, const bf16x8& v) {
  asm volatile("multimem.red.relaxed.sys.global.add.v4.bf16x2 [%0], {%1, %2, %3, %4};"
               : : "l"(detail::addr(mc)), "r"(detail::bits(v.h[0])), "r"(detail::bits(v.h[1])),
                   "r"(detail::bits(v.h[2])), "r"(detail::bits(v.h[3])) : "memory");
}

// ---- signalling through the multicast address of a flag array ----
PK_DEV void signal_all(unsigned int* mc_flag, unsigned int v = 1) {
  asm volatile("multimem.red.release.sys.global.add.u32 [%0], %1;"
               : : "l"(detail::addr(mc_flag)), "r"(v) : "memory");
}

#else  // !PK_ENABLE_MULTIMEM

namespace detail {
template <typename T>
struct disabled : std::false_type {};
}  // namespace detail

#define PK_MULTIMEM_DISABLED_MSG                                                              \
  "pk::multimem needs NVLink multicast: build with -DPK_ENABLE_MULTIMEM=1 (never run it on " \
  "machines where multicast is off)"

template <typename T>
PK_DEV T ld_reduce_add(const T*) {
  static_assert(detail::disabled<T>::value, PK_MULTIMEM_DISABLED_MSG);
  return T{};
}
template <typename T, typename V>
PK_DEV void st(T*, const V&) {
  static_assert(detail::disabled<T>::value, PK_MULTIMEM_DISABLED_MSG);
}
template <typename T, typename V>
PK_DEV void red_add(T*, const V&) {
  static_assert(detail::disabled<T>::value, PK_MULTIMEM_DISABLED_MSG);
}
template <typename T>
PK_DEV void signal_all(T*, unsigned int = 1) {
  static_assert(detail::disabled<T>::value, PK_MULTIMEM_DISABLED_MSG);
}

#undef PK_MULTIMEM_DISABLED_MSG

#endif  // PK_ENABLE_MULTIMEM

}  // namespace multimem
}  // namespace pk
