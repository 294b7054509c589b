// piece_align.cu -- the rate of the generated collectives' register and TMA moves by how the
// blocks' pieces are aligned.
//
// Why: run 12's block_moves_own showed register copies on 66 or 132 blocks of a rank 12-24 %
// slower than on 16 or 32 (1 GiB: 1514 GB/s at 2 x 66 blocks, 1987 at 8 x 16), while TMA
// copies, which deal aligned 32 KiB chunks, did not. pkc::piece cuts a range into pieces
// rounded to 16 bytes, so with 33, 66 or 132 blocks every piece but the first starts off a
// 128-byte line; with 8, 16 or 32 blocks of a power-of-two payload none does. Here the same
// moves run with pieces rounded to 16 B, 128 B and 4 KiB.
// Check: the destination against an fp32 sum of the sources rounded once (bit-exact), at
// every alignment on 132 blocks.
// Output: one JSON line per point: mechanism, kind, sources, blocks, align_bytes, gbps.
// Usage: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include
//        -I kernels validation/experiments/piece_align.cu -o piece_align && ./piece_align
#include "../microbench/moves_check.cuh"

template <pkc::mech M>
using cfg = move_config<M>;

template <class C, bool reduce>
__global__ void __launch_bounds__(C::kThreads) move(const __grid_constant__ pkc::ptrs<bf16> dst,
                                                    const __grid_constant__ pkc::cptrs<bf16> src,
                                                    size_t n, size_t align, pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const pkc::span s = pkc::piece(n, gridDim.x, blockIdx.x, align);
  pkc::ptrs<bf16> d{};
  pkc::cptrs<bf16> q{};
  d.add(dst.p[0] + s.lo);
  q.add(src.p[0] + s.lo);
  if (reduce) q.add(src.p[1] + s.lo);
  if constexpr (C::kMech == pkc::mech::tma) {
    pkc::block_smem sm = stages<C>(smem_raw, bars);
    const pk::spin_ctx spin = pk::spin_ctx::make(err, 1ll << 31);
    if constexpr (reduce) pkc::tma_reduce<C>(d, q, s.size(), sm, spin, 0);
    else pkc::tma_copy<C>(d, q.p[0], s.size(), sm, spin, 0);
  } else {
    if constexpr (reduce) pkc::reg_reduce(d, q, s.size(), pk::ldst::block_group());
    else pkc::reg_copy(d, q.p[0], s.size(), pk::ldst::block_group());
  }
}

int main() {
  emit_device_record("piece_align");
  using T = cfg<pkc::mech::tma>;
  using R = cfg<pkc::mech::reg>;
  CHECK(cudaFuncSetAttribute(move<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  const size_t bytes = 256 * MiB, n = bytes / sizeof(bf16);
  std::vector<bf16*> buf(3);
  for (int k = 0; k < 3; ++k) {
    CHECK(cudaMalloc(&buf[k], bytes));
    if (k < 2) fill_bf16_kernel<<<528, 512>>>(buf[k], n, 11 + k);
  }
  CHECK_LAUNCH();
  pk::error_record* err = new_error_record();
  unsigned long long* bad = nullptr;
  CHECK(cudaMalloc(&bad, sizeof(unsigned long long)));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  TimeCfg tc;
  tc.budget_s = 0.04;
  struct Shape { bool tma, reduce; };
  for (const Shape sh : {Shape{false, false}, Shape{false, true}, Shape{true, true}, Shape{true, false}}) {
    pkc::ptrs<bf16> d{};
    pkc::cptrs<bf16> s{};
    d.add(buf[2]);
    s.add(buf[0]);
    if (sh.reduce) s.add(buf[1]);
    for (size_t align_bytes : {16, 128, 4096}) {
      const size_t align = align_bytes / sizeof(bf16);
      auto go = [&](int blocks) {
        if (sh.tma && sh.reduce) move<T, true><<<blocks, T::kThreads, T::kSmemBytes, st>>>(d, s, n, align, err);
        else if (sh.tma) move<T, false><<<blocks, T::kThreads, T::kSmemBytes, st>>>(d, s, n, align, err);
        else if (sh.reduce) move<R, true><<<blocks, R::kThreads, R::kSmemBytes, st>>>(d, s, n, align, err);
        else move<R, false><<<blocks, R::kThreads, R::kSmemBytes, st>>>(d, s, n, align, err);
        CHECK_LAUNCH();
      };
      CHECK(cudaMemsetAsync(buf[2], 0xFF, bytes, st));
      go(132);
      CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), st));
      check_kernel<<<528, 512, 0, st>>>(buf[2], s, n, bad);
      unsigned long long h = 0;
      CHECK(cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, st));
      CHECK(cudaStreamSynchronize(st));
      for (int blocks : {16, 32, 33, 64, 66, 128, 132}) {
        Timing t = time_op(st, [&](long long) { go(blocks); }, tc);
        JsonObj p;
        p.str("mechanism", sh.tma ? "tma" : "register").str("kind", sh.reduce ? "reduce" : "copy")
            .integer("sources", sh.reduce ? 2 : 1).integer("blocks", blocks)
            .integer("align_bytes", (long long)align_bytes);
        JsonObj j;
        j.str("bench", "piece_align").obj("params", p).num("bytes", (double)bytes);
        add_timing(j, t).num("gbps", bytes / t.med / 1e9).str("check", h == 0 ? "ok" : "FAIL " + std::to_string(h));
        emit(j);
      }
    }
  }
  return exit_status(err, "piece_align");
}
