// test_tma_store.cu: TMA bulk copies between peers (pk/tma.cuh), their completion, and the
// signal that publishes them (pk/sync.cuh), on virtual ranks.
//
// Case tma_store, for world sizes 2, 4, 8 and several sizes (some not multiples of 16):
//   An all-gather in which rank r forwards the buffer of its neighbour o = r + 1: it pulls
//   o's data with bulk loads (peer global -> shared, mbarrier completion, two stages), and
//   pushes each stage to slot o of every rank with bulk stores (shared -> peer global).
//   The bytes % 16 tail goes through the register path. Then each block completes its writes
//   (wait_group 0 + proxy fence) and signals counter o on every rank. Each rank waits for
//   every slot's counter and compares the slot with the owner's source in the kernel (a
//   wrong ordering between data and signal shows up here), and the host compares all slots
//   and the guard bytes between slots afterwards.
#include "test_util.cuh"

namespace {

constexpr unsigned kStage = 16 * 1024;  // bytes per shared-memory stage
constexpr unsigned kStages = 2;
constexpr unsigned kThreads = 128;
constexpr unsigned kBlocksPerRank = 3;
constexpr size_t kSmemBytes = kStages * kStage + 128;

using pk::pgl;

__global__ void forward_kernel(const __grid_constant__ pgl<unsigned char> dst,
                               const __grid_constant__ pgl<unsigned char> src,
                               const __grid_constant__ pk::flags<> f, size_t bytes, size_t stride,
                               unsigned bpr, unsigned long long* mismatches) {
  extern __shared__ unsigned char smem_raw[];
  const pkt::stages st = pkt::init_stages<kStages>(smem_raw);

  const int world = dst.world;
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const unsigned lb = blockIdx.x % bpr;
  const int owner = (rank + 1) % world;  // whose data this rank forwards
  const unsigned char* from = src.ptr[owner];
  const size_t slot = static_cast<size_t>(owner) * stride;

  // Sources and slots are 16-byte aligned, so only the last bytes % 16 miss the bulk path.
  const pk::tma::bulk_split split = pk::tma::split_for_bulk(dst.ptr[0] + slot, from, bytes);
  int ok = 1;
  if (threadIdx.x == 0) {
    ok = pkt::forward_stages<kStage, kStages>(
        st, from, split.body, lb, bpr, f.spin, rank,
        [&](const unsigned char* buf, size_t off, unsigned len) {
          for (int k = 0; k < world; ++k) {
            const int p = (rank + k) % world;
            pk::tma::store_async(dst.ptr[p] + slot + off, buf, len);
          }
        });
  }
  if (split.tail != 0 && lb == bpr - 1) {
    for (int k = 0; k < world; ++k) {
      const int p = (rank + k) % world;
      pk::ldst::copy(dst.ptr[p] + slot + split.body, from + split.body, split.tail,
                     pk::ldst::block_group());
    }
  }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0)
    for (int k = 0; k < world; ++k) pk::signal(f, (rank + k) % world, owner, 1u);

  // Receive: slot s is complete once all bpr blocks of its forwarder have signalled.
  for (int s = 0; s < world; ++s) {
    int got = 1;
    if (threadIdx.x == 0) got = pk::wait(f, rank, s, bpr, (s - 1 + world) % world) ? 1 : 0;
    if (!__syncthreads_and(got)) return;
    const unsigned char* mine = dst.ptr[rank] + static_cast<size_t>(s) * stride;
    const unsigned char* ref = src.ptr[s];
    unsigned long long bad = 0;
    for (size_t i = lb * blockDim.x + threadIdx.x; i < bytes; i += bpr * blockDim.x)
      bad += mine[i] != ref[i];
    if (bad) atomicAdd(mismatches, bad);
  }
}

void case_store(pkt::report& rep, int world, size_t bytes, uint64_t seed) {
  rep.run("tma_store", world, bytes, [&] {
    const size_t stride = ((bytes + 15) & ~size_t(15)) + 16;  // >= 16 guard bytes per slot
    const size_t dst_bytes = world * stride;
    auto dst = pk::alloc_virtual_pgl<unsigned char>(world, dst_bytes);
    auto src = pk::alloc_virtual_pgl<unsigned char>(world, bytes);
    pk::error_record* err = pk::alloc_error_record();
    auto f = pk::alloc_virtual_flags(world, world, err, pkt::kTimeoutCycles);
    unsigned long long* mismatches = nullptr;
    PK_CUDA_CHECK(cudaMalloc(&mismatches, sizeof(unsigned long long)));
    pkt::defer cleanup([&] {
      pk::free_virtual_pgl(dst);
      pk::free_virtual_pgl(src);
      pk::free_virtual_flags(f);
      cudaFree(err);
      cudaFree(mismatches);
    });
    PK_CUDA_CHECK(cudaMemset(mismatches, 0, sizeof(unsigned long long)));
    const auto host = pkt::random_sources(src, dst, seed);
    pk::launch_cooperative(forward_kernel, dim3(world * kBlocksPerRank), dim3(kThreads), kSmemBytes,
                           nullptr, dst, src, f, bytes, stride, kBlocksPerRank, mismatches);
    pkt::finish_launch(err);

    const unsigned long long device_bad = pkt::download(mismatches, 1)[0];
    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], dst_bytes);
      for (int s = 0; s < world; ++s) {
        for (size_t i = 0; i < bytes; ++i) bad += d[s * stride + i] != host[s][i];
        for (size_t i = bytes; i < stride; ++i) bad += d[s * stride + i] != 0xCD;
      }
    }
    rep.emit_checked("tma_store", world, bytes, static_cast<double>(bad + device_bad), bad, device_bad,
                     "bytes differ at the end", "seen by the receivers after the signal");
  });
}

}  // namespace

int main() {
  pkt::init();
  pkt::report rep;
  const size_t sizes[] = {5, 16, 100, 4096 + 13, (256u << 10) + 7, (4u << 20) + 1};
  uint64_t seed = 100;
  for (int world : pkt::kWorlds)
    for (size_t b : sizes) case_store(rep, world, b, seed++);
  return rep.exit_code();
}
