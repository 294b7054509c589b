// flag_latency.cu -- one-way latency of a flag hand-off through global memory.
//
// Ping-pong between an initiator A and a responder B, one thread each:
//   A: payload_a = x_i; st.release.<scope> ping = i; spin ld.acquire pong == i;
//      check payload_b == f(x_i)
//   B: spin ld.acquire ping == i; payload_b = f(payload_a); st.release pong = i
// for i = 1 .. warm + n; ping, pong and the payloads each sit on their own
// 128-byte line.  One-way latency = time / (2 n).
// Placements:
//   one_launch   A and B are blocks 0 and 1 of one 2-block launch (co-resident:
//                2 blocks << SMs; the SM ids of both are reported);
//   two_streams  A and B are two 1-block kernels on two non-blocking streams
//                (needs CUDA_MODULE_LOADING=EAGER -- set with setenv before
//                any CUDA call -- or the second kernel's lazy module load can
//                wait for the first one to finish).
// Scopes: gpu (st.release.gpu / ld.acquire.gpu) and sys (.sys).
// Time: "time_s" = one-way latency from %globaltimer read by A around the n
// timed round trips (after `warm` untimed ones that also absorb the second
// kernel's launch); "event_time_s" = CUDA-event time of the whole launch /
// (2 (warm + n)).  Median / p10 / p90 over repeated runs.
// Every spin has a clock64 deadline (~1-2 s); on expiry the kernel records a
// timeout and returns, and the point reports check "FAIL: timeout".
// Check: no timeout, both counters reached warm + n, and every payload echo
// was right (release/acquire ordering works).
// Usage: flag_latency [--quick]
#include "common.cuh"

enum { PING = 0, PONG = 32, PAY_A = 64, PAY_B = 96, STATUS = 128, BAD = 160, SM_A = 192, SM_B = 224, T_NS = 256 };
static constexpr size_t kFlagWords = 512;

template <bool SYS>
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  if (SYS) asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
template <bool SYS>
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  if (SYS) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__host__ __device__ inline unsigned echo(unsigned x) { return x * 2654435761u + 1u; }

template <bool SYS>
__device__ bool wait_for(unsigned* f, int idx, unsigned want, long long timeout) {
  const long long deadline = clock64() + timeout;
  while (ld_acquire<SYS>(f + idx) != want) {
    if (clock64() > deadline) {
      atomicExch(f + STATUS, 1u);
      return false;
    }
  }
  return true;
}

template <bool SYS>
__device__ void initiator(unsigned* f, int warm, int n, long long timeout, uint32_t seed) {
  volatile unsigned* pa = f + PAY_A;
  volatile unsigned* pb = f + PAY_B;
  f[SM_A] = smid();
  unsigned bad = 0;
  unsigned long long t0 = globaltimer_ns();
  for (int i = 1; i <= warm + n; ++i) {
    if (i == warm + 1) t0 = globaltimer_ns();
    const unsigned x = hash_u32(seed, i);
    *pa = x;
    st_release<SYS>(f + PING, (unsigned)i);
    if (!wait_for<SYS>(f, PONG, (unsigned)i, timeout)) return;
    bad += (*pb != echo(x));
  }
  const unsigned long long t1 = globaltimer_ns();
  f[BAD] = bad;
  *(unsigned long long*)(f + T_NS) = t1 - t0;
}

template <bool SYS>
__device__ void responder(unsigned* f, int warm, int n, long long timeout) {
  volatile unsigned* pa = f + PAY_A;
  volatile unsigned* pb = f + PAY_B;
  f[SM_B] = smid();
  for (int i = 1; i <= warm + n; ++i) {
    if (!wait_for<SYS>(f, PING, (unsigned)i, timeout)) return;
    *pb = echo(*pa);
    st_release<SYS>(f + PONG, (unsigned)i);
  }
}

