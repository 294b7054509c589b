// pk/host.cuh: host-side support for the pk primitives.
//
// Provides
//   * PK_CUDA_CHECK(expr): throws pk::cuda_error ("file:line: expr failed: name (message)");
//   * set_eager_module_loading(): CUDA_MODULE_LOADING=EAGER, to be called before any CUDA call
//     (lazy loading can make the first launch of a kernel wait on a module load while other
//     blocks already spin, which breaks the co-residency the spin-waits rely on);
//   * the device error record: alloc / reset / read / describe / throw_if_device_error. A
//     timed-out wait reads as "rank 3 timed out waiting on flag 7 from peer 2: expected 5,
//     saw 4";
//   * max_coresident_blocks(kernel, threads, smem): occupancy x multiprocessor count, the
//     largest grid whose blocks are all resident at once (required when blocks spin on each
//     other: a block that is not resident can never signal);
//   * launch_cooperative(kernel, grid, block, smem, stream, args...): checks the grid against
//     that bound, raises the dynamic shared-memory limit when needed and launches with
//     cudaLaunchCooperativeKernel, which guarantees co-residency or fails;
//   * sync_with_deadline(stream, seconds): a wall-clock backstop behind the device deadlines;
//   * virtual ranks: alloc_virtual_pgl / alloc_virtual_flags (one cudaMalloc per rank, all on
//     the current device) and the matching free / zero helpers;
//   * 2-D tensor maps: make_tile_map_2d<T>(base, rows, cols, pitch, box_rows, box_cols) encodes
//     a map for pk::tma::*_tile_async with cuTensorMapEncodeTiled (fetched from the driver
//     through the runtime, so no -lcuda), after checking the driver's encoding rules with a
//     readable message; tma_store_cols<T>(cols) is how many columns of each row a tile store
//     may actually write (see "Store footprint" below).
//
// Ordering: the host reads the error record only after the kernel has completed (stream
// synchronisation orders all device writes before the copy back).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_bf16.h>

#include "pgl.cuh"
#include "tensor_map_cache.cuh"

namespace pk {

struct cuda_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A device-side wait gave up; `record` says which.
struct device_error : std::runtime_error {
  error_record record;
  device_error(const std::string& what, const error_record& r) : std::runtime_error(what), record(r) {}
};

// The kernel did not finish within the host's wall-clock limit: the device deadlines did not
// fire. The context is unusable afterwards; the process should exit.
struct hang_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
inline std::string cuda_failure(cudaError_t e, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << expr << " failed: " << cudaGetErrorName(e) << " ("
     << cudaGetErrorString(e) << ")";
  return os.str();
}
}  // namespace detail

