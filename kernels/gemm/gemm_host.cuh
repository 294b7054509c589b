// gemm/gemm_host.cuh: host side of the Hopper GEMM: argument checks, tensor maps, launch.
//
// Provides (namespace pk::gemm)
//   * status codes (negative: bad argument, checked before any CUDA call; positive: the
//     cudaError_t of a failed CUDA call) and status_string(code);
//   * check_args(A, B, C, M, N, K, sms, first_block, group_m): the rules TMA imposes, each
//     with its own code;
//   * make_swizzled_map(base, rows, cols, box_rows): a bf16 row-major tensor map with
//     64-column boxes and 128-byte swizzling (cuTensorMapEncodeTiled through the runtime's
//     driver entry point, so no -lcuda; a map this thread encoded before from the same
//     arguments is copied, pk/tensor_map_cache.cuh);
//   * make_params<Cfg>(...): the kernel parameters of the plain store epilogue;
//   * launch<Cfg, Epi, Pro, Sched>(params, stream, set_limit): sets the shared-memory limit
//     (unless told it is set) and launches gemm_kernel;
//   * gemm_bf16<Cfg>(...): the standalone GEMM; a call with the same arguments as one of the
//     thread's last 8 for that variant launches the parameters it stored then (launch_cache.cuh).
//
// A fused variant builds params<MyEpi, MyPro, Sched> with the A / B maps from here and its own
// epilogue maps (e.g. one per peer rank for a store-add), then launches its own kernel.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "pk/host.cuh"
#include "gemm/gemm.cuh"
#include "gemm/launch_cache.cuh"

