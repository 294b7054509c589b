// atomics.cu -- global-memory atomic add throughput.
//
// Grid 2 x SMs blocks of 1024 threads; each thread adds its own random value v
// k times to its target address:
//   op "atomicAdd": acc += atomicAdd(p, v) -- the return value is used (summed
//                   into a per-thread sink), so it stays an ATOM with return;
//   op "red":       inline PTX red.global.add.{s32,f32} (no return value).
// dtype int32 and f32.  Patterns (target address of thread t):
//   distinct  base + t: consecutive threads hit consecutive words (coalesced,
//             all different; ~1 MiB, L2-resident), k = 64;
//   per_warp  base + t / 32: the 32 lanes of a warp share one word, k = 64;
//   same      base: every thread of the grid hits one word, k = 4 (f32 sum
//             stays < 2^24 so it is exact).
// Result: "ops" = threads x k per launch, "gops_per_s" = 1e9 atomic ops / s.
// Check (before timing): targets start at random values; after one launch the
// host compares every target word with init + k x (sum of the values that hit
// it) (f32 values are multiples of 1/16 or small integers, so sums are exact
// in any order) and, for atomicAdd/distinct, every thread's sum of returned
// values with k x init + v x k(k-1)/2.
// Usage: atomics [--quick]
#include <type_traits>
#include "common.cuh"

enum Pattern { DISTINCT = 0, PER_WARP = 1, SAME = 2 };
static const char* kPatternName[3] = {"distinct", "per_warp", "same"};

template <typename T>
__host__ __device__ inline T add_value(uint32_t seed, uint64_t t, int pattern) {
  const uint32_t h = hash_u32(seed, t);
  if constexpr (std::is_floating_point<T>::value)
    return pattern == DISTINCT ? (float)(h % 255u + 1u) / 16.0f : (float)(h % 4u + 1u);
  else
    return (T)(h & 0xFFFFu) + 1;
}
// f32: multiples of 1/16 for "distinct", integers otherwise (exact big sums)
template <typename T>
__host__ inline T init_value(uint32_t seed, uint64_t a, int pattern) {
  const uint32_t h = hash_u32(seed ^ 0x5A5Au, a);
  if constexpr (std::is_floating_point<T>::value) return (float)(h % 256u) / (pattern == DISTINCT ? 16.0f : 1.0f);
  else return (T)h;
}

