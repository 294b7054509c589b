// fused_pull.cu -- the communication blocks' routine of the inter-SM gemm-rs / gemm-ar
// kernels alone: pkf::pull_reduce (kernels/fused/comm.cuh) on partials that are all ready.
//
// What: `world` virtual ranks of C blocks each (384 threads, as the fused kernel's blocks) run
// pkf::pull_reduce<kind, tma> as the fused kernel's communication blocks do, but with no GEMM
// beside them and every tile's counter already complete, so that nothing waits: the routine's
// own rate (its flag acquire per 128 x 256 unit, its loads in flight) for the model of the
// fused kernels' communication blocks. Kind "rs": owner o sums every rank's M x N partial over
// its rows [lo(o), lo(o + 1)) into its output; "ar": into the same rows of every rank's
// output (the two shots in one pass). Two forms, each its own benchmark: "fused_pull", the
// register sum (16-byte loads and stores), and "fused_pull_tma", the TMA sum (tensor copies of
// 32-row boxes into shared-memory stages, tensor stores of the sums; the fused kernels of the
// schedules whose mechanism is tma), with the fused kernel's shared memory for its stages. A
// primitive: the fused kernels built from it are judged against the model, never fitted to it.
// Sweep: mechanism x kind {rs, ar} x world {2, 4, 8} x C {2, 4, 8, 16} at M = N = 8192 (bf16
// partials of 128 MiB a rank) and 4096; each launch alone behind a 256 MiB write, median.
// Check (every configuration): every output element equals the fp32 sum of the partials in
// rank order rounded once to bf16, bit for bit. The TMA form reads and writes through tensor
// maps of every rank's partial and output in a device array (pkf::pull_op::fill's table).
// Keys: "bytes" = one rank's partial (M x N x 2); "traffic_bytes" = what all the ranks' blocks
// read and write (world x partial read + partial written, x world written for "ar");
// "sum_gbps_per_block" = the sums one block writes (a rank's rows: partial / world) per second.
// Usage: fused_pull [--quick] [--mechanism register|tma] (default: both)
#include "moves_check.cuh"
#include "pk/host.cuh"
#include "fused/comm.cuh"

constexpr int kThreads = 384;          // pk::gemm::config::THREADS (codegen/fused.py THREADS)
constexpr int kBM = 128, kBN = 256;    // the fused suite's tile (codegen/fused.py TILES)

struct pull_globals {
  pkf::reduce_params comm;
  int comm_blocks;
};

template <int kKind, bool kTma>
__global__ void __launch_bounds__(kThreads, 1) pull_kernel(const __grid_constant__ pull_globals g) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int rank = static_cast<int>(blockIdx.x) / g.comm_blocks;
  const int block = static_cast<int>(blockIdx.x) % g.comm_blocks;
  pkf::pull_reduce<kKind, kTma>::template run<false>(g, rank, block, smem);  // the narrow instance
}

// The value after `name` on the command line, or `fallback`.
static std::string arg_value(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return argv[i + 1];
  return fallback;
}

// A host array copied into device memory (the fused runtime's device table, for one call).
template <typename T>
static T* to_device(const T* host, size_t n) {
  T* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(T)));
  CHECK(cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());   // complete before a launch on the non-blocking stream
  return dev;
}