template <bool SYS>
__global__ void one_launch_kernel(unsigned* f, int warm, int n, long long timeout, uint32_t seed) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) initiator<SYS>(f, warm, n, timeout, seed);
  else if (blockIdx.x == 1) responder<SYS>(f, warm, n, timeout);
}
template <bool SYS>
__global__ void initiator_kernel(unsigned* f, int warm, int n, long long timeout, uint32_t seed) {
  if (threadIdx.x == 0 && blockIdx.x == 0) initiator<SYS>(f, warm, n, timeout, seed);
}
template <bool SYS>
__global__ void responder_kernel(unsigned* f, int warm, int n, long long timeout) {
  if (threadIdx.x == 0 && blockIdx.x == 0) responder<SYS>(f, warm, n, timeout);
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // before any CUDA call
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("flag_latency");
  const int warm = 100, n = quick ? 1000 : 5000, runs = quick ? 3 : 9;
  const long long timeout = 2000000000ll;  // cycles per spin, ~1 s at 2 GHz
  unsigned* f = nullptr;
  CHECK(cudaMalloc(&f, kFlagWords * sizeof(unsigned)));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  int failures = 0;

  for (int two_streams = 0; two_streams < 2; ++two_streams) {
    for (int sys = 0; sys < 2; ++sys) {
      std::vector<double> gt, ev;
      std::string check = "ok";
      std::vector<unsigned> h(kFlagWords);
      for (int r = 0; r < runs && check == "ok"; ++r) {
        const uint32_t seed = 1000 + r;
        CHECK(cudaMemset(f, 0, kFlagWords * sizeof(unsigned)));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaEventRecord(e0, s1));
        if (!two_streams) {
          if (sys) one_launch_kernel<true><<<2, 32, 0, s1>>>(f, warm, n, timeout, seed);
          else one_launch_kernel<false><<<2, 32, 0, s1>>>(f, warm, n, timeout, seed);
        } else {
          if (sys) {
            initiator_kernel<true><<<1, 32, 0, s1>>>(f, warm, n, timeout, seed);
            responder_kernel<true><<<1, 32, 0, s2>>>(f, warm, n, timeout);
          } else {
            initiator_kernel<false><<<1, 32, 0, s1>>>(f, warm, n, timeout, seed);
            responder_kernel<false><<<1, 32, 0, s2>>>(f, warm, n, timeout);
          }
        }
        CHECK_LAUNCH();
        CHECK(cudaEventRecord(e1, s1));
        CHECK(cudaDeviceSynchronize());
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        CHECK(cudaMemcpy(h.data(), f, kFlagWords * sizeof(unsigned), cudaMemcpyDeviceToHost));
        const unsigned total = (unsigned)(warm + n);
        if (h[STATUS]) check = "FAIL: timeout (partner never answered)";
        else if (h[PING] != total || h[PONG] != total) check = "FAIL: incomplete ping-pong";
        else if (h[BAD]) check = "FAIL: " + std::to_string(h[BAD]) + " payload echoes wrong";
        if (check != "ok") break;
        unsigned long long t_ns = 0;
        memcpy(&t_ns, &h[T_NS], sizeof t_ns);
        gt.push_back(t_ns * 1e-9 / (2.0 * n));
        ev.push_back(ms * 1e-3 / (2.0 * (warm + n)));
      }
      JsonObj params;
      params.str("placement", two_streams ? "two_streams" : "one_launch").str("scope", sys ? "sys" : "gpu")
          .integer("round_trips", n).integer("warmup_round_trips", warm)
          .integer("sm_a", h[SM_A]).integer("sm_b", h[SM_B]);
      JsonObj o;
      o.str("bench", "flag_latency").obj("params", params);
      if (check == "ok") {
        o.num("time_s", quantile(gt, 0.5)).num("time_p10_s", quantile(gt, 0.1)).num("time_p90_s", quantile(gt, 0.9))
            .num("round_trip_s", 2 * quantile(gt, 0.5)).num("event_time_s", quantile(ev, 0.5))
            .integer("samples", (long long)gt.size());
      } else {
        ++failures;
      }
      o.str("check", check);
      emit(o);
    }
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(f));
  return failures ? 2 : 0;
}
