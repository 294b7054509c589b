// pk/tensor_map_cache.cuh: a thread's recently encoded 2-D tensor maps, by every argument of
// cuTensorMapEncodeTiled, so that a launch that asks for the same map again copies it instead
// of encoding it (issue #38: the fused kernels' host path encoded up to world x (world + 1)
// maps on every launch; the GEMM's own launch cache, gemm/launch_cache.cuh, covers only the
// standalone GEMM).
//
// Provides (namespace pk)
//   * tensor_map_key: the base pointer, the data type, the two dimensions, the row stride in
//     bytes, the box, and the swizzle / L2 promotion / out-of-bounds fill modes (interleave is
//     always none and the element strides always 1 here, so they are not part of it);
//   * same_key(a, b), key_hash(k) (FNV-1a over the fields);
//   * tensor_map_cache<Value, Sets, Ways>: pk/recent_cache.cuh over these keys (find, put,
//     drop, clear; a key's set is its hash % Sets, the set's oldest way going).
//
// Why it is correct for any reuse of a pointer: a tensor map is a pure function of these
// arguments (the driver writes the address, the dimensions, the strides and the box into the
// 128-byte descriptor; it reads no memory and no device state), so a stored map is byte for
// byte what encoding again would give, also after the memory was freed and allocated again.
// A key that differs in any field is another map. Plain C++ (no CUDA call), so that
// tests/kernels/test_tensor_map_cache.py compiles and checks it on a host without a GPU;
// pk/host.cuh keeps one per thread (thread_local) for CUtensorMap values.
#pragma once

#include <cstdint>

#include "recent_cache.cuh"

namespace pk {

struct tensor_map_key {
  const void* base = nullptr;
  int dtype = -1;
  uint64_t dims[2] = {0, 0};     // innermost first (columns, rows), as the driver takes them
  uint64_t stride = 0;           // bytes from one row to the next
  uint32_t box[2] = {0, 0};      // innermost first
  int swizzle = 0, l2 = 0, oob = 0;
};

inline bool same_key(const tensor_map_key& x, const tensor_map_key& y) {
  return x.base == y.base && x.dtype == y.dtype && x.dims[0] == y.dims[0] &&
         x.dims[1] == y.dims[1] && x.stride == y.stride && x.box[0] == y.box[0] &&
         x.box[1] == y.box[1] && x.swizzle == y.swizzle && x.l2 == y.l2 && x.oob == y.oob;
}

inline uint64_t key_hash(const tensor_map_key& k) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
  };
  mix(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(k.base)));
  mix(static_cast<uint64_t>(static_cast<uint32_t>(k.dtype)));
  mix(k.dims[0]);
  mix(k.dims[1]);
  mix(k.stride);
  mix(static_cast<uint64_t>(k.box[0]) << 32 | k.box[1]);
  mix(static_cast<uint64_t>(static_cast<uint32_t>(k.swizzle)) << 32 |
      static_cast<uint32_t>(k.l2));
  mix(static_cast<uint64_t>(static_cast<uint32_t>(k.oob)));
  return h;
}

// Sets x Ways entries. The intra-SM ag-gemm's world-8 launch asks for 8 x 9 + 16 maps, the
// most of any fused op; spread by the hash over 64 sets (1.4 a set), one of 8 ways overflows
// for fewer than 1 in 1000 such key sets, so the default holds every map of several launches
// of different shapes (about 100 KiB per thread with CUtensorMap values).
template <class Value, int Sets = 64, int Ways = 8>
using tensor_map_cache = recent_cache<tensor_map_key, Value, Sets, Ways>;

}  // namespace pk
