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
//     the current device) and the matching free / zero helpers.
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

#include "pgl.cuh"

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

}  // namespace pk