#define PK_CUDA_CHECK(expr)                                                                  \
  do {                                                                                       \
    const cudaError_t pk_status_ = (expr);                                                   \
    if (pk_status_ != cudaSuccess)                                                           \
      throw ::pk::cuda_error(::pk::detail::cuda_failure(pk_status_, #expr, __FILE__, __LINE__)); \
  } while (0)

inline void set_eager_module_loading() { setenv("CUDA_MODULE_LOADING", "EAGER", 1); }

// ---- error record --------------------------------------------------------------------------

inline error_record* alloc_error_record() {
  error_record* e = nullptr;
  PK_CUDA_CHECK(cudaMalloc(&e, sizeof(error_record)));
  PK_CUDA_CHECK(cudaMemset(e, 0, sizeof(error_record)));
  return e;
}

inline void reset_error_record(error_record* e, cudaStream_t s = nullptr) {
  PK_CUDA_CHECK(cudaMemsetAsync(e, 0, sizeof(error_record), s));
}

inline error_record read_error_record(const error_record* e) {
  error_record r{};
  PK_CUDA_CHECK(cudaMemcpy(&r, e, sizeof(r), cudaMemcpyDeviceToHost));
  return r;
}

inline std::string describe(const error_record& r) {
  std::ostringstream os;
  switch (r.code) {
    case PK_OK:
      os << "no device error";
      break;
    case PK_ERR_FLAG_TIMEOUT:
      os << "rank " << r.rank << " timed out waiting on flag " << r.flag_index;
      if (r.peer >= 0) os << " from peer " << r.peer;
      os << ": expected " << r.expected << ", saw " << r.seen;
      break;
    case PK_ERR_MBAR_TIMEOUT:
      os << "rank " << r.rank << " timed out waiting for mbarrier phase with parity " << r.expected
         << " (a TMA load never completed)";
      break;
    case PK_ERR_STALE_TABLE:
      os << "stale device table: it was written for other arguments (hash " << std::hex << r.seen
         << ", this call " << r.expected << std::dec
         << "); write it again from the library's table function before the call";
      break;
    case PK_ERR_BAD_SHAPE:
      os << "rank " << r.rank << ": the device was handed a call it cannot run (" << r.expected
         << " buffers in one TMA sum, at most " << r.seen << ")";
      break;
    default:
      os << "rank " << r.rank << " reported unknown device error code " << r.code;
  }
  return os.str();
}

inline void throw_if_device_error(const error_record* dev) {
  const error_record r = read_error_record(dev);
  if (r.code != PK_OK) throw device_error(describe(r), r);
}

// ---- co-resident launch --------------------------------------------------------------------

template <typename Kernel>
inline int max_coresident_blocks(Kernel kernel, int block_threads, size_t smem_bytes) {
  int dev = 0, sms = 0, per_sm = 0;
  PK_CUDA_CHECK(cudaGetDevice(&dev));
  PK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  PK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_threads, smem_bytes));
  return per_sm * sms;
}

namespace detail {
template <typename... P, typename Tuple, size_t... I>
inline void launch_cooperative_impl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t stream, Tuple& args, std::index_sequence<I...>) {
  void* ptrs[sizeof...(P) > 0 ? sizeof...(P) : 1] = {
      const_cast<void*>(static_cast<const void*>(&std::get<I>(args)))...};
  PK_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), grid, block,
                                            ptrs, smem, stream));
}
}  // namespace detail

// Launch `kernel` so that every block is resident at once, or throw explaining why not.
template <typename... P, typename... A>
inline void launch_cooperative(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch_cooperative: wrong number of kernel arguments");
  int dev = 0, coop = 0;
  PK_CUDA_CHECK(cudaGetDevice(&dev));
  PK_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop) throw cuda_error("launch_cooperative: device does not support cooperative launch");
  if (smem > 48 * 1024)
    PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const long long blocks = static_cast<long long>(grid.x) * grid.y * grid.z;
  const int cap = max_coresident_blocks(kernel, threads, smem);
  if (blocks > cap) {
    std::ostringstream os;
    os << "launch_cooperative: grid of " << blocks << " blocks (" << threads << " threads, "
       << smem << " B shared memory each) exceeds the " << cap
       << " blocks that can be resident at once; spinning blocks would deadlock";
    throw cuda_error(os.str());
  }
  std::tuple<std::decay_t<P>...> held(std::forward<A>(args)...);
  detail::launch_cooperative_impl(kernel, grid, block, smem, stream, held,
                                  std::index_sequence_for<P...>{});
}

// Wait for `stream`, polling, for at most `seconds` of wall-clock time.
inline void sync_with_deadline(cudaStream_t stream, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) PK_CUDA_CHECK(e);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > seconds) {
      std::ostringstream os;
      os << "kernel still running after " << seconds
         << " s although every device spin has a deadline: treat as a hang";
      throw hang_error(os.str());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// ---- virtual ranks: every rank's buffer is its own allocation on the current device --------

template <typename T, int M = 8>
inline pgl<T, M> alloc_virtual_pgl(int world, size_t count) {
  if (world < 1 || world > M) throw std::invalid_argument("alloc_virtual_pgl: world out of range");
  T* ptrs[M] = {};
  for (int r = 0; r < world; ++r) {
    void* p = nullptr;
    PK_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T) > 0 ? count * sizeof(T) : 1));
    ptrs[r] = static_cast<T*>(p);
  }
  return make_pgl<T, M>(ptrs, world, 0, count);
}

