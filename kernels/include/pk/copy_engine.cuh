// pk/copy_engine.cuh: host-issued copy-engine (DMA) transfers between ranks.
//
// Provides (host side)
//   * ce_copy(dst, src, bytes, stream): cudaMemcpyAsync with cudaMemcpyDefault; under unified
//     addressing the runtime finds the devices from the pointers, so this covers local, peer
//     (IPC-mapped or same-process) and host buffers;
//   * ce_copy_peer(dst, dst_dev, src, src_dev, bytes, stream): cudaMemcpyPeerAsync, for when
//     the devices are known (and the only form for contexts without peer access);
//   * ce_push(dst, offset, src, bytes, stream): copy this rank's buffer into every rank of a
//     PGL at the same byte offset (the "push" half of an all-gather), peers in ring order;
//   * enable_peer_access(ndev): enable every ordered pair of devices that can reach each
//     other, so peer copies go straight over NVLink/PCIe instead of through host memory;
//   * stream_wait(waiter, producer, ev): make `waiter` wait for `producer`'s work so far, with
//     no host synchronisation.
// Every call checks its CUDA status and throws pk::cuda_error on failure; zero-byte copies
// are skipped.
//
// Ordering: a copy-engine transfer is complete, and its data visible to later work, once its
// stream (or an event recorded after it) has completed; kernels on other streams must be
// ordered after it with stream_wait (or the host must synchronise). Kernels that read the data
// need no fence of their own. Copy engines take no SMs, which makes them the right tool for
// large moves that overlap compute; for small or latency-bound moves the launch overhead
// (microseconds per copy) dominates and the SM paths (pk/tma.cuh, pk/ldst.cuh) win.
#pragma once

#include "host.cuh"

namespace pk {

inline void ce_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  PK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

inline void ce_copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                         cudaStream_t stream) {
  if (bytes == 0) return;
  PK_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream));
}

// dst.ptr[p] + offset_bytes <- src for every rank p, starting with the next rank after dst.rank.
template <typename T, int M>
inline void ce_push(const pgl<T, M>& dst, size_t offset_bytes, const void* src, size_t bytes,
                    cudaStream_t stream) {
  for (int k = 1; k <= dst.world; ++k) {
    const int p = dst.ring(k);
    ce_copy(reinterpret_cast<unsigned char*>(dst.ptr[p]) + offset_bytes, src, bytes, stream);
  }
}

inline void enable_peer_access(int ndev) {
  int current = 0;
  PK_CUDA_CHECK(cudaGetDevice(&current));
  for (int a = 0; a < ndev; ++a) {
    PK_CUDA_CHECK(cudaSetDevice(a));
    for (int b = 0; b < ndev; ++b) {
      if (a == b) continue;
      int can = 0;
      PK_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // clear the non-sticky error
      } else {
        PK_CUDA_CHECK(e);
      }
    }
  }
  PK_CUDA_CHECK(cudaSetDevice(current));
}

inline void stream_wait(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t ev) {
  PK_CUDA_CHECK(cudaEventRecord(ev, producer));
  PK_CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
}

}  // namespace pk
