// two_shot_gap.cu -- why is the generated two-shot all-reduce by TMA 1.2-1.4 us slower than
// block_moves_cross's TMA sum of the same shape?
//
// Why: run 22 (H200, 2026-12-03) timed the crossed sum (8 groups, part g of 8 sources summed
// into part g of 8 destinations, pkc::tma_reduce) at 5.95 us (parts of 512 B) and 6.14 us
// (8 KiB) behind a kernel's 256 MiB write, and the generated two-shot by TMA of the same
// buffers (4 and 64 KiB at w8) at 7.2-7.55 us from C++ (harness_gap.cu). Same routine, same
// launch constants, no stack in either. What differs: the kernel around the routine (pkc::run,
// the globals), the peers' order (the generated kernel visits them staggered: r, r+1, ...), how
// the pointer sets are filled (add() at run-time slots vs compile-time slots), the grid (16 or
// 4 blocks a rank vs 8) and the buffers' places (the harness allocates each 4 KiB buffer on its
// own, sub-allocated next to each other; block_moves 64 MiB each).
//
// Each variant below changes one of these; all run in one program on the same buffers, timed
// as harness_gap times (events around the launch alone, behind a kernel writing 256 MiB, 100
// calls, median). Kernels (`kernel` key):
//   golden       the generated kernel itself (tests/codegen/golden/all-reduce-two-shot-tma.cu)
//   gen          the same phase (pkc::all_reduce_two_shot::phase) in this program's kernel
//   gen_seq      gen with the peers in order 0, 1, ... (kStaggered = false)
//   move_rt      the crossed sum written here: pointer sets filled by add() at run-time slots,
//                peers in order, chunk_of / block_piece as the two-shot cuts
//   move_ct      move_rt with the pointer sets filled at compile-time slots (as block_moves)
//   reg_gen, reg_gen_seq, reg_move_ct   gen, gen_seq and move_ct by registers (512 threads,
//                8 sources at once), since run 30
//   one_shot, reg_one_shot   the one-shot's phase (pkc::all_reduce_one_shot) by TMA and by
//                registers on the same buffers, since run 32
// Worlds 2, 4 and 8 (since run 32; 8 before), 4 KiB, 64 KiB and 1 MiB, the suite's blocks per
// rank (16 / 33 / 66 at w2, 8 / 16 / 33 at w4, 4 / 8 / 16 at w8).
// Layouts (`layout`): "packed" (every rank's input and output a cudaMalloc of its own size, as
// harness_gap and the suite's torch buffers) and "spread" (64 MiB apart, as block_moves).
// With --stamps each block of the gen and move_ct kernels also records %globaltimer at its
// start, after its barriers are initialised and after its phase, and the program prints the
// median block's (phase, start skew, whole span) per case.
//
// Result (run 25, H200, 2026-12-03; validation/data/h200-two-shot-gap-2026-12-03-run25-*.jsonl,
// docs/VALIDATION.md): before the change the staggered order's `%` cost 0.3 us of the phase,
// add()'s selects 0.35 us and the generated kernel around the phase 0.2-0.3 us (ptxas held it
// below the registers it needed); with the generated kernels declared one block an SM, the
// subtraction in pkc::peer and compile-time fills, the generated kernel runs as fast as
// move_ct (6.21 us at 4 KiB, 6.50-6.56 us at 64 KiB, fastest calls).
//
// Run 32 (H200, 2026-12-03; validation/data/h200-two-shot-gap-2026-12-03-run32.jsonl,
// docs/VALIDATION.md "runs 32-33"): by registers the generated phase matches the crossed sum at
// every world (w4 4 KiB 5.70 / 5.70 us) and runs 0.3-0.7 us slower than the one-shot's phase
// at 4-64 KiB; by TMA the same code in different binaries shares its fastest call but not
// its median (two modes behind the write).
//
// Check: every rank's output against a host reference (fp32 sum of the world inputs, in any
// order, within 1 bf16 ulp of the rounded sum).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels -I kernels/include \
//        -o two_shot_gap validation/experiments/two_shot_gap.cu
//   ./two_shot_gap [--stamps]      (JSON lines on stdout)
#include <cmath>

#include "../../tests/codegen/golden/all-reduce-two-shot-tma.cu"
#include "../collective_lib.h"
#include "../microbench/common.cuh"
#include "pk/host.cuh"

using bf16 = __nv_bfloat16;
using G = globals<bf16>;

