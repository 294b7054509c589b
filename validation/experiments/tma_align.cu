// tma_align.cu -- the rate per block of the generated collectives' data movement
// (pkc::tma_reduce, tma_copy, reg_reduce) by address alignment and by whether the number of
// sources is known to the compiler.
//
// Why: a ring reduce-scatter's 2->1 TMA sum moved 12.8 GB/s per block inside the collective
// but 7.4 GB/s per block in block_moves, on the same routine. Two suspects: alignment (block
// pieces of block_moves start 16 bytes off 128-byte lines) and code generation (a ring phase
// passes exactly two sources, so the compiler knew the count; block_moves passes a run-time
// count). Here every block's piece is a multiple of 128 bytes and every buffer starts `offset`
// bytes past a 128-byte boundary, and the 2->1 sum runs twice: sources counted at run time,
// and exactly two (fixed2, as a ring phase).
// Results (docs/VALIDATION.md): alignment changes nothing for reductions (it halves a TMA
// copy's rate per block at 16 mod 32); the known count was the whole gap, so tma_reduce now
// instantiates its body per source count (1.3-1.9x faster per block).
// Check: every destination against an fp32 sum of its sources rounded once (bit-exact).
// Output: one JSON line per point: mechanism, kind, sources, fixed2, blocks, offset, gbps.
// Usage: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include
//        -I kernels validation/experiments/tma_align.cu -o tma_align && ./tma_align
#include "../microbench/moves_check.cuh"

template <pkc::mech M>
using cfg = move_config<M>;

template <class C, bool reduce, bool two = false>
__global__ void __launch_bounds__(C::kThreads) move(const __grid_constant__ pkc::ptrs<bf16> dst,
                                                    const __grid_constant__ pkc::cptrs<bf16> src,
                                                    size_t n, pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const pkc::span s = pkc::piece(n, gridDim.x, blockIdx.x, 64);  // 64 bf16 = 128 bytes
  pkc::ptrs<bf16> d{};
  pkc::cptrs<bf16> q{};
  for (int k = 0; k < dst.n; ++k) d.add(dst.p[k] + s.lo);
  if (two) {  // exactly two sources, known to the compiler (as in a ring's sum phase)
    q.add(src.p[0] + s.lo);
    q.add(src.p[1] + s.lo);
  } else {
    for (int k = 0; k < src.n; ++k) q.add(src.p[k] + s.lo);
  }
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

template <class C>
void launch(const pkc::ptrs<bf16>& d, const pkc::cptrs<bf16>& s, size_t n, bool reduce, int blocks,
            pk::error_record* err, cudaStream_t st, bool fixed2) {
  if (reduce && s.n == 2 && fixed2) move<C, true, true><<<blocks, C::kThreads, C::kSmemBytes, st>>>(d, s, n, err);
  else if (reduce) move<C, true><<<blocks, C::kThreads, C::kSmemBytes, st>>>(d, s, n, err);
  else move<C, false><<<blocks, C::kThreads, C::kSmemBytes, st>>>(d, s, n, err);
  CHECK_LAUNCH();
}

int main() {
  emit_device_record("tma_align");
  using T = cfg<pkc::mech::tma>;
  using R = cfg<pkc::mech::reg>;
  CHECK(cudaFuncSetAttribute(move<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move<T, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::kSmemBytes));
  const size_t bytes = 64 * MiB, n = bytes / sizeof(bf16);
  std::vector<unsigned char*> base(10);
  for (auto& b : base) CHECK(cudaMalloc(&b, bytes + 4096));
  pk::error_record* err = new_error_record();
  unsigned long long* bad = nullptr;
  CHECK(cudaMalloc(&bad, sizeof(unsigned long long)));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  TimeCfg tc;
  tc.budget_s = 0.05;
  struct Shape { bool tma, reduce; int sources; bool fixed2; };
  const Shape shapes[] = {{true, true, 2, false}, {true, true, 2, true}, {true, true, 3, false}, {true, true, 4, false},
                          {true, true, 8, false}, {true, false, 1, false}, {false, true, 2, false}};
  for (int offset : {0}) {
    std::vector<bf16*> buf(10);
    for (int k = 0; k < 10; ++k) {
      buf[k] = reinterpret_cast<bf16*>(base[k] + 256 + offset);
      if (k < 8) fill_bf16_kernel<<<528, 512>>>(buf[k], n, 7 + k);
    }
    CHECK_LAUNCH();
    for (const Shape& sh : shapes) {
      pkc::ptrs<bf16> d{};
      pkc::cptrs<bf16> s{};
      d.add(buf[8]);
      for (int k = 0; k < sh.sources; ++k) s.add(buf[k]);
      auto go = [&](int blocks) {
        if (sh.tma) launch<T>(d, s, n, sh.reduce, blocks, err, st, sh.fixed2);
        else launch<R>(d, s, n, sh.reduce, blocks, err, st, sh.fixed2);
      };
      CHECK(cudaMemsetAsync(buf[8], 0xFF, bytes, st));
      go(132);
      CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), st));
      check_kernel<<<528, 512, 0, st>>>(buf[8], s, n, bad);
      unsigned long long h = 0;
      CHECK(cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, st));
      CHECK(cudaStreamSynchronize(st));
      for (int blocks : {1, 16, 64, 132}) {
        Timing t = time_op(st, [&](long long) { go(blocks); }, tc);
        JsonObj p;
        p.str("mechanism", sh.tma ? "tma" : "register").str("kind", sh.reduce ? "reduce" : "copy")
            .integer("sources", sh.sources).integer("fixed2", sh.fixed2).integer("blocks", blocks).integer("offset", offset)
            ;
        JsonObj j;
        j.str("bench", "tma_align").obj("params", p).num("bytes", (double)bytes);
        add_timing(j, t).num("gbps", bytes / t.med / 1e9).num("gbps_per_block", bytes / t.med / 1e9 / blocks)
            .str("check", h == 0 ? "ok" : "FAIL " + std::to_string(h));
        emit(j);
      }
    }
  }
  return exit_status(err, "tma_align");
}