__global__ void set_counters_kernel(unsigned* c, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    c[i] = v;
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  const bool quick = has_flag(argc, argv, "--quick");
  const std::string only = arg_value(argc, argv, "--mechanism", "both");
  if (only != "both" && only != "register" && only != "tma") {
    std::fprintf(stderr, "fused_pull: --mechanism %s: expected register, tma or both\n", only.c_str());
    return 2;
  }
  constexpr int kTmaSmem = static_cast<int>(pkf::pull_stages::kSmemBytes);
  CHECK(cudaFuncSetAttribute(pull_kernel<0, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kTmaSmem));
  CHECK(cudaFuncSetAttribute(pull_kernel<1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kTmaSmem));
  emit_device_record("fused_pull");
  const int sms = sm_count();
  const size_t flush_bytes = 256 * MiB;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  const int max_dim = quick ? 4096 : 8192;
  const size_t max_elems = static_cast<size_t>(max_dim) * max_dim;
  std::vector<bf16*> partial(8), out(8);
  for (int r = 0; r < 8; ++r) {
    CHECK(cudaMalloc(&partial[r], max_elems * sizeof(bf16)));
    CHECK(cudaMalloc(&out[r], max_elems * sizeof(bf16)));
    fill_bf16_kernel<<<sms * 4, 512>>>(partial[r], max_elems, 500 + r);
    CHECK_LAUNCH();
  }
  pk::error_record* err = new_error_record();
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int reps = quick ? 3 : 7;
  int failures = 0;
  const std::vector<int> dims = quick ? std::vector<int>{4096} : std::vector<int>{4096, 8192};
  for (int form = 0; form < 4; ++form)   // register rs, ar, then TMA rs, ar
    for (int world : {2, 4, 8})
      for (int dim : dims)
        for (int comm : {2, 4, 8, 16}) {
          const int tma = form / 2, kind = form % 2;
          if (only != "both" && only != (tma ? "tma" : "register")) continue;
          const int M = dim, N = dim;
          const int tiles = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
          pk::flags<8> f = pk::alloc_virtual_flags<8>(world, tiles, err, 1ll << 31);
          for (int r = 0; r < world; ++r) {   // every tile complete: 2 consumers x world, seq 0
            set_counters_kernel<<<32, 256>>>(f.ctr.ptr[r], tiles, 2u * world);
            CHECK_LAUNCH();
          }
          // The fused ABI v2 (pkf::pull_op::comm_params / fill): the pointers in the kernel
          // parameter (narrow instance, world <= 8) and in a device table; the flag counters'
          // pointers and the row partition in the table, as pkf_table writes them.
          pull_globals g{};
          for (int r = 0; r < world; ++r) {
            g.comm.partial_inl[r] = partial[r];
            g.comm.out_inl[r] = out[r];
          }
          const bf16** partial_tab = to_device(const_cast<const bf16**>(partial.data()), world);
          bf16** out_tab = to_device(out.data(), world);
          unsigned int** ctr_tab = to_device(f.ctr.ptr, world);
          g.comm.partial = partial_tab;
          g.comm.out = out_tab;
          g.comm.flags.ctr.table = ctr_tab;
          g.comm.flags.ctr.world = world;
          g.comm.flags.num_flags = f.num_flags;
          g.comm.flags.spin = f.spin;
          std::vector<int> lo_host(world + 1);
          std::vector<int4> blk_host(pkf::partition::blocks(M));
          pkf::partition::make(lo_host.data(), blk_host.data(), nullptr, nullptr, M, world);
          int* lo_dev = to_device(lo_host.data(), lo_host.size());
          int4* blk_dev = to_device(blk_host.data(), blk_host.size());
          // The TMA form's tensor maps (pkf::pull_op::fill): every rank's partial, then every
          // rank's output (rs: its rows; ar: all M), boxes of 32 x kBN.
          std::vector<CUtensorMap> maps_host(2 * world);
          for (int r = 0; r < world; ++r) {
            maps_host[r] = pk::make_tile_map_2d(partial[r], M, N, N, pkf::pull_stages::kRows, kBN);
            maps_host[world + r] = pk::make_tile_map_2d(out[r], kind == 0 ? lo_host[r + 1] - lo_host[r] : M,
                                                        N, N, pkf::pull_stages::kRows, kBN);
          }
          CUtensorMap* maps_dev = to_device(maps_host.data(), maps_host.size());
          g.comm.maps = maps_dev;
          g.comm.rows = pkf::partition{lo_dev, blk_dev, world};
          g.comm.N = N;
          g.comm.world = world;
          g.comm.bm = kBM;
          g.comm.bn = kBN;
          g.comm.num_n = (N + kBN - 1) / kBN;
          g.comm.seq = 0;
          g.comm_blocks = comm;
          auto go = [&] {
            const int grid = world * comm;
            if (tma && kind == 0) pull_kernel<0, true><<<grid, kThreads, kTmaSmem, st>>>(g);
            else if (tma) pull_kernel<1, true><<<grid, kThreads, kTmaSmem, st>>>(g);
            else if (kind == 0) pull_kernel<0, false><<<grid, kThreads, 0, st>>>(g);
            else pull_kernel<1, false><<<grid, kThreads, 0, st>>>(g);
            CHECK_LAUNCH();
          };
          for (int r = 0; r < world; ++r) CHECK(cudaMemsetAsync(out[r], 0xFF, max_elems * sizeof(bf16), st));
          go();
          CHECK(cudaStreamSynchronize(st));
          const std::string check = run_check(err, [&](unsigned long long* bad) {
            for (int r = 0; r < world; ++r) {
              // rs: rank r's output holds its rows; ar: every rank's holds all M rows.
              const int lo = kind == 0 ? lo_host[r] : 0;
              const int hi = kind == 0 ? lo_host[r + 1] : M;
              pkc::cptrs<bf16> src{};
              for (int q = 0; q < world; ++q) src.add(partial[q] + static_cast<size_t>(lo) * N);
              check_kernel<<<sms * 4, 512>>>(out[r], src, static_cast<size_t>(hi - lo) * N, bad);
            }
          });
          std::vector<double> times;
          if (check == "ok") {
            go();
            times = times_behind_write(st, go, flush, flush_bytes, reps);
          }
          pk::free_virtual_flags(f);
          for (void* t : {(void*)partial_tab, (void*)out_tab, (void*)ctr_tab, (void*)lo_dev, (void*)blk_dev,
                          (void*)maps_dev})
            CHECK(cudaFree(t));
          const double part = static_cast<double>(M) * N * sizeof(bf16);
          const double traffic = world * part + part * (kind == 0 ? 1 : world);
          JsonObj params;
          params.str("kind", kind == 0 ? "rs" : "ar").integer("world", world).integer("blocks", comm)
              .integer("m", M).integer("n", N).integer("threads", kThreads).integer("bm", kBM).integer("bn", kBN)
              .str("timing", "behind_write").str("mechanism", tma ? "tma" : "register");
          JsonObj o;
          o.str("bench", tma ? "fused_pull_tma" : "fused_pull").obj("params", params).num("bytes", part).num("traffic_bytes", traffic);
          if (check == "ok") add_samples(o, times).num("sum_gbps_per_block", part / world / comm / quantile(times, 0.5) / 1e9);
          else ++failures;
          o.str("check", check);
          emit(o);
        }
  for (int r = 0; r < 8; ++r) {
    CHECK(cudaFree(partial[r]));
    CHECK(cudaFree(out[r]));
  }
  CHECK(cudaFree(flush));
  return failures ? 1 : 0;
}