struct config_seq : config {
  static constexpr bool kStaggered = false;
};
// The register mechanism's launch constants (512 threads, no stages), for the reg_* kernels:
// the two-shot by registers at w8 64 KiB ran 0.7 us over the model in run 28.
struct config_reg : config {
  static constexpr pkc::mech kMech = pkc::mech::reg;
  static constexpr int kThreads = 512;
  static constexpr int kStages = 1;
  static constexpr size_t kSmemBytes = 0;
};
struct config_reg_seq : config_reg {
  static constexpr bool kStaggered = false;
};

enum class body { gen, move_rt, move_ct, one_shot };

// The crossed sum as the two-shot cuts it: rank r's block b sums its piece of chunk r.
template <class C, body B>
__device__ bool move_body(const G& g, const pkc::ctx& c, pkc::block_smem& sm) {
  const pkc::span ch = pkc::chunk_of<bf16>(g.count, c.world, c.rank);
  const pkc::span s = pkc::block_piece<bf16>(ch.size(), c);
  const size_t at = ch.lo + s.lo;
  pkc::cptrs<bf16> src{};
  pkc::ptrs<bf16> dst{};
  if constexpr (B == body::move_ct) {
#pragma unroll
    for (int k = 0; k < PKC_MAX_RANKS; ++k) {
      src.p[k] = g.in[k] + at;
      dst.p[k] = g.out[k] + at;
    }
    src.n = dst.n = c.world;
  } else {
    for (int k = 0; k < c.world; ++k) {
      src.add(g.in[k] + at);
      dst.add(g.out[k] + at);
    }
  }
  return pkc::reduce_to<C, PKC_MAX_RANKS>(g, c, dst, src, s.size(), sm);  // TMA or registers, 8 at once
}

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// stamps: nullptr, or 3 per block (start, barriers initialised, phase done).
template <class C, body B>
__global__ void __launch_bounds__(C::kThreads, 1) phase_kernel(const __grid_constant__ G g,
                                                            unsigned long long* stamps) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const unsigned long long t0 = stamps ? global_ns() : 0;
  const pkc::ctx c = pkc::make_ctx(g);
  pkc::block_smem sm{pk::tma::align_smem<128>(smem_raw), bars, 0u};
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) pk::tma::mbar_init(&bars[s], 1);
    pk::tma::mbar_init_fence();
  }
  __syncthreads();
  const unsigned long long t1 = stamps ? global_ns() : 0;
  if constexpr (B == body::gen) pkc::all_reduce_two_shot::phase<C>(g, c, 0, sm);
  else if constexpr (B == body::one_shot) pkc::all_reduce_one_shot::phase<C>(g, c, 0, sm);
  else move_body<C, B>(g, c, sm);
  if (stamps && threadIdx.x == 0) {
    unsigned long long* s = stamps + 3 * blockIdx.x;
    s[0] = t0;
    s[1] = t1;
    s[2] = global_ns();
  }
}

