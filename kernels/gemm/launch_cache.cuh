// gemm/launch_cache.cuh: the kernel parameters of a thread's recent GEMM calls, by their
// arguments, so that a repeated call launches at once.
//
// Provides (namespace pk::gemm)
//   * launch_key: every argument the parameters depend on (the three pointers, M, N, K, the
//     grid arguments sms / first_block / group_m, the flags and the current device);
//   * launch_cache<Value, Slots>: pk/recent_cache.cuh over these keys with one set of Slots
//     ways: find(key) -> the stored value or nullptr; put(key, value) stores it, the oldest
//     entry going; drop(key) forgets it.
//
// Why: without it every call of gemm_bf16 encodes three tensor maps (cuTensorMapEncodeTiled),
// asks for the device's SM count, sets the kernel's shared-memory limit and, for a clustered
// variant, asks cudaOccupancyMaxActiveClusters how many clusters fit: host work repeated with
// the same result for the same arguments. A tensor map holds only the address, the
// dimensions, the strides and the box, so a stored one is exactly what encoding again would
// give; the cache is correct for any reuse of a pointer. It is plain host code (no CUDA call),
// one per thread and per tile variant (gemm_host.cuh keeps it thread_local), and
// tests/kernels/test_gemm_launch_cache.py compiles and checks it on the host alone.
#pragma once

#include "../include/pk/recent_cache.cuh"

namespace pk {
namespace gemm {

struct launch_key {
  const void* A;
  const void* B;
  const void* C;
  int M, N, K;
  int sms, first_block, group_m;
  int flags;
  int device;
};

inline bool same_key(const launch_key& x, const launch_key& y) {
  return x.A == y.A && x.B == y.B && x.C == y.C && x.M == y.M && x.N == y.N && x.K == y.K &&
         x.sms == y.sms && x.first_block == y.first_block && x.group_m == y.group_m &&
         x.flags == y.flags && x.device == y.device;
}

template <class Value, int Slots = 8>
using launch_cache = pk::recent_cache<launch_key, Value, 1, Slots>;

}  // namespace gemm
}  // namespace pk
