// pk/recent_cache.cuh: a small set-associative store of a thread's recent host-side results by
// the arguments they were made from, the oldest way of a set going first. Both host caches of
// the kernels are this one: the tensor maps of pk/tensor_map_cache.cuh (64 sets, hashed) and
// the GEMM's launch parameters of gemm/launch_cache.cuh (one set).
//
// Provides (namespace pk)
//   * recent_cache<Key, Value, Sets, Ways>: find(key) -> the stored value or nullptr;
//     put(key, value) stores it in the key's set, replacing an equal key's value or else the
//     set's oldest way; drop(key) forgets it; clear(); set_of(key).
//   Key needs same_key(a, b) and, with more than one set, key_hash(k), found by argument-
//   dependent lookup beside the key's type.
// Plain C++ (no CUDA call), so that tests/kernels compile and check its users on the host.
#pragma once

#include <cstdint>

namespace pk {

template <class Key, class Value, int Sets, int Ways>
struct recent_cache {
  static_assert(Sets >= 1 && Ways >= 1, "a cache needs at least one entry");
  Key keys[Sets][Ways] = {};
  Value values[Sets][Ways] = {};
  bool used[Sets][Ways] = {};
  int next[Sets] = {};

  static int set_of(const Key& k) {
    if constexpr (Sets == 1) {
      return 0;
    } else {
      return static_cast<int>(key_hash(k) % static_cast<uint64_t>(Sets));
    }
  }

  const Value* find(const Key& k) const {
    const int s = set_of(k);
    for (int i = 0; i < Ways; ++i)
      if (used[s][i] && same_key(keys[s][i], k)) return &values[s][i];
    return nullptr;
  }

  void put(const Key& k, const Value& v) {
    const int s = set_of(k);
    for (int i = 0; i < Ways; ++i)
      if (used[s][i] && same_key(keys[s][i], k)) {
        values[s][i] = v;
        return;
      }
    const int i = next[s];
    keys[s][i] = k;
    values[s][i] = v;
    used[s][i] = true;
    next[s] = (i + 1) % Ways;
  }

  void drop(const Key& k) {
    const int s = set_of(k);
    for (int i = 0; i < Ways; ++i)
      if (used[s][i] && same_key(keys[s][i], k)) used[s][i] = false;
  }

  void clear() {
    for (int s = 0; s < Sets; ++s) {
      next[s] = 0;
      for (int i = 0; i < Ways; ++i) used[s][i] = false;
    }
  }
};

}  // namespace pk
