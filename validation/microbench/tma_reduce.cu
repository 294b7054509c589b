// tma_reduce.cu -- reducing bulk store throughput:
//   cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32
//   cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16
//
// What: every block fills one msg-byte shared buffer with its random values
// (ordinary stores, then fence.proxy.async.shared::cta + __syncthreads so the
// bulk engine sees them); one thread then issues nmsg reducing bulk stores of
// that buffer into global memory: message k of block b adds into bytes
// [(k * blocks + b) * msg, +msg) of the op's region (every element gets
// exactly one add per op).  Groups are committed per message; at most 8 stay
// unread (cp.async.bulk.wait_group.read 8), wait_group 0 at the end.
// Series:
//   l2 "cold": region up to 256 MiB, op i uses region i mod slots of a 1 GiB
//              pool (read-modify-write from HBM); f32 over blocks 1..132 x
//              msg 256 B..64 KiB, bf16 over msg with all SMs;
//   l2 "hot":  region <= 16 MiB reused by every op (reduction in L2), f32 and
//              bf16 over msg with all SMs.
// Keys: "bytes" = payload (bytes reduced into global per op), "traffic_bytes"
// = 2 x payload (global read + write), "gbps" = payload GB/s (1e9 B/s),
// "elements_per_s".
// Check (before timing): region initialised with random values, one op,
// every element compared with the host formula init + src (values are small
// multiples of 2^-10 (f32) / 2^-4 (bf16), so each sum is exact).
// Usage: tma_reduce [--quick]
#include "common.cuh"

__host__ __device__ inline float src_val(bool bf16, uint32_t seed, uint32_t block, uint32_t j) {
  uint32_t h = hash_u32(seed, ((uint64_t)block << 32) | j);
  return bf16 ? ((int)(h % 127u) - 63) / 16.0f : ((int)(h % 2047u) - 1023) / 1024.0f;
}
__host__ __device__ inline float init_val(bool bf16, uint32_t seed, uint64_t i) {
  uint32_t h = hash_u32(seed ^ 0xABCDu, i);
  return bf16 ? ((int)(h % 127u) - 63) / 16.0f : ((int)(h % 2047u) - 1023) / 1024.0f;
}
__host__ __device__ inline float expected_val(bool bf16, uint32_t seed, uint64_t i, uint32_t elems_per_msg,
                                              uint32_t blocks) {
  const uint64_t m = i / elems_per_msg;
  return init_val(bf16, seed, i) + src_val(bf16, seed, (uint32_t)(m % blocks), (uint32_t)(i % elems_per_msg));
}
// bf16 values here have <= 8 significant bits, so truncation is exact.
__host__ __device__ inline uint16_t to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
__host__ __device__ inline float from_bf16_bits(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

__global__ void init_kernel(void* dst, size_t elems, bool bf16, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < elems; i += (size_t)gridDim.x * blockDim.x) {
    const float v = init_val(bf16, seed, i);
    if (bf16) ((uint16_t*)dst)[i] = to_bf16_bits(v);
    else ((float*)dst)[i] = v;
  }
}
__global__ void verify_kernel(const void* dst, size_t elems, bool bf16, uint32_t seed, uint32_t epm,
                              uint32_t blocks, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < elems; i += (size_t)gridDim.x * blockDim.x) {
    const float got = bf16 ? from_bf16_bits(((const uint16_t*)dst)[i]) : ((const float*)dst)[i];
    local += (got != expected_val(bf16, seed, i, epm, blocks));
  }
  if (local) atomicAdd(bad, local);
}

