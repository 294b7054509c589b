// gemm_store_add.cu -- our Hopper GEMM (kernels/gemm) with the intra-SM fused kernels' epilogue:
// each finished tile TMA-reduce-added into D outputs (pkf::store_add_all, kernels/fused/fused.cuh)
// instead of stored once, on one GPU, every SM computing.
//
// Why: the intra-SM gemm-rs / gemm-ar kernels ran 8-23 % over the model (
// docs/decisions/D34.md), which had their store-adds share only memory with the GEMM. This times the epilogue's own cost on a
// primitive: one GEMM, no ranks, no waits, the store-adds into D local M x N buffers (as a rank of
// gemm-ar stores into world outputs), beside the same GEMM storing once ("store") and storing
// plainly into D buffers ("store_many": TMA stores, no reduction), so that the reduction's share
// is told apart from the extra bytes'. The fused kernels built from this epilogue are judged
// against the model, never fitted to it.
// Sweep: M = N = 8192, K in {128, 1024, 2048} and M = N = K = 4096; epilogues store (D = 1),
// store_add (D = 1, 2, 4, 8), store_many (D = 2, 4, 8); 128 x 256 x 64 tiles, 4 stages, 2
// epilogue buffers (the fused suite's: codegen/fused.py TILES); persistent grid of one block an
// SM. Each launch alone behind a 256 MiB write (cold L2), median of the reps.
// Check (every configuration, before timing): with zeroed outputs, every element of every one of
// the D outputs equals the plain GEMM's output bit for bit (0 + x is exact in bf16).
// Keys: "bytes" = one output (M x N x 2); "traffic_bytes" = what the epilogue writes (D x bytes;
// a store-add also reads them); "flop" = 2 M N K.
// Usage: gemm_store_add [--quick]
#include <functional>

#include "moves_check.cuh"
#include "fused/fused.cuh"
#include "gemm/gemm_host.cuh"

using cfg = pk::gemm::config<128, 256, 64, 4, 2>;
constexpr int kMaxD = 8;

// D plain TMA stores of every staged sub-tile (store_epilogue into D maps).
struct store_many {
  struct params {
    CUtensorMap out[kMaxD];
    int d;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    for (int o = 0; o < p.d; ++o) pk::tma::store_tile_async(&p.out[o], s.col0, s.row0, smem);
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    for (int o = 0; o < p.d; ++o) pk::tma::prefetch_map(&p.out[o]);
  }
};

template <class Epi>
static pk::gemm::params<Epi> operands(const bf16* A, const bf16* B, int M, int N, int K, int sms) {
  pk::gemm::params<Epi> p{};
  if (pk::gemm::fill_operands<cfg>(p, A, B, M, N, K) != pk::gemm::OK) {
    std::fprintf(stderr, "gemm_store_add: operand tensor maps failed\n");
    std::exit(1);
  }
  p.sched = pk::gemm::make_raster(M, N, cfg::BM, cfg::BN, 0);
  p.first_block = 0;
  p.num_blocks = std::min(sms, static_cast<int>(p.sched.tiles()));
  return p;
}

static void out_map(CUtensorMap* m, bf16* base, int M, int N) {
  if (!pk::gemm::make_swizzled_map(m, base, M, N, cfg::WG_ROWS)) {
    std::fprintf(stderr, "gemm_store_add: output tensor map failed\n");
    std::exit(1);
  }
}

