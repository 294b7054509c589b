// copy_under_gemm.cu -- a register sum on a few SMs, alone and while our GEMM runs on the others.
//
// Why: in run 18 (2026-12-03) the inter-SM fused kernels by registers with few communication
// blocks ran 1.3-1.6x longer than predicted (gemm-rs w2 c8 8192x8192x2048: 1407 us measured,
// 939 predicted; gemm-ar w2 c8: 1708 vs 1048), although the same moves in the standalone
// collectives on as many blocks are predicted within a few per cent (two-shot by registers w2
// 256 MiB b16: 603 us measured, 613 predicted). If their communication blocks move ~20 GB/s a
// block where the standalone's move ~55, the GEMM beside them (its operands stream from L2 to
// 116 SMs) slows them: a cost the model does not have. This measures it on primitives alone.
//
// Per point: K blocks of 512 threads sum 2 bf16 sources of S bytes into D destinations
// (D = 1: gemm-rs's pattern; D = 2: gemm-ar's two shots in one pass), each block a piece
// (pkc::block_piece), with the collectives' register sum (pkc::reg_reduce). Timed with CUDA
// events on its own stream, median of REPS launches, each behind a 256 MiB write:
//   alone_s        the sum alone;
//   under_gemm_s   the sum launched just after our GEMM (128x256x64 tiles, persistent) of
//                  M x 8192 x 2048 on 132 - K SMs, on another stream: M = 16384 (two 8192-row
//                  ranks' worth), long enough (~1 ms) that the sum ends before it;
//   gemm_s, gemm_with_sum_s   the GEMM alone on 132 - K SMs, and with the sum beside it.
// Check: every destination against the fp32 sum of the sources rounded once (bit-exact), after
// the runs under the GEMM.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include -I kernels \
//        validation/experiments/copy_under_gemm.cu -o copy_under_gemm && ./copy_under_gemm
#include <algorithm>

#include "gemm/gemm_host.cuh"
#include "../microbench/moves_check.cuh"

constexpr int kThreads = 512;
constexpr int kReps = 15;
using gemm_cfg = pk::gemm::config<128, 256, 64, 4, 2>;

__global__ void __launch_bounds__(kThreads) sum_kernel(const __grid_constant__ pkc::ptrs<bf16> dst,
                                                       const __grid_constant__ pkc::cptrs<bf16> src,
                                                       size_t n) {
  const pkc::span s = pkc::block_piece(n, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x),
                                       sizeof(bf16));
  pkc::ptrs<bf16> d{};
  pkc::cptrs<bf16> q{};
  for (int k = 0; k < dst.n; ++k) d.add(dst.p[k] + s.lo);
  for (int k = 0; k < src.n; ++k) q.add(src.p[k] + s.lo);
  pkc::reg_reduce(d, q, s.size(), pk::ldst::block_group());
}

int main() {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  const int sms = sm_count();
  const int M = 16384, N = 8192, K = 2048;
  const size_t flush_bytes = 256 * MiB;
  void* flush = nullptr;
  bf16 *A = nullptr, *B = nullptr, *C = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&A, sizeof(bf16) * M * K));
  CHECK(cudaMalloc(&B, sizeof(bf16) * K * N));
  CHECK(cudaMalloc(&C, sizeof(bf16) * M * N));
  fill_bf16_kernel<<<sms * 4, 512>>>(A, size_t(M) * K, 1);
  fill_bf16_kernel<<<sms * 4, 512>>>(B, size_t(K) * N, 2);
  const size_t S = 32 * MiB, n = S / sizeof(bf16);
  bf16* buf[4];
  for (auto& p : buf) CHECK(cudaMalloc(&p, S));
  fill_bf16_kernel<<<sms * 4, 512>>>(buf[0], n, 3);
  fill_bf16_kernel<<<sms * 4, 512>>>(buf[1], n, 4);
  unsigned long long* bad = nullptr;
  CHECK(cudaMallocManaged(&bad, sizeof *bad));
  CHECK(cudaDeviceSynchronize());
  cudaStream_t s0, s1;
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t go, g0, g1, c0, c1;
  for (cudaEvent_t* e : {&go, &g0, &g1, &c0, &c1}) CHECK(cudaEventCreate(e));
  emit_device_record("copy_under_gemm");
  int failures = 0;
  for (int dests : {1, 2}) {
    pkc::cptrs<bf16> src{};
    src.add(buf[0]);
    src.add(buf[1]);
    pkc::ptrs<bf16> dst{};
    for (int d = 0; d < dests; ++d) dst.add(buf[2 + d]);
    for (int blocks : {8, 16, 33}) {
      const int gemm_sms = sms - blocks;
      auto sum = [&](cudaStream_t st) { sum_kernel<<<blocks, kThreads, 0, st>>>(dst, src, n); };
      auto gemm = [&](cudaStream_t st) {
        const int rc = pk::gemm::gemm_bf16<gemm_cfg>(A, B, C, M, N, K, gemm_sms, 0, 0, false, st);
        if (rc != 0) {
          std::fprintf(stderr, "gemm: %s\n", pk::gemm::status_string(rc));
          std::exit(1);
        }
      };
      const auto alone = times_behind_write(s0, [&] { sum(s0); }, flush, flush_bytes, kReps);
      const auto gemm_alone = times_behind_write(s0, [&] { gemm(s0); }, flush, flush_bytes, 5);
      std::vector<double> under, with;
      for (int r = 0; r < kReps; ++r) {
        CHECK(cudaMemsetAsync(flush, r & 0xFF, flush_bytes, s0));
        CHECK(cudaEventRecord(go, s0));
        CHECK(cudaStreamWaitEvent(s1, go, 0));
        CHECK(cudaEventRecord(g0, s0));
        gemm(s0);
        CHECK(cudaEventRecord(g1, s0));
        CHECK(cudaEventRecord(c0, s1));
        sum(s1);
        CHECK(cudaEventRecord(c1, s1));
        CHECK(cudaDeviceSynchronize());
        CHECK_LAUNCH();
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, c0, c1));
        under.push_back(ms * 1e-3);
        CHECK(cudaEventElapsedTime(&ms, g0, g1));
        with.push_back(ms * 1e-3);
      }
      unsigned long long wrong = 0;
      for (int d = 0; d < dests; ++d) {
        *bad = 0;
        check_kernel<<<sms * 4, 512>>>(buf[2 + d], src, n, bad);
        CHECK(cudaDeviceSynchronize());
        wrong += *bad;
      }
      failures += wrong != 0;
      JsonObj o;
      o.str("bench", "copy_under_gemm").integer("blocks", blocks).integer("dests", dests)
          .integer("sources", 2).integer("bytes", static_cast<long long>(S))
          .integer("gemm_sms", gemm_sms).str("gemm", "16384x8192x2048 128x256x64")
          .num("alone_s", quantile(alone, 0.5)).num("under_gemm_s", quantile(under, 0.5))
          .num("gemm_s", quantile(gemm_alone, 0.5)).num("gemm_with_sum_s", quantile(with, 0.5))
          .num("under_gemm_p10_s", quantile(under, 0.1)).num("under_gemm_p90_s", quantile(under, 0.9))
          .integer("wrong", static_cast<long long>(wrong)).integer("reps", kReps);
      emit(o);
    }
  }
  return failures ? 1 : 0;
}