__global__ void fill_kernel(bf16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16_rn((hash_u32(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

static std::string check(const pkc_args& a, size_t n) {
  std::vector<std::vector<uint16_t>> in(a.world, std::vector<uint16_t>(n)), out(in);
  for (int q = 0; q < a.world; ++q) {
    CHECK(cudaMemcpy(in[q].data(), a.in[q], n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out[q].data(), a.out[q], n * 2, cudaMemcpyDeviceToHost));
  }
  auto f32 = [](uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float s = 0.f;
    for (int q = 0; q < a.world; ++q) s += f32(in[q][i]);
    for (int q = 0; q < a.world; ++q) {
      const float got = f32(out[q][i]);
      // 1 bf16 ulp of the sum (8 bits of mantissa) plus the fp32 order's slack
      if (std::fabs(got - s) > std::ldexp(1.0f, std::ilogb(std::fabs(s) + 1e-30f) - 7) + 1e-6f) ++bad;
    }
  }
  return bad ? "FAIL: " + std::to_string(bad) + " elements wrong" : "ok";
}

// The write before each call as flush_kernel, but launched with the TMA kernels' dynamic shared
// memory (--flush-smem): the SMs' shared-memory carve-out is then already what the TMA kernel
// after it needs.
__global__ void flush_smem_kernel(uint4* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4(v, v + 1, v + 2, v + 3);
}

template <class Go>
std::vector<double> times_behind_smem_write(cudaStream_t st, Go go, void* flush, size_t flush_bytes, int reps) {
  return times_after(st, [&](int r) {
    flush_smem_kernel<<<sm_count() * 4, 512, config::kSmemBytes, st>>>(static_cast<uint4*>(flush),
                                                                       flush_bytes / 16, r);
  }, go, reps);
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  const bool stamps = argc > 1 && std::string(argv[1]) == "--stamps";
  // --flush-smem: w2 and w8, 4 KiB and 1 MiB, the most blocks, packed, each case behind both
  // writes (the plain kernel's and flush_smem_kernel's), no stamps
  const bool smem_flush = argc > 1 && std::string(argv[1]) == "--flush-smem";
  CHECK(cudaFuncSetAttribute(flush_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)config::kSmemBytes));
  const size_t flush_bytes = 256ull << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned long long* d_stamps = nullptr;
  CHECK(cudaMalloc(&d_stamps, 3 * 8 * 66 * sizeof(unsigned long long)));

  using KernelFn = void (*)(const G, unsigned long long*);
  struct Variant {
    const char* name;
    KernelFn fn;
    int threads;
    size_t smem;
  };
  const Variant variants[] = {
      {"gen", phase_kernel<config, body::gen>, config::kThreads, config::kSmemBytes},
      {"gen_seq", phase_kernel<config_seq, body::gen>, config::kThreads, config::kSmemBytes},
      {"move_rt", phase_kernel<config_seq, body::move_rt>, config::kThreads, config::kSmemBytes},
      {"move_ct", phase_kernel<config_seq, body::move_ct>, config::kThreads, config::kSmemBytes},
      {"reg_gen", phase_kernel<config_reg, body::gen>, config_reg::kThreads, 0},
      {"reg_gen_seq", phase_kernel<config_reg_seq, body::gen>, config_reg::kThreads, 0},
      {"reg_move_ct", phase_kernel<config_reg_seq, body::move_ct>, config_reg::kThreads, 0},
      {"one_shot", phase_kernel<config, body::one_shot>, config::kThreads, config::kSmemBytes},
      {"reg_one_shot", phase_kernel<config_reg, body::one_shot>, config_reg::kThreads, 0},
  };
  for (const Variant& v : variants)
    if (v.smem > 48 * 1024)
      CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem));
  CHECK(cudaFuncSetAttribute(all_reduce_two_shot_tma<bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)config::kSmemBytes));
  int failures = 0;
  for (int world : smem_flush ? std::vector<int>{2, 8} : std::vector<int>{2, 4, 8})
  for (const char* layout : {"packed", "spread"})
    for (size_t bytes : {4 * KiB, 64 * KiB, 1 * MiB})
      for (int bpr : world == 2 ? std::vector<int>{16, 33, 66} : world == 4 ? std::vector<int>{8, 16, 33}
                                                                  : std::vector<int>{4, 8, 16}) {  // the suite's
        if (smem_flush && (std::string(layout) != "packed" || bytes == 64 * KiB || bpr != (world == 2 ? 66 : 16)))
          continue;
        const size_t n = bytes / 2;
        pkc_args a = virtual_args(world, PKC_BF16, n, bpr);
        std::vector<void*> allocs;
        auto alloc = [&](size_t b) {
          void* p = nullptr;
          CHECK(cudaMalloc(&p, b));
          allocs.push_back(p);
          return p;
        };
        const bool spread = std::string(layout) == "spread";
        for (int q = 0; q < world; ++q) {
          a.in[q] = alloc(spread ? 64 * MiB : bytes);
          a.out[q] = alloc(spread ? 64 * MiB : bytes);
          a.flags[q] = static_cast<unsigned int*>(alloc(4 * 64));
          fill_kernel<<<132, 512, 0, st>>>(static_cast<bf16*>(a.in[q]), n, 7u + q);
          CHECK(cudaMemsetAsync(a.flags[q], 0, 4 * 64, st));
        }
        a.num_flags = 64;
        a.err = alloc(64);
        CHECK(cudaMemsetAsync(a.err, 0, 64, st));
        a.stream = st;
        const G g = pkc::make_globals<G, config, algorithm>(&a);
        const dim3 grid(world * bpr);
        auto run_case = [&](const char* name, auto launch) {
          CHECK(cudaMemsetAsync(a.out[0], 0, bytes, st));
          for (int q = 1; q < world; ++q) CHECK(cudaMemsetAsync(a.out[q], 0, bytes, st));
          for (int w = 0; w < 3; ++w) launch(nullptr);
          CHECK(cudaStreamSynchronize(st));
          const std::string ok = check(a, n);
          failures += ok != "ok";
          if (smem_flush) {            // both writes, alternating blocks of 50 calls, 200 each
            std::vector<double> plain, carved;
            for (int round = 0; round < 4; ++round) {
              auto a1 = times_behind_write(st, [&] { launch(nullptr); }, flush, flush_bytes, 50, true);
              auto a2 = times_behind_smem_write(st, [&] { launch(nullptr); }, flush, flush_bytes, 50);
              plain.insert(plain.end(), a1.begin(), a1.end());
              carved.insert(carved.end(), a2.begin(), a2.end());
            }
            for (int f = 0; f < 2; ++f) {
              const std::vector<double>& t = f ? carved : plain;
              std::printf("{\"bench\": \"two_shot_gap\", \"kernel\": \"%s\", \"layout\": \"%s\", \"world\": %d, "
                          "\"bytes\": %zu, \"blocks_per_rank\": %d, \"flush\": \"%s\", \"time_s\": %.9g, "
                          "\"time_min_s\": %.9g, \"time_p90_s\": %.9g, \"calls\": %zu, \"check\": \"%s\"}\n",
                          name, layout, world, bytes, bpr, f ? "kernel_smem" : "kernel", quantile(t, 0.5),
                          quantile(t, 0.0), quantile(t, 0.9), t.size(), ok.c_str());
            }
            std::fflush(stdout);
            return;
          }
          const std::vector<double> t = times_behind_write(st, [&] { launch(nullptr); }, flush, flush_bytes, 100, true);
          std::printf("{\"bench\": \"two_shot_gap\", \"kernel\": \"%s\", \"layout\": \"%s\", \"world\": %d, "
                      "\"bytes\": %zu, \"blocks_per_rank\": %d, \"flush\": \"kernel\", \"time_s\": %.9g, "
                      "\"time_min_s\": %.9g, \"calls\": %zu, \"check\": \"%s\"",
                      name, layout, world, bytes, bpr, quantile(t, 0.5), quantile(t, 0.0), t.size(), ok.c_str());
          if (stamps && std::string(name) != "golden") {
            // 20 stamped calls, each behind the write; per call the median block's figures
            std::vector<double> phase, skew, span;
            for (int r = 0; r < 20; ++r) {
              flush_kernel<<<sm_count() * 4, 512, 0, st>>>(static_cast<uint4*>(flush), flush_bytes / 16, r);
              launch(d_stamps);
              std::vector<unsigned long long> h(3 * grid.x);
              CHECK(cudaMemcpyAsync(h.data(), d_stamps, h.size() * 8, cudaMemcpyDeviceToHost, st));
              CHECK(cudaStreamSynchronize(st));
              unsigned long long first = ~0ull, last = 0, last_start = 0;
              std::vector<double> ph;
              for (unsigned b = 0; b < grid.x; ++b) {
                first = std::min(first, h[3 * b]);
                last_start = std::max(last_start, h[3 * b]);
                last = std::max(last, h[3 * b + 2]);
                ph.push_back(double(h[3 * b + 2] - h[3 * b + 1]));
              }
              phase.push_back(quantile(ph, 1.0));
              skew.push_back(double(last_start - first));
              span.push_back(double(last - first));
            }
            std::printf(", \"stamps\": {\"slowest_phase_ns\": %.0f, \"start_skew_ns\": %.0f, \"span_ns\": %.0f}",
                        quantile(phase, 0.5), quantile(skew, 0.5), quantile(span, 0.5));
          }
          std::printf("}\n");
          std::fflush(stdout);
        };
        run_case("golden", [&](unsigned long long*) {
          all_reduce_two_shot_tma<bf16><<<grid, config::kThreads, config::kSmemBytes, st>>>(g);
          CHECK_LAUNCH();
        });
        for (const Variant& v : variants)
          run_case(v.name, [&](unsigned long long* s) {
            v.fn<<<grid, v.threads, v.smem, st>>>(g, s);
            CHECK_LAUNCH();
          });
        CHECK(cudaStreamSynchronize(st));
        const pk::error_record e = pk::read_error_record(static_cast<const pk::error_record*>(a.err));
        if (e.code != pk::PK_OK) {
          std::fprintf(stderr, "two_shot_gap: device error: %s\n", pk::describe(e).c_str());
          ++failures;
        }
        for (void* p : allocs) CHECK(cudaFree(p));
      }
  return failures ? 1 : 0;
}