namespace pk {
namespace gemm {

enum status : int {
  OK = 0,
  ERR_NULL_POINTER = -1,
  ERR_BAD_SHAPE = -2,       // M, N or K < 1 or >= 2^31
  ERR_K_ALIGNMENT = -3,     // K % 8 != 0: A's row pitch is not a multiple of 16 bytes
  ERR_N_ALIGNMENT = -4,     // N % 8 != 0: B's and C's row pitch is not a multiple of 16 bytes
  ERR_PTR_ALIGNMENT = -5,   // A, B or C not 16-byte aligned
  ERR_BAD_GRID = -6,        // sms < 0, group_m < 0, first_block < 0 or not a multiple of
                            // the cluster size
  ERR_BAD_VARIANT = -7,     // unknown tile variant
  ERR_TENSOR_MAP = -8,      // cuTensorMapEncodeTiled refused a map (or is missing)
};

inline const char* status_string(int code) {
  switch (code) {
    case OK: return "ok";
    case ERR_NULL_POINTER: return "A, B or C is a null pointer";
    case ERR_BAD_SHAPE: return "M, N and K must be in 1 .. 2^31 - 1";
    case ERR_K_ALIGNMENT:
      return "K must be a multiple of 8 (TMA needs A's row pitch, K * 2 bytes, to be a multiple "
             "of 16 bytes)";
    case ERR_N_ALIGNMENT:
      return "N must be a multiple of 8 (TMA needs B's and C's row pitch, N * 2 bytes, to be a "
             "multiple of 16 bytes)";
    case ERR_PTR_ALIGNMENT: return "A, B and C must be 16-byte aligned (TMA global addresses)";
    case ERR_BAD_GRID:
      return "sms, first_block and group_m must be >= 0 (first_block a multiple of the cluster "
             "size for clustered variants)";
    case ERR_BAD_VARIANT: return "unknown tile variant";
    case ERR_TENSOR_MAP: return "cuTensorMapEncodeTiled refused a tensor map";
    default: break;
  }
  if (code > 0) return cudaGetErrorString(static_cast<cudaError_t>(code));
  return "unknown status";
}

inline int check_args(const void* A, const void* B, const void* C, long long M, long long N,
                      long long K, int sms, int first_block, int group_m) {
  if (A == nullptr || B == nullptr || C == nullptr) return ERR_NULL_POINTER;
  const long long lim = (1LL << 31) - 1;
  if (M < 1 || N < 1 || K < 1 || M > lim || N > lim || K > lim) return ERR_BAD_SHAPE;
  if (K % 8 != 0) return ERR_K_ALIGNMENT;
  if (N % 8 != 0) return ERR_N_ALIGNMENT;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) |
                         reinterpret_cast<uintptr_t>(C);
  if (bits % 16 != 0) return ERR_PTR_ALIGNMENT;
  if (sms < 0 || first_block < 0 || group_m < 0) return ERR_BAD_GRID;
  return OK;
}

// Row-major rows x cols bf16 matrix (pitch = cols), boxes of box_rows x 64 columns, 128-byte
// swizzle, zero fill out of bounds. Returns false if the driver refuses.
inline bool make_swizzled_map(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols,
                              uint32_t box_rows) {
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint32_t box[2] = {64, box_rows};
  try {
    return pk::detail::encode_2d_cached(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, dims,
                                        cols * sizeof(__nv_bfloat16), box,
                                        CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  } catch (const std::exception&) {
    return false;  // the driver exports no encoder
  }
}

// B descriptor strides (bytes) for an N-major operand made of [BK rows][64 cols] boxes: the
// leading byte offset steps from one 64-column box to the next along N, the stride byte
// offset from one 8-row group to the next along K. `swap` exchanges them (a diagnostic).
template <class Cfg>
inline void b_strides(uint32_t& lbo, uint32_t& sbo, bool swap = false) {
  lbo = Cfg::B_BOX_BYTES;
  sbo = 8 * 128;
  if (swap) {
    const uint32_t t = lbo;
    lbo = sbo;
    sbo = t;
  }
}

// Parameters of the A and B side, shared by every epilogue.
template <class Cfg, class Epi, class Pro, class Sched>
inline int fill_operands(params<Epi, Pro, Sched>& p, const void* A, const void* B, int M, int N,
                         int K) {
  if (!make_swizzled_map(&p.a_map, A, M, K, Cfg::A_BOX_ROWS)) return ERR_TENSOR_MAP;
  if (!make_swizzled_map(&p.b_map, B, K, N, Cfg::BK)) return ERR_TENSOR_MAP;
  p.M = M;
  p.N = N;
  p.K = K;
  p.k_blocks = (K + Cfg::BK - 1) / Cfg::BK;
  b_strides<Cfg>(p.b_lbo, p.b_sbo);
  return OK;
}

inline grouped_raster make_raster(int M, int N, int BM, int BN, int group_m) {
  grouped_raster r;
  r.num_m = (M + BM - 1) / BM;
  r.num_n = (N + BN - 1) / BN;
  r.group_m = group_m > 0 ? group_m : 16;
  if (r.group_m > r.num_m) r.group_m = r.num_m;
  return r;
}

inline int device_sm_count(int& sms_out) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = cudaDeviceGetAttribute(&sms_out, cudaDevAttrMultiProcessorCount, dev);
  return static_cast<int>(e);
}

// The launch configuration of a grid of `blocks` blocks of Cfg in clusters of Cfg::CLUSTER on
// `stream`; it points at its own cluster attribute, so it is not copied.
template <class Cfg>
struct cluster_launch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t config = {};
  cluster_launch(unsigned blocks, cudaStream_t stream) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = Cfg::CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(Cfg::THREADS);
    config.dynamicSmemBytes = Cfg::SMEM_BYTES;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  cluster_launch(const cluster_launch&) = delete;
  cluster_launch& operator=(const cluster_launch&) = delete;
};

// Launch the standalone kernel: grid = p.first_block + p.num_blocks blocks, in clusters of
// Cfg::CLUSTER (then both counts must be multiples of it).
// set_limit = false: the caller knows the shared-memory limit is already set for this device.
template <class Cfg, class Epi, class Pro, class Sched>
inline int launch(const params<Epi, Pro, Sched>& p, cudaStream_t stream, bool set_limit = true) {
  auto kernel = gemm_kernel<Cfg, Epi, Pro, Sched>;
  if (set_limit) {
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM_BYTES);
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  if constexpr (Cfg::CLUSTER == 1) {
    kernel<<<p.first_block + p.num_blocks, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(p);
    return static_cast<int>(cudaGetLastError());
  } else {
    cluster_launch<Cfg> lc(p.first_block + p.num_blocks, stream);
    return static_cast<int>(cudaLaunchKernelEx(&lc.config, kernel, p));
  }
}

