// test_ce.cu: copy-engine transfers between virtual ranks (pk/copy_engine.cuh).
//
// Cases, for world sizes 2, 4, 8 and several sizes (odd ones included):
//   ce_allgather  every rank pushes its buffer into slot `rank` of every rank on its OWN
//                 stream (so the world's copies run concurrently): even ranks with ce_push
//                 (ce_copy: cudaMemcpyAsync, cudaMemcpyDefault), odd ranks with ce_copy_peer
//                 (cudaMemcpyPeerAsync).
//                 All streams are synchronised with a wall-clock deadline, then the host checks
//                 every slot and the guard bytes after the last slot.
//   ce_ordered    a copy on one stream, then a kernel on another stream that compares the
//                 destination with the source, ordered only by stream_wait (an event): the
//                 kernel must see every byte.
#include "test_util.cuh"

namespace {

__global__ void compare_kernel(const unsigned char* a, const unsigned char* b, size_t bytes,
                               unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    bad += a[i] != b[i];
  if (bad) atomicAdd(mismatches, bad);
}

void case_allgather(pkt::report& rep, int world, size_t bytes, uint64_t seed) {
  rep.run("ce_allgather", world, bytes, [&] {
    constexpr size_t kGuard = 64;
    const size_t dst_bytes = world * bytes + kGuard;
    int device = 0;
    PK_CUDA_CHECK(cudaGetDevice(&device));
    auto dst = pk::alloc_virtual_pgl<unsigned char>(world, dst_bytes);
    auto src = pk::alloc_virtual_pgl<unsigned char>(world, bytes);
    std::vector<cudaStream_t> streams(world, nullptr);
    pkt::defer cleanup([&] {
      for (cudaStream_t s : streams)
        if (s) cudaStreamDestroy(s);
      pk::free_virtual_pgl(dst);
      pk::free_virtual_pgl(src);
    });
    for (auto& s : streams) PK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const auto host = pkt::random_sources(src, dst, seed);
    PK_CUDA_CHECK(cudaDeviceSynchronize());  // uploads and memsets before the non-blocking streams

    for (int r = 0; r < world; ++r) {
      if (r % 2 == 0) {  // ce_push: ce_copy into every rank, ring order
        pk::ce_push(dst.with_rank(r), r * bytes, src.ptr[r], bytes, streams[r]);
      } else {  // the explicit-device form
        for (int k = 1; k <= world; ++k) {
          const int p = (r + k) % world;
          pk::ce_copy_peer(dst.ptr[p] + r * bytes, device, src.ptr[r], device, bytes, streams[r]);
        }
      }
    }
    for (cudaStream_t s : streams) pk::sync_with_deadline(s, pkt::kHostDeadlineSeconds);

    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], dst_bytes);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < bytes; ++i) bad += d[r * bytes + i] != host[r][i];
      for (size_t i = world * bytes; i < dst_bytes; ++i) bad += d[i] != 0xCD;
    }
    rep.emit("ce_allgather", world, bytes, bad == 0, static_cast<double>(bad),
             bad ? std::to_string(bad) + " bytes differ" : "");
  });
}

void case_ordered(pkt::report& rep, int world, size_t bytes, uint64_t seed) {
  rep.run("ce_ordered", world, bytes, [&] {
    auto buf = pk::alloc_virtual_pgl<unsigned char>(world, bytes);
    cudaStream_t copy_stream = nullptr, compute_stream = nullptr;
    cudaEvent_t ev = nullptr;
    unsigned long long* bad_d = nullptr;
    pkt::defer cleanup([&] {
      if (copy_stream) cudaStreamDestroy(copy_stream);
      if (compute_stream) cudaStreamDestroy(compute_stream);
      if (ev) cudaEventDestroy(ev);
      cudaFree(bad_d);
      pk::free_virtual_pgl(buf);
    });
    PK_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    PK_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));
    PK_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    PK_CUDA_CHECK(cudaMalloc(&bad_d, sizeof(unsigned long long)));
    PK_CUDA_CHECK(cudaMemset(bad_d, 0, sizeof(unsigned long long)));
    pkt::rng g(seed);
    std::vector<unsigned char> host(bytes);
    for (auto& b : host) b = static_cast<unsigned char>(g.u32());
    pkt::upload(buf.ptr[0], host);
    for (int r = 1; r < world; ++r) PK_CUDA_CHECK(cudaMemset(buf.ptr[r], 0, bytes));
    PK_CUDA_CHECK(cudaDeviceSynchronize());

    // Rank 0's buffer travels along the ring 0 -> 1 -> ... -> world-1, one copy per hop on the
    // copy stream; the compute stream waits on an event and then checks the last hop.
    for (int r = 1; r < world; ++r) pk::ce_copy(buf.ptr[r], buf.ptr[r - 1], bytes, copy_stream);
    pk::stream_wait(compute_stream, copy_stream, ev);
    compare_kernel<<<64, 256, 0, compute_stream>>>(buf.ptr[world - 1], buf.ptr[0], bytes, bad_d);
    PK_CUDA_CHECK(cudaGetLastError());
    pk::sync_with_deadline(compute_stream, pkt::kHostDeadlineSeconds);
    pk::sync_with_deadline(copy_stream, pkt::kHostDeadlineSeconds);
    const unsigned long long bad = pkt::download(bad_d, 1)[0];
    rep.emit("ce_ordered", world, bytes, bad == 0, static_cast<double>(bad),
             bad ? std::to_string(bad) + " bytes not yet copied when the kernel ran" : "");
  });
}

}  // namespace

int main() {
  pkt::init();
  int ndev = 0;
  PK_CUDA_CHECK(cudaGetDeviceCount(&ndev));
  pk::enable_peer_access(ndev);
  pkt::report rep;
  const size_t sizes[] = {1, 4097, (1u << 20) + 3, (4u << 20) + 1};
  uint64_t seed = 300;
  for (int world : pkt::kWorlds)
    for (size_t b : sizes) {
      case_allgather(rep, world, b, seed++);
      case_ordered(rep, world, b, seed++);
    }
  return rep.exit_code();
}
