// kernels/tests/test_util.cuh: shared scaffolding for the pk primitive tests.
//
// Every test program runs its cases on VIRTUAL ranks: world sizes 2, 4 and 8 on one GPU, one
// cudaMalloc per rank and buffer, all ranks in one cooperative launch whose grid is
// world * blocks_per_rank blocks (rank = blockIdx.x / blocks_per_rank). Each case prints one
// JSON line
//   {"test": "...", "world": W, "bytes": B, "ok": true|false, "max_err": E}
// (plus "detail" when it fails) and the program exits non-zero if any case failed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <cuda_bf16.h>

#include "pk/pk.cuh"

namespace pkt {

constexpr int kWorlds[] = {2, 4, 8};
constexpr int kMaxRanks = 8;

// Device deadline for healthy waits in the tests (~1 s at 2 GHz) and the host's backstop.
constexpr long long kTimeoutCycles = 2LL << 30;
constexpr double kHostDeadlineSeconds = 60.0;

// splitmix64: small, fast, and identical on every platform.
struct rng {
  uint64_t s;
  explicit rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
  // uniform in [-1, 1)
  float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0); }
};

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o;
}

struct report {
  int cases = 0;
  int failures = 0;

  void emit(const char* test, int world, size_t bytes, bool ok, double max_err,
            const std::string& detail = "") {
    if (!std::isfinite(max_err)) {  // keep the line valid JSON; a NaN is a failure anyway
      max_err = 1e300;
      ok = false;
    }
    ++cases;
    if (!ok) ++failures;
    std::printf("{\"test\": \"%s\", \"world\": %d, \"bytes\": %zu, \"ok\": %s, \"max_err\": %.6g", test,
                world, bytes, ok ? "true" : "false", max_err);
    if (!detail.empty()) std::printf(", \"detail\": \"%s\"", json_escape(detail).c_str());
    std::printf("}\n");
    std::fflush(stdout);
  }

  // A case checked twice: in the kernel (device_bad: what it counted) and by the host after it
  // (bad); ok when neither found anything, else the detail gives both counts.
  void emit_checked(const char* test, int world, size_t bytes, double max_err, size_t bad,
                    unsigned long long device_bad, const char* host_found, const char* device_found) {
    const bool ok = bad == 0 && device_bad == 0;
    emit(test, world, bytes, ok, max_err,
         ok ? "" : std::to_string(bad) + " " + host_found + ", " + std::to_string(device_bad) + " " +
                       device_found);
  }

  // Run one case; exceptions become a failed line. A hang leaves the device unusable, so it
  // ends the program after reporting.
  template <typename F>
  void run(const char* test, int world, size_t bytes, F&& body) {
    try {
      body();
    } catch (const pk::hang_error& e) {
      emit(test, world, bytes, false, -1.0, e.what());
      std::fprintf(stderr, "%s: giving up after a hang\n", test);
      std::_Exit(3);
    } catch (const std::exception& e) {
      emit(test, world, bytes, false, -1.0, e.what());
    }
  }

  int exit_code() const {
    std::fprintf(stderr, "%d/%d cases passed\n", cases - failures, cases);
    return failures == 0 ? 0 : 1;
  }
};

// Runs a cleanup when the scope ends, also when a check throws.
template <typename F>
struct defer {
  F f;
  explicit defer(F fn) : f(fn) {}
  ~defer() { f(); }
  defer(const defer&) = delete;
  defer& operator=(const defer&) = delete;
};

// Call first in main(), before any CUDA call.
inline void init() {
  pk::set_eager_module_loading();
  try {
    PK_CUDA_CHECK(cudaSetDevice(0));
    PK_CUDA_CHECK(cudaFree(nullptr));  // create the context now, with eager loading
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no usable CUDA device: %s\n", e.what());
    std::exit(2);
  }
}

inline void finish_launch(const pk::error_record* err) {
  PK_CUDA_CHECK(cudaGetLastError());
  pk::sync_with_deadline(nullptr, kHostDeadlineSeconds);
  if (err) pk::throw_if_device_error(err);
}

