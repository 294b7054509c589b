// two_shot.cu -- what the two-shot all-reduce's data movement costs beside the one-shot's, on
// one GPU with eight virtual ranks, each move launched alone behind a 256 MiB write.
//
// Why: in runs 16 and 17 the generated two-shot all-reduce of 4 KiB - 1 MiB on 8 virtual ranks
// took 8.1-12 us where the one-shot of 4 KiB took 6.8 and the model said 6.1-7.9; block_moves'
// crossed shape (block_moves_cross, the two-shot's pattern with every source loaded at once)
// took 5.8 us at 4 KiB a part. The generated two-shot loads its sources four at a time
// (all_reduce.cuh: reduce_to<C, 4>), so its 8 sources cost two memory round trips a vector.
// Here, on 8 groups of B blocks ("ranks"), three register moves and two TMA moves:
//   one-shot  group r sums all 8 buffers into its own destination (8 -> 1, the reads shared);
//   two-shot  group r sums part r (1/8 of the buffer) of all 8 sources into part r of all 8
//             destinations, loading the sources 4 at a time (qb 4, as generated) or 8 (qb 8).
// Pieces and peer order as the collectives' (pkc::block_piece, staggered peers).
// Check: every destination against the fp32 sum of the sources rounded once (bit-exact).
// Output: one JSON line per point: mechanism, pattern, qb, blocks (per rank), bytes (the
// whole buffer), time_s (median of 30 launches, each alone behind a 256 MiB cudaMemsetAsync).
// Usage: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include
//        -I kernels validation/experiments/two_shot.cu -o two_shot && ./two_shot
#include <algorithm>

#include "../microbench/moves_check.cuh"

constexpr int kRanks = 8;

template <class C, int QB, bool two>
__global__ void __launch_bounds__(C::kThreads) move(const __grid_constant__ pkc::ptrs<bf16> dst,
                                                    const __grid_constant__ pkc::cptrs<bf16> src,
                                                    size_t n, int bpr, pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const int rank = static_cast<int>(blockIdx.x) / bpr, b = static_cast<int>(blockIdx.x) % bpr;
  pkc::ptrs<bf16> d{};
  pkc::cptrs<bf16> q{};
  size_t len = 0;
  if (two) {
    const pkc::span ch = pkc::piece(n, kRanks, rank, pkc::kVec<bf16>);
    const pkc::span s = pkc::block_piece(ch.size(), bpr, b, sizeof(bf16));
    for (int k = 0; k < kRanks; ++k) {
      const int p = (rank + k) % kRanks;
      q.add(src.p[p] + ch.lo + s.lo);
      d.add(dst.p[p] + ch.lo + s.lo);
    }
    len = s.size();
  } else {
    const pkc::span s = pkc::block_piece(n, bpr, b, sizeof(bf16));
    for (int k = 0; k < kRanks; ++k) q.add(src.p[(rank + k) % kRanks] + s.lo);
    d.add(dst.p[rank] + s.lo);
    len = s.size();
  }
  if constexpr (C::kMech == pkc::mech::tma) {
    pkc::block_smem sm = stages<C>(smem_raw, bars);
    const pk::spin_ctx spin = pk::spin_ctx::make(err, 1ll << 31);
    pkc::tma_reduce<C>(d, q, len, sm, spin, 0);
  } else {
    pkc::reg_reduce<QB>(d, q, len, pk::ldst::block_group());
  }
}

int main() {
  emit_device_record("two_shot");
  using T = move_config<pkc::mech::tma>;
  using R = move_config<pkc::mech::reg>;
  CHECK(cudaFuncSetAttribute(move<T, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move<T, 8, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  const size_t most = 1 * MiB;
  std::vector<bf16*> in(kRanks), out(kRanks);
  pkc::ptrs<bf16> d{};
  pkc::cptrs<bf16> s{};
  for (int k = 0; k < kRanks; ++k) {
    CHECK(cudaMalloc(&in[k], most));
    CHECK(cudaMalloc(&out[k], most));
    fill_bf16_kernel<<<132, 512>>>(in[k], most / sizeof(bf16), 31 + k);
    d.add(out[k]);
    s.add(in[k]);
  }
  CHECK_LAUNCH();
  pk::error_record* err = new_error_record();
  unsigned long long* bad = nullptr;
  CHECK(cudaMalloc(&bad, sizeof(unsigned long long)));
  const size_t flush_bytes = 256ull << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  struct Variant { const char* mech; const char* pattern; int qb; };
  const Variant variants[] = {{"register", "one-shot", 8}, {"register", "two-shot", 4},
                              {"register", "two-shot", 8}, {"tma", "one-shot", 8}, {"tma", "two-shot", 8}};
  for (const Variant& v : variants) {
    const bool tma = v.mech[0] == 't', two = v.pattern[1] == 'w';
    for (size_t bytes : {(size_t)4 * KiB, (size_t)64 * KiB, (size_t)1 * MiB}) {
      const size_t n = bytes / sizeof(bf16);
      for (int bpr : {4, 16}) {
        auto go = [&] {
          const int grid = bpr * kRanks;
          if (tma && two) move<T, 8, true><<<grid, T::kThreads, T::kSmemBytes, st>>>(d, s, n, bpr, err);
          else if (tma) move<T, 8, false><<<grid, T::kThreads, T::kSmemBytes, st>>>(d, s, n, bpr, err);
          else if (two && v.qb == 4) move<R, 4, true><<<grid, R::kThreads, 0, st>>>(d, s, n, bpr, err);
          else if (two) move<R, 8, true><<<grid, R::kThreads, 0, st>>>(d, s, n, bpr, err);
          else move<R, 8, false><<<grid, R::kThreads, 0, st>>>(d, s, n, bpr, err);
          CHECK_LAUNCH();
        };
        for (int k = 0; k < kRanks; ++k) CHECK(cudaMemsetAsync(out[k], 0xFF, bytes, st));
        go();
        CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), st));
        for (int k = 0; k < kRanks; ++k) check_kernel<<<132, 512, 0, st>>>(out[k], s, n, bad);
        unsigned long long h = 0;
        CHECK(cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, st));
        CHECK(cudaStreamSynchronize(st));
        const std::vector<double> times = times_behind_write(st, go, flush, flush_bytes, 30);
        JsonObj p;
        p.str("mechanism", v.mech).str("pattern", v.pattern).integer("qb", v.qb).integer("blocks", bpr)
            .integer("ranks", kRanks);
        JsonObj j;
        j.str("bench", "two_shot").obj("params", p).num("bytes", (double)bytes);
        add_samples(j, times).str("check", h == 0 ? "ok" : "FAIL " + std::to_string(h));
        emit(j);
      }
    }
  }
  return exit_status(err, "two_shot");
}
