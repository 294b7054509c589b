// common.cuh -- shared helpers for the pksim microbenchmarks (header only).
//
//  * CHECK(call): every CUDA runtime call goes through it; on error it prints
//    file:line, the call and the CUDA error string to stderr and exits 1.
//  * Random data: hash_u32(seed, i) is a counter-based hash computable on host
//    and device, so a kernel fills GiB-sized buffers quickly and the host can
//    recompute any expected value (no host-side copy of the whole buffer).
//  * Verification: count_mismatch() compares a device word range with the hash
//    on the device (full coverage), spot_check() copies a few chunks back and
//    compares them with host-computed values.
//  * Timing: time_op() runs warm-up ops, times 3 single ops with CUDA events
//    (single_op_time_s), then batches `reps` ops per event pair so each sample
//    lasts ~target_sample_s, takes as many samples as fit in budget_s (5..50)
//    and reports median / p10 / p90 of the per-op time.
//  * Output: one JSON object per line on stdout (JsonLine), flushed at once,
//    so a killed run keeps every finished point.  "gbps" is 1e9 BYTES per
//    second, "time_s" is seconds per op (median), "bytes" is payload bytes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__,   \
              cudaGetErrorName(err_), cudaGetErrorString(err_), #call);          \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

#define CHECK_LAUNCH() CHECK(cudaGetLastError())

static constexpr size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// ---------------------------------------------------------------- random data
__host__ __device__ inline uint32_t hash_u32(uint32_t seed, uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + ((uint64_t)seed << 32 | seed) + 0x632BE59BD9B4E019ull;
  x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

__global__ void fill_hash_kernel(uint32_t* p, size_t n, uint32_t seed, uint64_t first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = hash_u32(seed, first + i);
}

// Counts words p[i] != hash(seed, first + i) for i < n.
__global__ void mismatch_kernel(const uint32_t* p, size_t n, uint32_t seed, uint64_t first,
                                unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    local += (p[i] != hash_u32(seed, first + i));
  if (local) atomicAdd(bad, local);
}

inline int sm_count() {
  int dev = 0, n = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

inline void fill_hash(uint32_t* p, size_t n_words, uint32_t seed, uint64_t first = 0) {
  fill_hash_kernel<<<sm_count() * 4, 512>>>(p, n_words, seed, first);
  CHECK_LAUNCH();
}

// Full device-side comparison of p[0..n_words) with hash(seed, first + i).
inline unsigned long long count_mismatch(const uint32_t* p, size_t n_words, uint32_t seed, uint64_t first) {
  unsigned long long* d_bad = nullptr;
  unsigned long long bad = 0;
  CHECK(cudaMalloc(&d_bad, sizeof(bad)));
  CHECK(cudaMemset(d_bad, 0, sizeof(bad)));
  mismatch_kernel<<<sm_count() * 4, 512>>>(p, n_words, seed, first, d_bad);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d_bad));
  return bad;
}

// Host-side check of a few chunks (start, end, 8 pseudo-random places) of
// p[0..n_words) against host-computed hash(seed, first + i).
inline unsigned long long spot_check(const uint32_t* p, size_t n_words, uint32_t seed, uint64_t first) {
  const size_t chunk = std::min<size_t>(n_words, 4096);
  std::vector<uint32_t> h(chunk);
  unsigned long long bad = 0;
  for (int c = 0; c < 10; ++c) {
    size_t start = c == 0 ? 0 : c == 1 ? n_words - chunk : (hash_u32(777, c) % (n_words - chunk + 1));
    CHECK(cudaMemcpy(h.data(), p + start, chunk * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < chunk; ++i) bad += (h[i] != hash_u32(seed, first + start + i));
  }
  return bad;
}

// Both checks; returns "ok" or a short failure description.
inline std::string verify_words(const uint32_t* p, size_t n_words, uint32_t seed, uint64_t first) {
  unsigned long long d = count_mismatch(p, n_words, seed, first);
  unsigned long long h = spot_check(p, n_words, seed, first);
  if (d == 0 && h == 0) return "ok";
  char buf[160];
  snprintf(buf, sizeof buf, "FAIL: %llu/%zu words wrong (device), %llu wrong in host spot check", d, n_words, h);
  return buf;
}

// ---------------------------------------------------------------- timing
struct TimeCfg {
  double target_sample_s = 200e-6;  // batch ops until one event pair spans this
  double budget_s = 0.08;           // GPU time per point (after pilot)
  int warmup = 2, min_samples = 5, max_samples = 50, max_reps = 1000;
};

struct Timing {
  double med = NAN, p10 = NAN, p90 = NAN, single = NAN;
  int samples = 0, reps = 0;
};

inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = (size_t)pos, hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

// The cold-L2 write before a launch timed alone, as a kernel (torch's zero_ is one) rather
// than cudaMemsetAsync.
__global__ void flush_kernel(uint4* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4(v, v, v, v);
}

// The cold-L2 read before a launch timed alone: every line of `p` read, the L2 left full of
// clean lines (a write leaves it full of dirty ones, which a following kernel's misses must
// write back). The sum goes to `sink` only if it is the impossible value `never`.
__global__ void read_flush_kernel(const uint4* p, size_t n, unsigned never, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *sink = acc;
}

// Seconds between the events `a` and `b` recorded on `st` around fn() (waits for `b`).
template <class F>
double event_seconds(cudaStream_t st, cudaEvent_t a, cudaEvent_t b, F fn) {
  CHECK(cudaEventRecord(a, st));
  fn();
  CHECK(cudaEventRecord(b, st));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1e-3;
}

// Seconds of `reps` calls of go(), each alone behind a pass over `flush_bytes` at `flush`
// that flushes the L2, CUDA events around the call alone: as `pksim validate` times a
// collective. The pass: cudaMemsetAsync (memset), flush_kernel (kernel: a write, as torch's
// zero_) or read_flush_kernel (read: the inputs as cold, the L2 left clean).
enum class flush_kind { memset, kernel, read };

// Seconds of `reps` calls of go(), each alone after pass(r) (the r-th call's flush,
// enqueued on `st`), CUDA events around the call alone.
template <class Pass, class Go>
std::vector<double> times_after(cudaStream_t st, Pass pass, Go go, int reps) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    pass(r);
    v.push_back(event_seconds(st, e0, e1, go));
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return v;
}