template <typename T, int M>
inline void free_virtual_pgl(pgl<T, M>& g) {
  for (int r = 0; r < g.world; ++r) {
    if (g.ptr[r]) cudaFree(const_cast<std::remove_const_t<T>*>(g.ptr[r]));
    g.ptr[r] = nullptr;
  }
}

template <int M = 8>
inline flags<M> alloc_virtual_flags(int world, int num_flags, error_record* err,
                                    long long timeout_cycles = PK_DEFAULT_TIMEOUT_CYCLES) {
  pgl<unsigned int, M> c = alloc_virtual_pgl<unsigned int, M>(world, static_cast<size_t>(num_flags));
  flags<M> f = make_flags<M>(c.ptr, world, 0, num_flags, err, timeout_cycles);
  for (int r = 0; r < world; ++r)
    PK_CUDA_CHECK(cudaMemset(f.ctr.ptr[r], 0, sizeof(unsigned int) * num_flags));
  return f;
}

template <int M>
inline void zero_flags(const flags<M>& f, cudaStream_t s = nullptr) {
  for (int r = 0; r < f.world(); ++r)
    PK_CUDA_CHECK(cudaMemsetAsync(f.ctr.ptr[r], 0, sizeof(unsigned int) * f.num_flags, s));
}

template <int M>
inline void free_virtual_flags(flags<M>& f) {
  free_virtual_pgl(f.ctr);
}

// ---- 2-D tensor maps ---------------------------------------------------------------------
// A map over a row-major rows x cols matrix of T whose rows start `pitch` elements apart, cut
// into box_rows x box_cols boxes; tile coordinates are (c0 = column, c1 = row), in elements.
//
// Encoding rules (CUDA driver API, cuTensorMapEncodeTiled), checked here: the base address is
// 16-byte aligned; globalStrides[0] = pitch * sizeof(T) is a multiple of 16 bytes (below 2^40),
// so a matrix whose row width is not a multiple of 16 bytes is only encodable with a padded
// pitch (the driver explicitly allows globalStrides[0] = globalDim[0] * elemsize + padding);
// boxDim[0] * sizeof(T) is a multiple of 16 bytes; every box dimension is in 1..256; every
// global dimension in 1..2^32.
//
// Store footprint. Loads fill the out-of-bounds part of a box with zeros (OOB_FILL_NONE), and
// the PTX ISA says tensor stores do not write out-of-bounds elements. Rows past the bottom edge
// and whole 16-byte chunks past the right edge are indeed not written, but the copy engine
// writes global memory in whole 16-byte chunks: when cols * sizeof(T) is not a multiple of 16,
// a store of a box that crosses the right edge also writes columns [cols, tma_store_cols(cols))
// of every row it covers, with what the shared-memory tile holds there (zeros when the tile
// came from a tensor load). Measured on an H200 (test_tensor_map): 100 x 70 and
// 1000 x 333 float matrices lost exactly rows x 2 and rows x 3 such elements to 0, nothing
// beyond the 16-byte boundary. Triton documents the same limitation for its descriptor stores
// (triton-lang/triton#11583, #11893). Reduce-adds of a zero-filled tile add 0 there, so the
// test cannot tell whether they write the chunk too; assume they do. The columns lie inside
// the padded pitch, so the next row is never touched, but they are scratch: keep no data there,
// and never use a column slice of a wider matrix with a ragged width as a store destination
// (its neighbouring columns up to the 16-byte boundary would be overwritten).
template <typename T>
constexpr size_t tma_store_cols(size_t cols) {
  static_assert(16 % sizeof(T) == 0, "element size must divide 16 bytes");
  return (cols * sizeof(T) + 15) / 16 * (16 / sizeof(T));
}

