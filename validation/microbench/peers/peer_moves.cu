// peer_moves.cu -- peer reads, writes and reductions between processes, for
// `pksim calibrate --ranks N` (validation/run/peers.py loads it with ctypes; one process
// per rank, peers' buffers mapped through CUDA IPC as validation/runtime/collectives.py
// maps them).
//
// pm_launch(mech, op, remote[], local[], npeers, bytes, blocks, msg, stream) moves
// `bytes` to or from each of `npeers` peers with `blocks` blocks (one per SM), dealt to
// the peers round robin (block b serves peer b % npeers):
//   op 0 write : local[p] -> remote[p]   (this rank stores into the peer's buffer)
//   op 1 read  : remote[p] -> local[p]   (this rank loads the peer's buffer)
//   op 2 reduce: fp32 sum. tma: local[p] store-added into remote[p]
//                (cp.reduce.async.bulk .add.f32, the peer's memory adds);
//                register: local[p] += remote[p] (the pull-reduce of the kernels)
// mech 0 tma     : one thread per block moves `msg`-byte messages global -> shared ->
//                  global (cp.async.bulk with an mbarrier per stage, two stages; a
//                  stage is reloaded once cp.async.bulk.wait_group.read says the store
//                  that read it is done), as validation/microbench/tma_copy.cu does
//                  within one GPU;
// mech 1 register: 512 threads per block, 16-byte loads and stores, grid-stride;
// mech 2 copy-engine: one cudaMemcpyAsync per peer on `stream` (blocks, msg unused;
//                  no reduction: the copy engines have none).
// bytes and msg are multiples of 16; msg <= 64 KiB. A TMA wait that passes its deadline
// sets a status word (pm_status) instead of hanging.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

constexpr int kStages = 2;
constexpr int kThreads = 512;
constexpr int kMaxPeers = 64;
constexpr long long kTimeoutCycles = 4000000000ll;  // ~2 s at 2 GHz per wait

__device__ unsigned g_status;
char g_error[512];

struct Peers {
  char* remote[kMaxPeers];
  char* local[kMaxPeers];
};

int fail(const char* what, cudaError_t e) {
  snprintf(g_error, sizeof g_error, "%s: %s", what, cudaGetErrorString(e));
  return 1;
}

int bad(const char* what) {
  snprintf(g_error, sizeof g_error, "%s", what);
  return 2;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.b32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_add_f32(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}

// The blocks of peer p: b = p, p + npeers, ...; this block's index among them and their count.
__device__ __forceinline__ void my_share(int npeers, int& peer, int& index, int& count) {
  peer = blockIdx.x % npeers;
  index = blockIdx.x / npeers;
  count = (gridDim.x - peer + npeers - 1) / npeers;
}

__global__ void tma_kernel(Peers peers, int npeers, int op, unsigned long long bytes,
                           uint32_t msg) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  if (threadIdx.x != 0) return;  // one issuing thread per block
  int peer, index, count;
  my_share(npeers, peer, index, count);
  const char* src = op == 1 ? peers.remote[peer] : peers.local[peer];
  char* dst = op == 1 ? peers.local[peer] : peers.remote[peer];
  const unsigned long long total = bytes / msg;  // whole messages of this peer's region
  const unsigned long long mine = total > (unsigned long long)index
                                      ? (total - index + count - 1) / count : 0;
  const uint32_t buf0 = smem_addr(smem);
  for (int s = 0; s < kStages; ++s) mbar_init(smem_addr(&bars[s]));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto offset = [&](unsigned long long k) { return (k * count + index) * msg; };
  auto issue_load = [&](unsigned long long k) {
    const uint32_t s = k % kStages, bar = smem_addr(&bars[s]);
    mbar_expect(bar, msg);
    bulk_load(buf0 + s * msg, src + offset(k), msg, bar);
  };
  for (unsigned long long k = 0; k + 1 < kStages && k < mine; ++k) issue_load(k);
  uint32_t parity = 0;
  for (unsigned long long k = 0; k < mine; ++k) {
    const uint32_t s = k % kStages, bar = smem_addr(&bars[s]);
    const long long deadline = clock64() + kTimeoutCycles;
    while (!mbar_try_wait(bar, (parity >> s) & 1u)) {
      if (clock64() > deadline) {
        atomicExch(&g_status, 1u);
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        return;
      }
    }
    parity ^= 1u << s;
    if (op == 2)
      bulk_add_f32(dst + offset(k), buf0 + s * msg, msg);
    else
      bulk_store(dst + offset(k), buf0 + s * msg, msg);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    const unsigned long long next = k + kStages - 1;  // goes into the buffer store k-1 read
    if (next < mine) {
      asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kStages - 1) : "memory");
      issue_load(next);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // stores complete
}

__global__ void __launch_bounds__(kThreads, 1)
    register_kernel(Peers peers, int npeers, int op, unsigned long long bytes) {
  int peer, index, count;
  my_share(npeers, peer, index, count);
  const unsigned long long n = bytes / 16;
  const unsigned long long stride = (unsigned long long)count * blockDim.x;
  unsigned long long i = (unsigned long long)index * blockDim.x + threadIdx.x;
  if (op == 0) {
    const int4* src = reinterpret_cast<const int4*>(peers.local[peer]);
    int4* dst = reinterpret_cast<int4*>(peers.remote[peer]);
    for (; i < n; i += stride) dst[i] = src[i];
  } else if (op == 1) {
    const int4* src = reinterpret_cast<const int4*>(peers.remote[peer]);
    int4* dst = reinterpret_cast<int4*>(peers.local[peer]);
    for (; i < n; i += stride) dst[i] = src[i];
  } else {
    const float4* src = reinterpret_cast<const float4*>(peers.remote[peer]);
    float4* dst = reinterpret_cast<float4*>(peers.local[peer]);
    for (; i < n; i += stride) {
      const float4 a = src[i];
      float4 b = dst[i];
      b.x += a.x; b.y += a.y; b.z += a.z; b.w += a.w;
      dst[i] = b;
    }
  }
}

