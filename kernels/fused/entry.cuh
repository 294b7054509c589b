// fused/entry.cuh: host side of a generated fused kernel: argument checks, the grid split,
// globals, the launch, requirements, and the C functions every fused library exports.
//
// The generated translation unit defines `config` and `op` (fused/ops.cuh), its kernel, and
//   extern "C" int pk_<op>_<overlap>(const pkf_args*, char* msg, size_t len)
// which calls pkf::check_args<op, config> and pkf::launch<op, config>; pkf_requirements calls
// pkf::requirements. Status codes and the reporter are the collectives' (collectives/entry.cuh),
// and so is pkc_read_error, which turns the device error record into a message after the stream
// has finished.
//
// Grid: world x (gemm_blocks + comm_blocks) blocks of Cfg::THREADS threads with Cfg::SMEM_BYTES
// of dynamic shared memory (one block per SM). gemm_blocks defaults to SMs / world -
// comm_blocks, so that the whole grid is one wave. Ops whose blocks wait on each other (every
// inter-SM op: communication blocks wait for GEMM tiles, ag-gemm's GEMM waits for gathered rows)
// launch cooperatively (pk::launch_cooperative: co-residency guaranteed, or an error naming the
// co-resident limit); the intra-SM ops never wait on another block and launch plainly.
#pragma once

#include <memory>

#include "collectives/entry.cuh"
#include "fused/ops.cuh"

namespace pkf {

using pkc::reporter;

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline int device_sms(int& sms) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return static_cast<int>(e);
}

// The grid split of a call: GEMM and communication blocks per rank, and the tile order.
struct split {
  int gemm = 0, comm = 0;
  bool staggered = true;
};

template <class Op, class Config>
bool make_split(const pkf_args* a, split& s, reporter& rep) {
  if (a->tile_order < -1 || a->tile_order > 1)
    return rep.fail(PKC_BAD_ARGUMENT, "tile_order %d is not -1 (default), 0 (staggered) or 1 (sequential)",
                    a->tile_order), false;
  s.staggered = a->tile_order == -1 ? Config::kStaggered : a->tile_order == 0;
  if (Op::kSpins) {
    s.comm = a->comm_blocks > 0 ? a->comm_blocks : Config::kCommBlocks;
    if (s.comm < 1) return rep.fail(PKC_BAD_ARGUMENT, "inter-SM ops need comm_blocks >= 1"), false;
  } else if (a->comm_blocks > 0) {
    return rep.fail(PKC_BAD_ARGUMENT, "intra-SM ops have no communication blocks (comm_blocks = %d)",
                    a->comm_blocks), false;
  }
  if (a->gemm_blocks > 0) {
    s.gemm = a->gemm_blocks;
  } else {
    int sms = 0;
    if (const int e = device_sms(sms))
      return rep.fail(PKC_CUDA_ERROR, "cudaDeviceGetAttribute: %s",
                      cudaGetErrorString(static_cast<cudaError_t>(e))), false;
    s.gemm = sms / a->world - s.comm;
    if (s.gemm < 1)
      return rep.fail(PKC_BAD_ARGUMENT, "%d SMs / world %d leave no GEMM block beside %d communication blocks",
                      sms, a->world, s.comm), false;
  }
  return true;
}

template <class Op, class Config>
bool check_args(const pkf_args* a, reporter& rep) {
  if (a == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "pkf_args is NULL"), false;
  if (a->abi_version != PKF_ABI_VERSION)
    return rep.fail(PKC_BAD_ARGUMENT, "pkf_args ABI version %d, this library implements %d",
                    a->abi_version, PKF_ABI_VERSION), false;
  if (a->world < 2 || a->world > PKF_MAX_RANKS)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d is outside 2..%d", a->world, PKF_MAX_RANKS), false;
  if (a->M < 1 || a->N < 1 || a->K < 1)
    return rep.fail(PKC_BAD_ARGUMENT, "M, N, K = %d, %d, %d: each must be at least 1", a->M, a->N,
                    a->K), false;
  if (a->M < a->world)
    return rep.fail(PKC_BAD_ARGUMENT, "M = %d is below the world (%d): some rank would own no rows",
                    a->M, a->world), false;
  if (a->K % 8 != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "K = %d is not a multiple of 8 (TMA needs 16-byte row pitches)",
                    a->K), false;
  if (a->N % 8 != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "N = %d is not a multiple of 8 (TMA needs 16-byte row pitches)",
                    a->N), false;
  const char* names[5] = {"a", "b", "out", "partial", "gathered"};
  for (int r = 0; r < a->world; ++r) {
    const void* p[5] = {a->a[r], a->b[r], a->out[r], a->partial[r], a->gathered[r]};
    const bool need[5] = {true, true, true, Op::kPartial, Op::kGathered};
    for (int i = 0; i < 5; ++i) {
      if (!need[i]) continue;
      if (p[i] == nullptr)
        return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s is NULL", r, names[i]), false;
      if (!aligned16(p[i]))
        return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s is not 16-byte aligned", r, names[i]), false;
    }
  }
  if (Op::kSpins) {
    for (int r = 0; r < a->world; ++r)
      if (a->flags[r] == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "rank %d: flags are NULL", r), false;
    if (a->num_flags < Op::num_flags(a))
      return rep.fail(PKC_BAD_ARGUMENT, "%d flags per rank; this shape needs %d", a->num_flags,
                      Op::num_flags(a)), false;
    if (a->err == nullptr)
      return rep.fail(PKC_BAD_ARGUMENT, "err (the device error record) is NULL"), false;
  }
  if (a->group_m < 0) return rep.fail(PKC_BAD_ARGUMENT, "group_m %d is negative", a->group_m), false;
  if (a->zero_output != 0 && a->zero_output != 1)
    return rep.fail(PKC_BAD_ARGUMENT, "zero_output must be 0 or 1"), false;
  split s;
  return make_split<Op, Config>(a, s, rep);
}

