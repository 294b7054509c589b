// tma_copy.cu -- bulk-async (TMA, cp.async.bulk) copy bandwidth by number of
// SMs (blocks) and message size.
//
// What: one issuing thread per block moves messages global -> shared -> global
// with the bulk copy engine of its SM:
//   load : mbarrier.arrive.expect_tx + cp.async.bulk.shared::cluster.global.
//          mbarrier::complete_tx::bytes into stage buffer s (completion on the
//          stage's mbarrier, waited with try_wait.parity + clock64 deadline);
//   store: cp.async.bulk.global.shared::cta.bulk_group + commit_group; before a
//          stage buffer is reloaded, cp.async.bulk.wait_group.read 1 makes sure
//          the store that read it has finished reading shared memory.
// `stages` buffers form a ring (stages = 2: double buffering, the main sweep;
// stages = 4 for the all-SM row with messages <= 32 KiB).  Message k of block
// b covers bytes [(k * blocks + b) * msg, +msg) of the op's region (grid-
// stride).  Messages: 256 B .. 64 KiB (powers of 2, all multiples of 16 and
// 16-byte aligned); blocks: 1,2,4,8,16,32,66,132 (clipped to the SM count).
// Per op: up to 1024 messages per block, at most 1 GiB; cold L2: op i uses
// region i mod slots of 1 GiB src / dst pools (slots = 1 GiB / op bytes).
// Keys: "bytes" = payload, "traffic_bytes" = 2 x payload, "gbps" = payload
// GB/s (1e9 B/s).  Check (before timing): hash-random src, dst poisoned with
// 0xFF, one op, region compared with host-known values (device + host spot)
// and a 16 KiB guard after the region must still hold the poison.
// Usage: tma_copy [--quick]
#include "common.cuh"

static constexpr int kMaxStages = 4;

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, p;\n\t}"
      : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}
__device__ __forceinline__ void bulk_load(uint32_t dst_smem, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst_smem), "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src_smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               ::"l"(__cvta_generic_to_global(dst)), "r"(src_smem), "r"(bytes) : "memory");
}