template <typename T>
inline void upload(T* dst, const std::vector<T>& src) {
  PK_CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <typename T>
inline std::vector<T> download(const T* src, size_t count) {
  std::vector<T> out(count);
  PK_CUDA_CHECK(cudaMemcpy(out.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// The two TMA tests' pipeline, one block's share of it. All threads: init_stages (the stages
// in the kernel's dynamic shared memory and their barriers). Thread 0:
// forward_stages moves chunks lb, lb + bpr, ... of the `body` bytes at `from` (body: a multiple
// of 16) through kStages shared-memory stages of kStage bytes with bulk loads and mbarrier
// completion, hands each stage to push(stage, offset, length) (which issues its bulk stores),
// then completes the writes; false if a load was not seen within spin's timeout.
struct stages {
  unsigned char* buf;  // kStages buffers of kStage bytes, 128-byte aligned, in dynamic shared memory
  uint64_t* bar;       // their mbarriers
};

template <unsigned kStages>
__device__ stages init_stages(unsigned char* smem_raw) {
  __shared__ uint64_t bar[kStages];
  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kStages; ++s) pk::tma::mbar_init(&bar[s], 1);
    pk::tma::mbar_init_fence();
  }
  __syncthreads();
  return {pk::tma::align_smem<128>(smem_raw), bar};
}

template <unsigned kStage, unsigned kStages, class Push>
__device__ bool forward_stages(const stages& st, const unsigned char* from,
                               size_t body, unsigned lb, unsigned bpr,
                               const pk::spin_ctx& spin, int rank, Push push) {
  bool ok = true;
  const size_t nchunks = (body + kStage - 1) / kStage;
  unsigned phase = 0;  // bit s: parity of the next phase of bar[s]
  unsigned it = 0;
  for (size_t c = lb; c < nchunks; c += bpr, ++it) {
    const unsigned s = it % kStages;
    unsigned char* buf = st.buf + s * kStage;
    const size_t off = c * kStage;
    const unsigned len = static_cast<unsigned>(body - off < kStage ? body - off : kStage);
    // The stores issued from this stage kStages iterations ago must have read it.
    if (it >= kStages) pk::tma::wait_group_read<kStages - 1>();
    pk::tma::mbar_arrive_expect_tx(&st.bar[s], len);
    pk::tma::load_async(buf, from + off, len, &st.bar[s]);
    if (!pk::tma::mbar_wait(&st.bar[s], (phase >> s) & 1u, spin, rank)) {
      ok = false;
      break;
    }
    phase ^= 1u << s;
    // Async-proxy writes seen through the mbarrier, then async-proxy reads of the same
    // bytes: no generic access in between, but the fence is cheap and keeps this correct
    // if a consumer ever touches the stage.
    pk::tma::fence_shared_to_async();
    push(buf, off, len);
    pk::tma::commit_group();
  }
  pk::tma::complete_writes();  // wait_group 0 + fence.proxy.async.global
  return ok;
}

// Every rank's source filled with random bytes (drawn from `seed`, rank after rank) and every
// rank's destination with the 0xCD guard the checks look for; the sources' host copies.
template <int M>
inline std::vector<std::vector<unsigned char>> random_sources(const pk::pgl<unsigned char, M>& src,
                                                              const pk::pgl<unsigned char, M>& dst,
                                                              uint64_t seed) {
  rng g(seed);
  std::vector<std::vector<unsigned char>> host(src.world);
  for (int r = 0; r < src.world; ++r) {
    host[r].resize(src.count);
    for (auto& b : host[r]) b = static_cast<unsigned char>(g.u32());
    upload(src.ptr[r], host[r]);
    PK_CUDA_CHECK(cudaMemset(dst.ptr[r], 0xCD, dst.count));
  }
  return host;
}

inline float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Tolerance for a sum of `world` terms accumulated in a format with unit roundoff `u`, in no
// fixed order: each of the world - 1 additions may round by u times the running sum, whose
// magnitude is at most sum_abs. One extra term covers the final rounding; `floor` covers 0.
inline double sum_tolerance(int world, double u, double sum_abs, double floor = 1e-6) {
  return static_cast<double>(world) * u * sum_abs + floor;
}

constexpr double kUnitRoundoffF32 = 0x1.0p-24;
constexpr double kUnitRoundoffBF16 = 0x1.0p-8;

}  // namespace pkt