// How many clusters of Cfg::CLUSTER blocks can be resident at once (the persistent grid
// must not exceed it, or the clusters past it would run after the others, a whole extra wave).
template <class Cfg, class Epi, class Pro, class Sched>
inline int max_resident_clusters(int& clusters) {
  auto kernel = gemm_kernel<Cfg, Epi, Pro, Sched>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::SMEM_BYTES);
  if (e != cudaSuccess) return static_cast<int>(e);
  cluster_launch<Cfg> lc(Cfg::CLUSTER * 1024, nullptr);
  return static_cast<int>(cudaOccupancyMaxActiveClusters(&clusters, kernel, &lc.config));
}

// C = A @ B with the store epilogue. sms: persistent GEMM blocks (0 = every SM).
template <class Cfg>
inline int gemm_bf16(const void* A, const void* B, void* C, int M, int N, int K, int sms,
                     int first_block, int group_m, bool swap_b_strides, cudaStream_t stream) {
  using launch_params = params<store_epilogue>;
  int rc = check_args(A, B, C, M, N, K, sms, first_block, group_m);
  if (rc != OK) return rc;
  if (first_block % Cfg::CLUSTER != 0) return ERR_BAD_GRID;
  int device = 0;
  rc = static_cast<int>(cudaGetDevice(&device));
  if (rc != 0) return rc;
  const launch_key key{A, B, C, M, N, K, sms, first_block, group_m, swap_b_strides ? 1 : 0,
                       device};
  // One cache per thread and variant. An entry exists only after this thread set the
  // kernel's shared-memory limit on this device; should the limit be gone (a device reset),
  // the launch fails before it starts and the call takes the full path below (safe even if
  // the error was another's, pending, and the kernel did run: it only stores C = A @ B).
  static thread_local launch_cache<launch_params> cache;
  if (const launch_params* hit = cache.find(key)) {
    if (launch<Cfg>(*hit, stream, /*set_limit=*/false) == 0) return OK;
    cache.drop(key);
  }
  launch_params p{};
  rc = fill_operands<Cfg>(p, A, B, M, N, K);
  if (rc != OK) return rc;
  b_strides<Cfg>(p.b_lbo, p.b_sbo, swap_b_strides);
  if (!make_swizzled_map(&p.epi.c_map, C, M, N, Cfg::WG_ROWS)) return ERR_TENSOR_MAP;
  p.sched = make_raster(M, N, Cfg::BM * Cfg::CLUSTER_M, Cfg::BN * Cfg::CLUSTER_N, group_m);
  int dev_sms = 0;
  rc = device_sm_count(dev_sms);
  if (rc != 0) return rc;
  int blocks = sms > 0 ? sms : dev_sms;
  if constexpr (Cfg::CLUSTER > 1) {
    int clusters = 0;
    rc = max_resident_clusters<Cfg, store_epilogue, no_prologue, grouped_raster>(clusters);
    if (rc != 0) return rc;
    if (clusters < 1) return static_cast<int>(cudaErrorInvalidConfiguration);
    if (blocks > clusters * Cfg::CLUSTER) blocks = clusters * Cfg::CLUSTER;
    blocks -= blocks % Cfg::CLUSTER;
    if (blocks < Cfg::CLUSTER) blocks = Cfg::CLUSTER;
  }
  if (blocks > p.sched.tiles() * Cfg::CLUSTER) blocks = p.sched.tiles() * Cfg::CLUSTER;
  p.first_block = first_block;
  p.num_blocks = blocks;
  rc = launch<Cfg>(p, stream);
  if (rc == 0) cache.put(key, p);
  return rc;
}

}  // namespace gemm
}  // namespace pk