template <class Epi>
static void launch(const pk::gemm::params<Epi>& p, cudaStream_t st) {
  const int rc = pk::gemm::launch<cfg>(p, st);
  if (rc != 0) {
    std::fprintf(stderr, "gemm_store_add: launch failed: %s\n", pk::gemm::status_string(rc));
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("gemm_store_add");
  const int sms = sm_count();
  const size_t flush_bytes = 256 * MiB;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  struct shape {
    int m, n, k;
  };
  const std::vector<shape> shapes = quick ? std::vector<shape>{{4096, 4096, 1024}}
                                          : std::vector<shape>{{8192, 8192, 128}, {8192, 8192, 1024},
                                                               {8192, 8192, 2048}, {4096, 4096, 4096}};
  size_t max_a = 0, max_b = 0, max_c = 0;
  for (const shape& s : shapes) {
    max_a = std::max(max_a, static_cast<size_t>(s.m) * s.k);
    max_b = std::max(max_b, static_cast<size_t>(s.k) * s.n);
    max_c = std::max(max_c, static_cast<size_t>(s.m) * s.n);
  }
  bf16 *A, *B, *C;
  CHECK(cudaMalloc(&A, max_a * sizeof(bf16)));
  CHECK(cudaMalloc(&B, max_b * sizeof(bf16)));
  CHECK(cudaMalloc(&C, max_c * sizeof(bf16)));
  fill_bf16_kernel<<<sms * 4, 512>>>(A, max_a, 11);
  fill_bf16_kernel<<<sms * 4, 512>>>(B, max_b, 12);
  std::vector<bf16*> out(kMaxD);
  for (int d = 0; d < kMaxD; ++d) {
    CHECK(cudaMalloc(&out[d], max_c * sizeof(bf16)));
    fill_bf16_kernel<<<sms * 4, 512>>>(out[d], max_c, 20 + d);
  }
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CUtensorMap* map_tab = nullptr;   // store_add_all's device table of output maps
  CHECK(cudaMalloc(&map_tab, kMaxD * sizeof(CUtensorMap)));
  pk::error_record* err = new_error_record();
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int reps = quick ? 3 : 9;
  int failures = 0;
  struct variant {
    const char* epilogue;
    int d;
  };
  const std::vector<variant> variants = quick
      ? std::vector<variant>{{"store", 1}, {"store_add", 2}, {"store_many", 2}}
      : std::vector<variant>{{"store", 1},      {"store_add", 1},  {"store_add", 2},
                             {"store_add", 4},  {"store_add", 8},  {"store_many", 2},
                             {"store_many", 4}, {"store_many", 8}};
  for (const shape& s : shapes) {
    const size_t elems = static_cast<size_t>(s.m) * s.n;
    // The reference: the plain GEMM's output.
    auto plain = operands<pk::gemm::store_epilogue>(A, B, s.m, s.n, s.k, sms);
    out_map(&plain.epi.c_map, C, s.m, s.n);
    launch(plain, st);
    CHECK(cudaStreamSynchronize(st));
    for (const variant& v : variants) {
      std::function<void()> go;
      const std::string ep = v.epilogue;
      if (ep == "store") {
        go = [&, plain] { launch(plain, st); };
      } else if (ep == "store_add") {
        // the fused ABI v2: the outputs' maps in a device table (pkf::store_add_op::fill)
        auto p = operands<pkf::store_add_all>(A, B, s.m, s.n, s.k, sms);
        std::vector<CUtensorMap> maps(v.d);
        for (int o = 0; o < v.d; ++o) out_map(&maps[o], out[o], s.m, s.n);
        CHECK(cudaStreamSynchronize(st));   // no launch of the last variant still reads it
        CHECK(cudaMemcpy(map_tab, maps.data(), v.d * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
        CHECK(cudaDeviceSynchronize());     // written before a launch on the non-blocking stream
        p.epi.out = map_tab;
        p.epi.world = v.d;
        p.epi.rank = 0;
        go = [&, p] { launch(p, st); };
      } else {
        auto p = operands<store_many>(A, B, s.m, s.n, s.k, sms);
        for (int o = 0; o < v.d; ++o) out_map(&p.epi.out[o], out[o], s.m, s.n);
        p.epi.d = v.d;
        go = [&, p] { launch(p, st); };
      }
      std::string check = "ok";
      if (ep != "store") {
        for (int o = 0; o < v.d; ++o) CHECK(cudaMemsetAsync(out[o], 0, elems * sizeof(bf16), st));
        go();
        CHECK(cudaStreamSynchronize(st));
        check = run_check(err, [&](unsigned long long* bad) {
          pkc::cptrs<bf16> src{};
          src.add(C);
          for (int o = 0; o < v.d; ++o) check_kernel<<<sms * 4, 512>>>(out[o], src, elems, bad);
        });
      }
      std::vector<double> times;
      if (check == "ok") {
        go();
        times = times_behind_write(st, go, flush, flush_bytes, reps);
      }
      const double bytes = static_cast<double>(elems) * sizeof(bf16);
      JsonObj params;
      params.str("epilogue", ep).integer("dests", v.d).integer("m", s.m).integer("n", s.n)
          .integer("k", s.k).integer("bm", cfg::BM).integer("bn", cfg::BN).integer("bk", cfg::BK)
          .integer("blocks", plain.num_blocks).str("timing", "behind_write");
      JsonObj o;
      o.str("bench", "gemm_store_add").obj("params", params).num("bytes", bytes)
          .num("traffic_bytes", bytes * v.d).num("flop", 2.0 * s.m * s.n * s.k);
      if (check == "ok") add_samples(o, times);
      else ++failures;
      o.str("check", check);
      emit(o);
    }
  }
  for (bf16* p : out) CHECK(cudaFree(p));
  CHECK(cudaFree(map_tab));
  CHECK(cudaFree(A));
  CHECK(cudaFree(B));
  CHECK(cudaFree(C));
  CHECK(cudaFree(flush));
  return failures ? 1 : 0;
}