template <class Op, class Config>
int launch(void (*kernel)(const typename Op::globals), const pkf_args* a, reporter& rep) {
  using Cfg = typename Op::cfg;
  if (Op::kMulticast && (a->partial_mc == nullptr || a->out_mc == nullptr))
    return rep.fail(PKC_UNSUPPORTED,
                    "in-network kernels need NVLink multicast addresses (partial_mc, out_mc); this "
                    "project never creates them, so these kernels are compile-only");
  split s;
  if (!make_split<Op, Config>(a, s, rep)) return rep.code;
  const call_info ci{s.gemm, s.comm, a->group_m, s.staggered,
                     a->timeout_cycles > 0 ? a->timeout_cycles : PK_DEFAULT_TIMEOUT_CYCLES};
  auto g = std::make_unique<typename Op::globals>();
  const int rc = Op::fill(*g, a, ci);
  if (rc != pk::gemm::OK)
    return rep.fail(PKC_BAD_ARGUMENT, "%s", pk::gemm::status_string(rc));
  g->world = a->world;
  g->gemm_blocks = s.gemm;
  g->comm_blocks = s.comm;
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  const dim3 grid(static_cast<unsigned>(a->world * (s.gemm + s.comm)));
  try {
    if (Op::kStoreAdd && a->zero_output) {
      for (int r = 0; r < a->world; ++r)
        PK_CUDA_CHECK(cudaMemsetAsync(a->out[r], 0,
                                      static_cast<size_t>(out_rows(Op::kKind, r, a)) * a->N * sizeof(bf16),
                                      stream));
    }
    if (Op::kSpins) {
      pk::launch_cooperative(kernel, grid, dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream, *g);
    } else {
      PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Cfg::SMEM_BYTES));
      kernel<<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(*g);
      PK_CUDA_CHECK(cudaGetLastError());
    }
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

// Buffer sizes and launch figures for these arguments (world, M, N, K and the block counts are
// read; pointers are not).
template <class Op, class Config>
int requirements(void (*kernel)(const typename Op::globals), const pkf_args* a, pkf_reqs* out,
                 reporter& rep) {
  using Cfg = typename Op::cfg;
  if (a == nullptr || out == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "NULL argument");
  if (a->world < 2 || a->world > PKF_MAX_RANKS || a->M < a->world || a->N < 1 || a->K < 1)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d, M %d, N %d, K %d: not a valid call", a->world, a->M,
                    a->N, a->K);
  split s;
  if (!make_split<Op, Config>(a, s, rep)) return rep.code;
  std::memset(out, 0, sizeof(*out));
  const size_t m = static_cast<size_t>(a->M);
  out->partial_bytes = Op::kPartial ? m * a->N * sizeof(bf16) : 0;
  out->gathered_bytes = Op::kGathered ? m * a->K * sizeof(bf16) : 0;
  out->num_flags = Op::num_flags(a);
  out->gemm_blocks = s.gemm;
  out->comm_blocks = s.comm;
  out->threads = Cfg::THREADS;
  out->smem_bytes = Cfg::SMEM_BYTES;
  out->spins = Op::kSpins ? 1 : 0;
  try {
    PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::SMEM_BYTES));
    out->max_coresident_blocks = pk::max_coresident_blocks(kernel, Cfg::THREADS, Cfg::SMEM_BYTES);
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

}  // namespace pkf

extern "C" int pkf_abi_version(void) { return PKF_ABI_VERSION; }
extern "C" size_t pkf_args_size(void) { return sizeof(pkf_args); }
extern "C" size_t pkf_reqs_size(void) { return sizeof(pkf_reqs); }