__global__ void tma_reduce_kernel(char* __restrict__ dst, uint32_t msg, uint32_t nmsg, bool bf16, uint32_t seed) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t elems = msg / (bf16 ? 2 : 4);
  for (uint32_t j = threadIdx.x; j < elems; j += blockDim.x) {
    const float v = src_val(bf16, seed, blockIdx.x, j);
    if (bf16) ((uint16_t*)smem)[j] = to_bf16_bits(v);
    else ((float*)smem)[j] = v;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> async proxy
  __syncthreads();
  if (threadIdx.x != 0) return;
  const uint32_t buf = (uint32_t)__cvta_generic_to_shared(smem);
  for (uint32_t k = 0; k < nmsg; ++k) {
    const size_t g = __cvta_generic_to_global(dst + ((size_t)k * gridDim.x + blockIdx.x) * msg);
    if (bf16)
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;"
                   ::"l"(g), "r"(buf), "r"(msg) : "memory");
    else
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                   ::"l"(g), "r"(buf), "r"(msg) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 8;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("tma_reduce");
  const int sms = sm_count();
  const uint32_t seed = 0x4ed5;
  const size_t pool = quick ? 256 * MiB : 1 * GiB;
  char* dst = nullptr;
  unsigned long long* d_bad = nullptr;
  CHECK(cudaMalloc(&dst, pool));
  CHECK(cudaMalloc(&d_bad, sizeof(unsigned long long)));
  CHECK(cudaFuncSetAttribute(tma_reduce_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.015 : 0.04;

  struct Point { bool bf16, hot; uint32_t msg; int blocks; };
  std::vector<Point> pts;
  std::vector<int> blist = quick ? std::vector<int>{1, 8, 132} : std::vector<int>{1, 2, 4, 8, 16, 32, 66, 132};
  for (int& b : blist) b = std::min(b, sms);
  blist.erase(std::unique(blist.begin(), blist.end()), blist.end());
  const uint32_t mstep = quick ? 4 : 2;
  for (int b : blist)
    for (uint32_t m = 256; m <= 64 * 1024; m *= mstep) pts.push_back({false, false, m, b});
  for (uint32_t m = 256; m <= 64 * 1024; m *= mstep) pts.push_back({true, false, m, sms});
  for (int bf : {0, 1})
    for (uint32_t m = 256; m <= 64 * 1024; m *= mstep) pts.push_back({bf != 0, true, m, sms});

  int failures = 0;
  for (const Point& p : pts) {
    const size_t cap = p.hot ? 16 * MiB : std::min<size_t>(256 * MiB, pool);
    const uint32_t nmsg = (uint32_t)std::max<size_t>(1, std::min<size_t>(1024, cap / ((size_t)p.blocks * p.msg)));
    const size_t bytes = (size_t)p.blocks * p.msg * nmsg;
    const size_t slots = p.hot ? 1 : std::max<size_t>(1, pool / bytes);
    const size_t esize = p.bf16 ? 2 : 4, elems = bytes / esize;
    auto op = [&](long long i) {
      tma_reduce_kernel<<<p.blocks, 256, p.msg, st>>>(dst + (size_t)(i % (long long)slots) * bytes, p.msg, nmsg,
                                                      p.bf16, seed);
      CHECK_LAUNCH();
    };
    // ---- check: init slot 0, one op, compare every element (device) + spot (host)
    init_kernel<<<4 * sms, 512, 0, st>>>(dst, elems, p.bf16, seed);
    CHECK_LAUNCH();
    op(0);
    CHECK(cudaMemsetAsync(d_bad, 0, sizeof(unsigned long long), st));
    verify_kernel<<<4 * sms, 512, 0, st>>>(dst, elems, p.bf16, seed, p.msg / esize, p.blocks, d_bad);
    CHECK_LAUNCH();
    unsigned long long bad = 0, hbad = 0;
    CHECK(cudaMemcpyAsync(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    const size_t n_spot = std::min<size_t>(elems, 8192), spot_at = elems - n_spot;  // the last elements
    std::vector<char> h(n_spot * esize);
    CHECK(cudaMemcpy(h.data(), dst + spot_at * esize, h.size(), cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < n_spot; ++k) {
      const float got = p.bf16 ? from_bf16_bits(((uint16_t*)h.data())[k]) : ((float*)h.data())[k];
      hbad += got != expected_val(p.bf16, seed, spot_at + k, p.msg / esize, p.blocks);
    }
    std::string check = "ok";
    if (bad || hbad) {
      char buf[160];
      snprintf(buf, sizeof buf, "FAIL: %llu/%zu elements wrong (device), %llu/%zu in host spot check", bad, elems,
               hbad, n_spot);
      check = buf;
      ++failures;
    }
    JsonObj params;
    params.str("dtype", p.bf16 ? "bf16" : "f32").str("op", "add").str("l2", p.hot ? "hot" : "cold")
        .integer("msg_bytes", p.msg).integer("blocks", p.blocks).integer("msgs_per_block", nmsg)
        .integer("rotation_slots", (long long)slots);
    JsonObj o;
    o.str("bench", "tma_reduce").obj("params", params).integer("bytes", (long long)bytes)
        .integer("traffic_bytes", (long long)(2 * bytes));
    if (check == "ok") {
      Timing t = time_op(st, op, cfg);
      add_timing(o, t);
      o.num("gbps", bytes / t.med / 1e9).num("traffic_gbps", 2.0 * bytes / t.med / 1e9)
          .num("elements_per_s", elems / t.med).num("gbps_per_block", bytes / t.med / 1e9 / p.blocks);
    }
    o.str("check", check);
    emit(o);
  }
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(dst));
  CHECK(cudaFree(d_bad));
  return failures ? 2 : 0;
}
