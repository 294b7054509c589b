// moves_check.cuh -- what the programs that run the generated collectives' routines share
// (validation/microbench/block_moves.cu, signal_chain.cu, fused_pull.cu and the experiments
// that include it): the launch constants per mechanism, random bf16 sources, the bit-exact
// check of a move, the device error record of their spin deadlines and what a checked run
// left (header only).
#pragma once
#include <cuda_bf16.h>

#include "common.cuh"
#include "collectives/collective.cuh"

using bf16 = __nv_bfloat16;

// The generated kernels' launch constants (codegen/plan.py): TMA: 256 threads, four 32 KiB
// stages; registers: 512 threads.
template <pkc::mech M>
struct move_config {
  static constexpr pkc::mech kMech = M;
  static constexpr int kThreads = M == pkc::mech::tma ? 256 : 512;
  static constexpr unsigned kStageBytes = M == pkc::mech::tma ? 32 * 1024 : 0;
  static constexpr int kStages = M == pkc::mech::tma ? 4 : 1;
  static constexpr size_t kSmemBytes = M == pkc::mech::tma ? 4 * 32 * 1024 + 128 : 0;
  static constexpr bool kStaggered = true;
};

// The block's TMA stages in dynamic shared memory, their barriers initialised (all threads).
template <class C>
__device__ pkc::block_smem stages(unsigned char* smem_raw, uint64_t* bars) {
  pkc::block_smem sm{pk::tma::align_smem<128>(smem_raw), bars, 0u};
  if (threadIdx.x == 0) {
    for (int k = 0; k < C::kStages; ++k) pk::tma::mbar_init(&bars[k], 1);
    pk::tma::mbar_init_fence();
  }
  __syncthreads();
  return sm;
}

__global__ void fill_bf16_kernel(bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16_rn((hash_u32(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

// Counts elements of `out` that differ from the fp32 sum of the sources, rounded to bf16.
__global__ void check_kernel(const bf16* out, pkc::cptrs<bf16> src, size_t n, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float a = 0.f;
    for (int q = 0; q < src.n; ++q) a += __bfloat162float(src.p[q][i]);
    const bf16 want = __float2bfloat16_rn(a);
    local += (*reinterpret_cast<const unsigned short*>(&out[i]) != *reinterpret_cast<const unsigned short*>(&want));
  }
  if (local) atomicAdd(bad, local);
}

// A device error record for the moves' spin deadlines, zeroed.
inline pk::error_record* new_error_record() {
  pk::error_record* err = nullptr;
  CHECK(cudaMalloc(&err, sizeof(pk::error_record)));
  CHECK(cudaMemset(err, 0, sizeof(pk::error_record)));
  return err;
}

// What a checked run left (call after its stream has finished): "FAIL: a wait timed out"
// when `err` holds a timeout (then cleared for the next run), else "FAIL: N elements wrong"
// when the check kernels that `count(bad)` launches add N into the zeroed device counter
// `bad`, else "ok".
template <class Count>
std::string run_check(pk::error_record* err, Count count) {
  static unsigned long long* d_bad = nullptr;
  if (d_bad == nullptr) CHECK(cudaMalloc(&d_bad, sizeof(unsigned long long)));
  pk::error_record e{};
  CHECK(cudaMemcpy(&e, err, sizeof(e), cudaMemcpyDeviceToHost));
  if (e.code != 0) {
    CHECK(cudaMemset(err, 0, sizeof(pk::error_record)));
    return "FAIL: a wait timed out (code " + std::to_string(e.code) + ")";
  }
  CHECK(cudaMemset(d_bad, 0, sizeof(unsigned long long)));
  count(d_bad);
  CHECK_LAUNCH();
  unsigned long long bad = 0;
  CHECK(cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost));
  return bad ? "FAIL: " + std::to_string(bad) + " elements wrong" : std::string("ok");
}

// The program's exit status after its moves: 1 (and a line naming `program`) when a TMA wait
// recorded a timeout in the device error record `err`, else 0.
inline int exit_status(const pk::error_record* err, const char* program) {
  pk::error_record e{};
  CHECK(cudaMemcpy(&e, err, sizeof(e), cudaMemcpyDeviceToHost));
  if (e.code == 0) return 0;
  fprintf(stderr, "%s: a TMA wait timed out (code %d)\n", program, e.code);
  return 1;
}