template <class Go>
std::vector<double> times_behind(cudaStream_t st, Go go, void* flush, size_t flush_bytes, int reps,
                                 flush_kind kind) {
  return times_after(st, [&](int r) {
    if (kind == flush_kind::kernel)
      flush_kernel<<<sm_count() * 4, 512, 0, st>>>(static_cast<uint4*>(flush), flush_bytes / 16, r);
    else if (kind == flush_kind::read)  // the sink is the buffer's first word: never written
      read_flush_kernel<<<sm_count() * 4, 512, 0, st>>>(static_cast<const uint4*>(flush), flush_bytes / 16,
                                                        0xdeadbeefu, static_cast<unsigned*>(flush));
    else
      CHECK(cudaMemsetAsync(flush, r & 0xFF, flush_bytes, st));
  }, go, reps);
}

// times_behind with a write: cudaMemsetAsync, or flush_kernel with `kernel_flush`.
template <class Go>
std::vector<double> times_behind_write(cudaStream_t st, Go go, void* flush, size_t flush_bytes,
                                       int reps, bool kernel_flush = false) {
  return times_behind(st, go, flush, flush_bytes, reps, kernel_flush ? flush_kind::kernel : flush_kind::memset);
}


// op(i) enqueues op number i on stream st (i grows across the whole call, so
// rotating-buffer ops keep rotating).  Returns per-op statistics in seconds.
template <class Op>
Timing time_op(cudaStream_t st, Op op, const TimeCfg& cfg = TimeCfg()) {
  long long idx = 0;
  for (int w = 0; w < cfg.warmup; ++w) op(idx++);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> singles;
  for (int p = 0; p < 3; ++p) singles.push_back(event_seconds(st, a, b, [&] { op(idx++); }));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  Timing t;
  t.single = quantile(singles, 0.5);
  double t1 = std::max(t.single, 1e-7);
  t.reps = (int)std::min<double>(cfg.max_reps, std::max(1.0, std::ceil(cfg.target_sample_s / t1)));
  t.samples = (int)std::min<double>(cfg.max_samples, std::max<double>(cfg.min_samples, cfg.budget_s / (t.reps * t1)));
  std::vector<cudaEvent_t> ev(2 * t.samples);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  for (int s = 0; s < t.samples; ++s) {
    CHECK(cudaEventRecord(ev[2 * s], st));
    for (int r = 0; r < t.reps; ++r) op(idx++);
    CHECK(cudaEventRecord(ev[2 * s + 1], st));
  }
  CHECK(cudaStreamSynchronize(st));
  std::vector<double> per_op;
  for (int s = 0; s < t.samples; ++s) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, ev[2 * s], ev[2 * s + 1]));
    per_op.push_back(ms * 1e-3 / t.reps);
  }
  for (auto& e : ev) CHECK(cudaEventDestroy(e));
  t.med = quantile(per_op, 0.5);
  t.p10 = quantile(per_op, 0.1);
  t.p90 = quantile(per_op, 0.9);
  return t;
}