__global__ void fill_kernel(float* x, unsigned long long n, float base, float step) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    x[i] = base + (float)(i % 61) * step;
}

__global__ void count_bad_kernel(const float* x, unsigned long long n, float base, float step,
                                 unsigned long long* bad) {
  unsigned long long mine = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    mine += x[i] != base + (float)(i % 61) * step;
  if (mine) atomicAdd(bad, mine);
}

}  // namespace

extern "C" {

int pm_abi_version() { return 1; }

const char* pm_error() { return g_error; }

int pm_sm_count(int* sms) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return fail("cudaGetDevice", e);
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
  return e == cudaSuccess ? 0 : fail("cudaDeviceGetAttribute", e);
}

// Buffers are this library's own cudaMalloc allocations, so that an IPC handle names
// exactly the buffer (no offset inside a caching allocator's block).
int pm_alloc(unsigned long long bytes, void** ptr) {
  cudaError_t e = cudaMalloc(ptr, bytes);
  return e == cudaSuccess ? 0 : fail("cudaMalloc", e);
}

int pm_free(void* ptr) {
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? 0 : fail("cudaFree", e);
}

// The IPC handle (64 bytes) of a buffer from pm_alloc.
int pm_ipc_handle(void* ptr, char* handle) {
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, ptr);
  if (e != cudaSuccess) return fail("cudaIpcGetMemHandle", e);
  memcpy(handle, &h, sizeof h);
  return 0;
}

int pm_ipc_open(const char* handle, void** base) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  cudaError_t e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
  return e == cudaSuccess ? 0 : fail("cudaIpcOpenMemHandle", e);
}

int pm_ipc_close(void* base) {
  cudaError_t e = cudaIpcCloseMemHandle(base);
  return e == cudaSuccess ? 0 : fail("cudaIpcCloseMemHandle", e);
}

// x[i] = base + (i % 61) * step (exact in fp32 for the values the driver uses).
int pm_fill(void* x, unsigned long long count, float base, float step, void* stream) {
  fill_kernel<<<64, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<float*>(x), count,
                                                                  base, step);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail("fill", e);
}

// How many x[i] differ from base + (i % 61) * step (synchronises the stream).
int pm_count_bad(const void* x, unsigned long long count, float base, float step, void* stream,
                 unsigned long long* bad) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  unsigned long long* d = nullptr;
  cudaError_t e = cudaMallocAsync(&d, sizeof *d, st);
  if (e != cudaSuccess) return fail("cudaMallocAsync", e);
  cudaMemsetAsync(d, 0, sizeof *d, st);
  count_bad_kernel<<<64, 256, 0, st>>>(static_cast<const float*>(x), count, base, step, d);
  cudaMemcpyAsync(bad, d, sizeof *d, cudaMemcpyDeviceToHost, st);
  cudaFreeAsync(d, st);
  e = cudaStreamSynchronize(st);
  return e == cudaSuccess ? 0 : fail("count_bad", e);
}

int pm_status(unsigned* status) {
  cudaError_t e = cudaMemcpyFromSymbol(status, g_status, sizeof(unsigned));
  return e == cudaSuccess ? 0 : fail("cudaMemcpyFromSymbol", e);
}

int pm_launch(int mech, int op, void** remote, void** local, int npeers,
              unsigned long long bytes, int blocks, unsigned msg, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (npeers < 1 || npeers > kMaxPeers) return bad("npeers outside 1..64");
  if (op < 0 || op > 2) return bad("op is not 0 (write), 1 (read) or 2 (reduce)");
  if (bytes % 16) return bad("bytes is not a multiple of 16");
  if (mech == 2) {
    if (op == 2) return bad("the copy engines have no reduction");
    for (int p = 0; p < npeers; ++p) {
      void* dst = op == 1 ? local[p] : remote[p];
      const void* src = op == 1 ? remote[p] : local[p];
      cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st);
      if (e != cudaSuccess) return fail("cudaMemcpyAsync", e);
    }
    return 0;
  }
  if (blocks < npeers) return bad("fewer blocks than peers");
  Peers peers;
  for (int p = 0; p < npeers; ++p) {
    peers.remote[p] = static_cast<char*>(remote[p]);
    peers.local[p] = static_cast<char*>(local[p]);
  }
  if (mech == 0) {
    if (msg < 16 || msg % 16 || msg > 64 * 1024) return bad("msg outside 16..65536 or not a multiple of 16");
    if (bytes % msg) return bad("bytes is not a whole number of messages");
    static bool attr = false;
    if (!attr) {
      cudaError_t e = cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kStages * 64 * 1024);
      if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
      attr = true;
    }
    tma_kernel<<<blocks, 32, kStages * msg, st>>>(peers, npeers, op, bytes, msg);
  } else if (mech == 1) {
    register_kernel<<<blocks, kThreads, 0, st>>>(peers, npeers, op, bytes);
  } else {
    return bad("mech is not 0 (tma), 1 (register) or 2 (copy-engine)");
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail("kernel launch", e);
}

}  // extern "C"