__global__ void tma_copy_kernel(const char* __restrict__ src, char* __restrict__ dst, uint32_t msg,
                                uint32_t stages, uint32_t nmsg, long long timeout_cycles, unsigned* status) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  if (threadIdx.x != 0) return;  // one issuing thread per block
  const uint32_t buf0 = smem_addr(smem);
  for (uint32_t s = 0; s < stages; ++s) mbar_init(smem_addr(&bars[s]), 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");

  auto offset = [&](uint32_t k) { return ((size_t)k * gridDim.x + blockIdx.x) * msg; };
  auto issue_load = [&](uint32_t k) {
    const uint32_t s = k % stages, bar = smem_addr(&bars[s]);
    mbar_arrive_expect_tx(bar, msg);
    bulk_load(buf0 + s * msg, src + offset(k), msg, bar);
  };
  for (uint32_t k = 0; k + 1 < stages && k < nmsg; ++k) issue_load(k);
  uint32_t parity = 0;  // bit s = phase parity to wait for on stage s
  for (uint32_t k = 0; k < nmsg; ++k) {
    const uint32_t s = k % stages, bar = smem_addr(&bars[s]);
    const long long deadline = clock64() + timeout_cycles;
    while (!mbar_try_wait(bar, (parity >> s) & 1u)) {
      if (clock64() > deadline) {
        atomicExch(status, 1u);
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        return;
      }
    }
    parity ^= 1u << s;
    bulk_store(dst + offset(k), buf0 + s * msg, msg);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    const uint32_t next = k + stages - 1;  // goes into the buffer store k-1 read
    if (next < nmsg) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      issue_load(next);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // stores complete
}

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("tma_copy");
  const int sms = sm_count();
  const uint32_t seed = 0x7a3c;
  const size_t pool = quick ? 256 * MiB : 1 * GiB, guard = 16 * KiB;
  const long long timeout_cycles = 4000000000ll;  // ~2 s at 2 GHz per wait

  char *src = nullptr, *dst = nullptr;
  unsigned* status = nullptr;
  CHECK(cudaMalloc(&src, pool + guard));
  CHECK(cudaMalloc(&dst, pool + guard));
  CHECK(cudaMalloc(&status, sizeof(unsigned)));
  CHECK(cudaMemset(status, 0, sizeof(unsigned)));
  fill_hash((uint32_t*)src, (pool + guard) / 4, seed);
  CHECK(cudaFuncSetAttribute(tma_copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 128 * 1024));
  CHECK(cudaDeviceSynchronize());
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.015 : 0.04;

  struct Point { uint32_t msg; int blocks, stages; };
  std::vector<Point> pts;
  std::vector<int> blist = quick ? std::vector<int>{1, 8, 66, 132} : std::vector<int>{1, 2, 4, 8, 16, 32, 66, 132};
  for (int& b : blist) b = std::min(b, sms);
  blist.erase(std::unique(blist.begin(), blist.end()), blist.end());
  for (int b : blist)
    for (uint32_t m = 256; m <= 64 * 1024; m *= (quick ? 4 : 2)) pts.push_back({m, b, 2});
  for (uint32_t m = 256; m <= 32 * 1024; m *= (quick ? 4 : 2)) pts.push_back({m, sms, 4});

  int failures = 0;
  std::vector<uint32_t> hguard(guard / 4);
  for (const Point& p : pts) {
    const uint32_t nmsg = (uint32_t)std::min<size_t>(1024, pool / ((size_t)p.blocks * p.msg));
    const size_t bytes = (size_t)p.blocks * p.msg * nmsg;
    const size_t slots = std::max<size_t>(1, pool / bytes);
    const size_t smem = (size_t)p.stages * p.msg;
    auto op = [&](long long i) {
      const size_t off = (size_t)(i % (long long)slots) * bytes;
      tma_copy_kernel<<<p.blocks, 32, smem, st>>>(src + off, dst + off, p.msg, p.stages, nmsg, timeout_cycles,
                                                  status);
      CHECK_LAUNCH();
    };
    // ---- check
    CHECK(cudaMemsetAsync(dst, 0xFF, bytes + guard, st));
    op(0);
    CHECK(cudaStreamSynchronize(st));
    unsigned h_status = 0;
    CHECK(cudaMemcpy(&h_status, status, sizeof h_status, cudaMemcpyDeviceToHost));
    std::string check = h_status ? "FAIL: mbarrier wait timed out" : verify_words((uint32_t*)dst, bytes / 4, seed, 0);
    CHECK(cudaMemcpy(hguard.data(), dst + bytes, guard, cudaMemcpyDeviceToHost));
    for (uint32_t w : hguard)
      if (w != 0xFFFFFFFFu && check == "ok") check = "FAIL: wrote past the end of the region";

    JsonObj params;
    params.integer("msg_bytes", p.msg).integer("blocks", p.blocks).integer("stages", p.stages)
        .integer("msgs_per_block", nmsg).integer("rotation_slots", (long long)slots).str("l2", "cold");
    JsonObj o;
    o.str("bench", "tma_copy").obj("params", params).integer("bytes", (long long)bytes)
        .integer("traffic_bytes", (long long)(2 * bytes));
    if (check == "ok") {
      Timing t = time_op(st, op, cfg);
      CHECK(cudaMemcpy(&h_status, status, sizeof h_status, cudaMemcpyDeviceToHost));
      if (h_status) check = "FAIL: mbarrier wait timed out while timing";
      add_timing(o, t);
      const double gbps = bytes / t.med / 1e9;
      o.num("gbps", gbps).num("traffic_gbps", 2 * gbps).num("gbps_per_block", gbps / p.blocks);
    }
    if (check != "ok") ++failures;
    o.str("check", check);
    emit(o);
    if (h_status) break;  // a hung pipeline: stop rather than time out every point
  }
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  CHECK(cudaFree(status));
  return failures ? 2 : 0;
}