__device__ __forceinline__ void red_add(int* p, int v) {
  asm volatile("red.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_add(float* p, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

template <typename T, bool RED>
__global__ void __launch_bounds__(1024) atomic_kernel(T* target, T* sink, int pattern, int k, uint32_t seed) {
  const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  const T v = add_value<T>(seed, t, pattern);
  T* p = target + (pattern == DISTINCT ? t : pattern == PER_WARP ? t / 32 : 0);
  T acc = 0;
  for (int i = 0; i < k; ++i) {
    if constexpr (RED) red_add(p, v);
    else acc += atomicAdd(p, v);
  }
  if constexpr (!RED) sink[t] = acc;
}

template <typename T>
static std::string run_check(T* d_target, T* d_sink, bool red, int pattern, int k, int blocks, uint32_t seed,
                             cudaStream_t st) {
  const size_t threads = (size_t)blocks * 1024;
  const size_t words = pattern == DISTINCT ? threads : pattern == PER_WARP ? threads / 32 : 1;
  std::vector<T> init(words), got(words), sink(threads);
  for (size_t a = 0; a < words; ++a) init[a] = init_value<T>(seed, a, pattern);
  // everything on st: the legacy-stream cudaMemcpy/cudaMemset would not be
  // ordered before a kernel on a non-blocking stream
  CHECK(cudaMemcpyAsync(d_target, init.data(), words * sizeof(T), cudaMemcpyHostToDevice, st));
  CHECK(cudaMemsetAsync(d_sink, 0xFF, threads * sizeof(T), st));
  if (red) atomic_kernel<T, true><<<blocks, 1024, 0, st>>>(d_target, d_sink, pattern, k, seed);
  else atomic_kernel<T, false><<<blocks, 1024, 0, st>>>(d_target, d_sink, pattern, k, seed);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(got.data(), d_target, words * sizeof(T), cudaMemcpyDeviceToHost, st));
  CHECK(cudaMemcpyAsync(sink.data(), d_sink, threads * sizeof(T), cudaMemcpyDeviceToHost, st));
  CHECK(cudaStreamSynchronize(st));
  // expected: accumulate in the type itself (int wraps like the device; the
  // float sums are exact by construction)
  std::vector<T> want(init);
  for (size_t t = 0; t < threads; ++t) {
    const size_t a = pattern == DISTINCT ? t : pattern == PER_WARP ? t / 32 : 0;
    const T v = add_value<T>(seed, t, pattern);
    if constexpr (std::is_floating_point<T>::value) want[a] += (T)k * v;
    else want[a] = (T)((uint32_t)want[a] + (uint32_t)k * (uint32_t)v);
  }
  size_t bad = 0, bad_sink = 0;
  for (size_t a = 0; a < words; ++a) bad += !(got[a] == want[a]);
  if (!red && pattern == DISTINCT) {
    for (size_t t = 0; t < threads; ++t) {
      const T v = add_value<T>(seed, t, pattern);
      T s;
      if constexpr (std::is_floating_point<T>::value) s = (T)k * init[t] + v * (T)(k * (k - 1) / 2);
      else s = (T)((uint32_t)k * (uint32_t)init[t] + (uint32_t)v * (uint32_t)(k * (k - 1) / 2));
      bad_sink += !(sink[t] == s);
    }
  }
  if (!bad && !bad_sink) return "ok";
  return "FAIL: " + std::to_string(bad) + "/" + std::to_string(words) + " targets wrong, " +
         std::to_string(bad_sink) + " returned-value sums wrong";
}

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("atomics");
  const int sms = sm_count(), blocks = 2 * sms;
  const size_t threads = (size_t)blocks * 1024;
  void *d_target = nullptr, *d_sink = nullptr;
  CHECK(cudaMalloc(&d_target, threads * 4));
  CHECK(cudaMalloc(&d_sink, threads * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.02 : 0.05;
  int failures = 0;
  for (int is_float = 0; is_float < 2; ++is_float) {
    for (int red = 0; red < 2; ++red) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        // same-address f32: keep the exact sum below 2^24 (values <= 4)
        int k = pattern == SAME ? 4 : 64;
        if (pattern == SAME) k = (int)std::max<size_t>(1, std::min<size_t>(4, ((1u << 24) - 64) / (4 * threads)));
        const uint32_t seed = 0xA70 + pattern + 4 * red + 8 * is_float;
        std::string check =
            is_float ? run_check<float>((float*)d_target, (float*)d_sink, red, pattern, k, blocks, seed, st)
                     : run_check<int>((int*)d_target, (int*)d_sink, red, pattern, k, blocks, seed, st);
        JsonObj params;
        params.str("op", red ? "red" : "atomicAdd").str("dtype", is_float ? "f32" : "int32")
            .str("pattern", kPatternName[pattern]).integer("blocks", blocks).integer("threads", 1024)
            .integer("ops_per_thread", k);
        JsonObj o;
        const double ops = (double)threads * k;
        o.str("bench", "atomics").obj("params", params).num("ops", ops);
        if (check == "ok") {
          Timing t = time_op(st, [&](long long) {
            if (is_float && red) atomic_kernel<float, true><<<blocks, 1024, 0, st>>>((float*)d_target, (float*)d_sink, pattern, k, seed);
            else if (is_float) atomic_kernel<float, false><<<blocks, 1024, 0, st>>>((float*)d_target, (float*)d_sink, pattern, k, seed);
            else if (red) atomic_kernel<int, true><<<blocks, 1024, 0, st>>>((int*)d_target, (int*)d_sink, pattern, k, seed);
            else atomic_kernel<int, false><<<blocks, 1024, 0, st>>>((int*)d_target, (int*)d_sink, pattern, k, seed);
            CHECK_LAUNCH();
          }, cfg);
          add_timing(o, t);
          o.num("gops_per_s", ops / t.med / 1e9);
        } else {
          ++failures;
        }
        o.str("check", check);
        emit(o);
      }
    }
  }
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(d_target));
  CHECK(cudaFree(d_sink));
  return failures ? 2 : 0;
}
