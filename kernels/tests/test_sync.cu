// test_sync.cu: signal / wait / barrier across virtual ranks (pk/sync.cuh) and the timeout
// path (deadline, error record, host message).
//
// Cases, for world sizes 2, 4, 8:
//   sync_epochs   100 barrier epochs over all blocks of all ranks. In epoch e every rank
//                 writes a pattern f(rank, e, i) into the NEXT rank's inbox (remote stores) and
//                 ~f into its own outbox (local stores), then barriers; then it checks its own
//                 inbox against f(prev, e, i) (data pushed by a peer) and the next rank's
//                 outbox against ~f(next, e, i) (data pulled from a peer). Buffers alternate
//                 by epoch parity, which is only race-free if barrier e+1 really waits for
//                 every reader of epoch e: any ordering bug shows up as a mismatch.
//   sync_timeout  the last rank takes part in two barriers and then leaves; the others must
//                 give up at epoch 3 after a short deadline instead of hanging, and the host
//                 must report exactly "rank R timed out waiting on flag W-1 from peer W-1:
//                 expected 3*B, saw 2*B" (B blocks per rank, R any other rank), in bounded
//                 wall-clock time.
#include <chrono>

#include "test_util.cuh"

namespace {

constexpr unsigned kBlocksPerRank = 4;
constexpr unsigned kThreads = 256;
constexpr unsigned kEpochs = 100;
constexpr size_t kWords = 4096 + 3;  // words per buffer half

using pk::pgl;

__device__ unsigned pattern(int rank, unsigned epoch, size_t i) {
  unsigned x = static_cast<unsigned>(i) * 0x9E3779B1u ^ (epoch * 0x85EBCA77u) ^ (rank * 0xC2B2AE3Du);
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  return x ^ (x >> 12);
}

__global__ void epochs_kernel(const __grid_constant__ pk::flags<> f,
                              const __grid_constant__ pgl<unsigned> inbox,
                              const __grid_constant__ pgl<unsigned> outbox, size_t words,
                              unsigned epochs, unsigned bpr, unsigned long long* bad,
                              unsigned* first_bad_epoch) {
  const int world = f.world();
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const int next = (rank + 1) % world;
  const int prev = (rank - 1 + world) % world;
  const pk::ldst::group g = pk::ldst::rank_group(bpr);
  for (unsigned e = 1; e <= epochs; ++e) {
    const size_t half = (e & 1u) * words;
    for (size_t i = g.tid; i < words; i += g.size) {
      const unsigned v = pattern(rank, e, i);
      inbox.ptr[next][half + i] = v;
      outbox.ptr[rank][half + i] = ~v;
    }
    if (!pk::barrier(f, rank, 0, e, bpr)) return;
    unsigned long long local_bad = 0;
    for (size_t i = g.tid; i < words; i += g.size) {
      local_bad += inbox.ptr[rank][half + i] != pattern(prev, e, i);
      local_bad += outbox.ptr[next][half + i] != ~pattern(next, e, i);
    }
    if (local_bad) {
      atomicAdd(bad, local_bad);
      atomicMin(first_bad_epoch, e);
    }
  }
}

// `victim` takes part in epochs 1 .. leave_after and then exits; everyone else tries epoch
// leave_after + 1 and must time out on the victim's counter.
__global__ void missing_rank_kernel(const __grid_constant__ pk::flags<> f, int victim,
                                    unsigned leave_after, unsigned bpr) {
  const int rank = static_cast<int>(blockIdx.x / bpr);
  for (unsigned e = 1; e <= leave_after + 1; ++e) {
    if (rank == victim && e > leave_after) return;
    if (!pk::barrier(f, rank, 0, e, bpr)) return;
  }
}

void case_epochs(pkt::report& rep, int world) {
  rep.run("sync_epochs", world, kWords * sizeof(unsigned), [&] {
    pk::error_record* err = pk::alloc_error_record();
    auto f = pk::alloc_virtual_flags(world, world, err, pkt::kTimeoutCycles);
    auto inbox = pk::alloc_virtual_pgl<unsigned>(world, 2 * kWords);
    auto outbox = pk::alloc_virtual_pgl<unsigned>(world, 2 * kWords);
    unsigned long long* bad_d = nullptr;
    unsigned* first_d = nullptr;
    PK_CUDA_CHECK(cudaMalloc(&bad_d, sizeof(unsigned long long)));
    PK_CUDA_CHECK(cudaMalloc(&first_d, sizeof(unsigned)));
    pkt::defer cleanup([&] {
      pk::free_virtual_flags(f);
      pk::free_virtual_pgl(inbox);
      pk::free_virtual_pgl(outbox);
      cudaFree(err);
      cudaFree(bad_d);
      cudaFree(first_d);
    });
    PK_CUDA_CHECK(cudaMemset(bad_d, 0, sizeof(unsigned long long)));
    PK_CUDA_CHECK(cudaMemset(first_d, 0xFF, sizeof(unsigned)));
    for (int r = 0; r < world; ++r) {
      PK_CUDA_CHECK(cudaMemset(inbox.ptr[r], 0, 2 * kWords * sizeof(unsigned)));
      PK_CUDA_CHECK(cudaMemset(outbox.ptr[r], 0, 2 * kWords * sizeof(unsigned)));
    }
    pk::launch_cooperative(epochs_kernel, dim3(world * kBlocksPerRank), dim3(kThreads), 0, nullptr,
                           f, inbox, outbox, kWords, kEpochs, kBlocksPerRank, bad_d, first_d);
    pkt::finish_launch(err);
    const unsigned long long bad = pkt::download(bad_d, 1)[0];
    const unsigned first = pkt::download(first_d, 1)[0];
    // Every counter must hold exactly kEpochs arrivals per block of its source rank.
    size_t wrong_counts = 0;
    for (int r = 0; r < world; ++r)
      for (unsigned c : pkt::download(f.ctr.ptr[r], world)) wrong_counts += c != kEpochs * kBlocksPerRank;
    const bool ok = bad == 0 && wrong_counts == 0;
    rep.emit("sync_epochs", world, kWords * sizeof(unsigned), ok, static_cast<double>(bad),
             ok ? "" : std::to_string(bad) + " stale words (first in epoch " + std::to_string(first) +
                           "), " + std::to_string(wrong_counts) + " counters off");
  });
}

void case_timeout(pkt::report& rep, int world) {
  rep.run("sync_timeout", world, 0, [&] {
    constexpr long long kShortTimeout = 20'000'000;  // ~10 ms at 2 GHz
    constexpr unsigned kLeaveAfter = 2;
    const int victim = world - 1;
    pk::error_record* err = pk::alloc_error_record();
    auto f = pk::alloc_virtual_flags(world, world, err, kShortTimeout);
    pkt::defer cleanup([&] {
      pk::free_virtual_flags(f);
      cudaFree(err);
    });
    const auto t0 = std::chrono::steady_clock::now();
    pk::launch_cooperative(missing_rank_kernel, dim3(world * kBlocksPerRank), dim3(kThreads), 0,
                           nullptr, f, victim, kLeaveAfter, kBlocksPerRank);
    PK_CUDA_CHECK(cudaGetLastError());
    pk::sync_with_deadline(nullptr, 30.0);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const pk::error_record rec = pk::read_error_record(err);
    std::string message;
    try {
      pk::throw_if_device_error(err);
    } catch (const pk::device_error& e) {
      message = e.what();
    }
    const unsigned expected = (kLeaveAfter + 1) * kBlocksPerRank;
    const unsigned seen = kLeaveAfter * kBlocksPerRank;
    const bool record_ok = rec.code == pk::PK_ERR_FLAG_TIMEOUT && rec.peer == victim &&
                           rec.flag_index == victim && rec.expected == expected &&
                           rec.seen == seen && rec.rank >= 0 && rec.rank < world &&
                           rec.rank != victim;
    const std::string want = "rank " + std::to_string(rec.rank) + " timed out waiting on flag " +
                             std::to_string(victim) + " from peer " + std::to_string(victim) +
                             ": expected " + std::to_string(expected) + ", saw " +
                             std::to_string(seen);
    const bool ok = record_ok && message == want && seconds < 10.0;
    std::fprintf(stderr, "sync_timeout world %d: host message \"%s\" after %.3f s\n", world,
                 message.c_str(), seconds);
    rep.emit("sync_timeout", world, 0, ok, ok ? 0.0 : 1.0,
             ok ? "" : "got \"" + message + "\" after " + std::to_string(seconds) + " s, want \"" + want + "\"");
  });
}

}  // namespace

int main() {
  pkt::init();
  pkt::report rep;
  for (int world : pkt::kWorlds) {
    case_epochs(rep, world);
    case_timeout(rep, world);
  }
  return rep.exit_code();
}