namespace detail {
template <typename T>
struct tensor_map_dtype;
template <>
struct tensor_map_dtype<float> {
  static constexpr CUtensorMapDataType value = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
};
template <>
struct tensor_map_dtype<__nv_bfloat16> {
  static constexpr CUtensorMapDataType value = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
};

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    PK_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw cuda_error("the driver does not export cuTensorMapEncodeTiled (version 12000)");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// cuTensorMapEncodeTiled of a 2-D map (element strides 1, no interleave), or the map this
// thread encoded before from exactly these arguments (pk/tensor_map_cache.cuh: a map is a pure
// function of them). Only maps the driver accepted are stored. Built with
// -DPK_NO_TENSOR_MAP_CACHE every call encodes (the host-cost comparison of the device session).
inline CUresult encode_2d_cached(CUtensorMap* map, CUtensorMapDataType dtype, const void* base,
                                 const cuuint64_t dims[2], cuuint64_t stride,
                                 const cuuint32_t box[2], CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
#ifndef PK_NO_TENSOR_MAP_CACHE
  static thread_local tensor_map_cache<CUtensorMap> cache;
  tensor_map_key k;
  k.base = base;
  k.dtype = static_cast<int>(dtype);
  k.dims[0] = dims[0];
  k.dims[1] = dims[1];
  k.stride = stride;
  k.box[0] = box[0];
  k.box[1] = box[1];
  k.swizzle = static_cast<int>(swizzle);
  k.l2 = static_cast<int>(l2);
  k.oob = static_cast<int>(oob);
  if (const CUtensorMap* hit = cache.find(k)) {
    *map = *hit;
    return CUDA_SUCCESS;
  }
#endif
  const cuuint64_t strides[1] = {stride};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(map, dtype, 2, const_cast<void*>(base), dims, strides,
                                          box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          swizzle, l2, oob);
#ifndef PK_NO_TENSOR_MAP_CACHE
  if (r == CUDA_SUCCESS) cache.put(k, *map);
#endif
  return r;
}
}  // namespace detail

// Throws std::invalid_argument naming the broken rule, or cuda_error if the driver refuses.
template <typename T>
inline CUtensorMap make_tile_map_2d(T* base, size_t rows, size_t cols, size_t pitch,
                                    unsigned box_rows, unsigned box_cols) {
  constexpr size_t E = sizeof(T);
  std::ostringstream why;
  if (base == nullptr)
    why << "null base address";
  else if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    why << "base address is not 16-byte aligned";
  else if (rows == 0 || cols == 0 || rows > (1ull << 32) || cols > (1ull << 32))
    why << "dimensions " << rows << " x " << cols << " are not in 1..2^32";
  else if (pitch < cols)
    why << "row pitch of " << pitch << " elements is below the width of " << cols;
  else if ((pitch * E) % 16 != 0)
    why << "row pitch of " << pitch * E << " bytes is not a multiple of 16 (pad each row of "
        << cols << " elements to " << tma_store_cols<T>(cols) << ")";
  else if (pitch * E >= (1ull << 40))
    why << "row pitch of " << pitch * E << " bytes is not below 2^40";
  else if (box_rows == 0 || box_cols == 0 || box_rows > 256 || box_cols > 256)
    why << "box " << box_rows << " x " << box_cols << " has a dimension outside 1..256";
  else if ((box_cols * E) % 16 != 0)
    why << "box width of " << box_cols * E << " bytes is not a multiple of 16";
  if (!why.str().empty()) throw std::invalid_argument("make_tile_map_2d: " + why.str());

  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const CUresult r = detail::encode_2d_cached(
      &m, detail::tensor_map_dtype<T>::value, static_cast<void*>(base), dims,
      static_cast<cuuint64_t>(pitch * E), box, CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << "cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(r) << " for "
       << rows << " x " << cols << " (pitch " << pitch << ", box " << box_rows << " x "
       << box_cols << ")";
    throw cuda_error(os.str());
  }
  return m;
}

}  // namespace pk