// ---------------------------------------------------------------- JSON lines
struct JsonObj {
  std::string s = "{";
  JsonObj& key(const char* k) {
    if (s.size() > 1) s += ", ";
    s += "\"";
    s += k;
    s += "\": ";
    return *this;
  }
  JsonObj& str(const char* k, const std::string& v) {
    key(k);
    s += "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') s += '\\';
      if ((unsigned char)c >= 0x20) s += c;
    }
    s += "\"";
    return *this;
  }
  JsonObj& num(const char* k, double v) {
    key(k);
    if (std::isfinite(v)) {
      char buf[32];
      snprintf(buf, sizeof buf, "%.6g", v);
      s += buf;
    } else {
      s += "null";
    }
    return *this;
  }
  JsonObj& integer(const char* k, long long v) { key(k); s += std::to_string(v); return *this; }
  JsonObj& obj(const char* k, const JsonObj& o) { key(k); s += o.done(); return *this; }
  std::string done() const { return s + "}"; }
};

inline void emit(const JsonObj& o) {
  printf("%s\n", o.done().c_str());
  fflush(stdout);
}

// Adds the timing fields of the common record format.
inline JsonObj& add_timing(JsonObj& o, const Timing& t) {
  return o.num("time_s", t.med).num("time_p10_s", t.p10).num("time_p90_s", t.p90)
      .num("single_op_time_s", t.single).integer("samples", t.samples).integer("reps_per_sample", t.reps);
}

// The timing fields of a record from raw per-op samples (each of `reps` ops): median, p10,
// p90, the number of samples.
inline JsonObj& add_samples(JsonObj& o, const std::vector<double>& v, int reps = 1) {
  return o.num("time_s", quantile(v, 0.5)).num("time_p10_s", quantile(v, 0.1))
      .num("time_p90_s", quantile(v, 0.9)).integer("samples", (long long)v.size())
      .integer("reps_per_sample", reps);
}

// First line of every program: {"bench": ..., "record": "device", "device": {...}}.
inline void emit_device_record(const char* bench) {
  int dev = 0, drv = 0, rt = 0, clk = 0, memclk = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, dev));
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
  CHECK(cudaDeviceGetAttribute(&memclk, cudaDevAttrMemoryClockRate, dev));
  JsonObj d;
  d.str("name", p.name).integer("sm_count", p.multiProcessorCount).integer("l2_bytes", p.l2CacheSize)
      .integer("global_mem_bytes", (long long)p.totalGlobalMem)
      .integer("smem_per_block_optin_bytes", (long long)p.sharedMemPerBlockOptin)
      .integer("sm_clock_khz", clk).integer("mem_clock_khz", memclk).integer("mem_bus_bits", p.memoryBusWidth)
      .str("cc", std::to_string(p.major) + "." + std::to_string(p.minor))
      .integer("driver", drv).integer("cuda_runtime", rt);
  JsonObj o;
  o.str("bench", bench).str("record", "device").obj("device", d);
  emit(o);
}

inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], flag)) return true;
  return false;
}

// ---------------------------------------------------------------- copy benchmarks
// hbm_copy's and sm_copy's buffers: a source and a destination of `bytes` each, `want` halved
// until both fit with 512 MiB to spare (down to 512 MiB), the source filled with hash(seed, i).
struct CopyPair {
  uint32_t* src = nullptr;
  uint32_t* dst = nullptr;
  size_t bytes = 0;
  uint32_t seed = 0;

  // The check before a point is timed: dst poisoned with 0xFF, op() enqueued on st (a copy of
  // the first s bytes of src into dst), then all s bytes of dst compared with the source's.
  template <class Op>
  std::string check(size_t s, cudaStream_t st, Op op) const {
    CHECK(cudaMemsetAsync(dst, 0xFF, s, st));
    op();
    CHECK(cudaStreamSynchronize(st));
    return verify_words(dst, s / 4, seed, 0);
  }
};

inline CopyPair alloc_copy_pair(size_t want, uint32_t seed) {
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  while (want > 512 * MiB && 2 * want + 512 * MiB > free_b) want /= 2;
  CopyPair p;
  p.bytes = want;
  p.seed = seed;
  CHECK(cudaMalloc(&p.src, want));
  CHECK(cudaMalloc(&p.dst, want));
  fill_hash(p.src, want / 4, seed);
  CHECK(cudaDeviceSynchronize());
  return p;
}

// A copy benchmark's record of one point of s bytes (read once, written once).
inline JsonObj copy_record(const char* bench, const JsonObj& params, size_t s) {
  JsonObj o;
  o.str("bench", bench).obj("params", params).integer("bytes", (long long)s)
      .integer("traffic_bytes", (long long)(2 * s));
  return o;
}

// A point whose check failed: emitted with the check's message and counted (true); false
// where the check passed and the point is to be timed.
inline bool emit_failed(JsonObj& o, const std::string& check, int& failures) {
  if (check == "ok") return false;
  ++failures;
  o.str("check", check);
  emit(o);
  return true;
}

// ---------------------------------------------------------------- SM copy
// Grid-stride int4 copy, 4 independent 16-byte loads in flight per thread
// before the stores (memory-level parallelism).  n = number of int4.
// __launch_bounds__(1024, 2): two 1024-thread blocks fit on one SM.
__global__ void __launch_bounds__(1024, 2)
copy_int4_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}
