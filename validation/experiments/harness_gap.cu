// harness_gap.cu -- the generated collectives timed from C++ as the primitives are: is the
// 2-3 us by which the suite's small collectives exceed their moves the kernels' or the
// Python harness's?
//
// Why: in run 18 (2026-12-03) the one-shot all-reduce by registers at w8, 4 KiB, took 6.8 us
// in the suite (validation.run_collectives: torch buffers, a torch zero_ of 256 MiB before
// each call, ctypes into the library) and the two-shot 8.7 us, where the same moves alone
// (validation/experiments/two_shot.cu: one kernel, cudaMemsetAsync of 256 MiB before each)
// took 5.0 and 5.7 us; the model, fitted on such moves, predicts the suite 1.5-3 us fast.
// Here each library given runs as the suite runs it (virtual ranks, device_sync = 1, one
// allocation per rank and buffer, random-ish bf16 inputs) but timed as the moves are: per
// call a cudaMemsetAsync of 256 MiB, then events around the library's entry call alone, 100
// calls after 3 warm-up calls, median; and again with a kernel writing the 256 MiB instead
// (as torch's zero_ does). One JSON line per (library, world, count, blocks per rank, flush).
//
//   nvcc -O2 -std=c++17 -I kernels -gencode=arch=compute_90a,code=sm_90a -o harness_gap \
//        validation/experiments/harness_gap.cu -ldl
//   ./harness_gap WORLD COUNT[,COUNT...] BPR[,BPR...] lib1.so [lib2.so ...]
// (COUNT in elements of bf16 as the ABI counts them; libraries of a `pksim validate
// --prepare` bundle, BUNDLE/lib/*.so, each with its manifest.)
// Besides the whole call ("variant": "whole"), each library's kernel launched with no phase
// ("empty": device_sync = 0, phase range [0, 0): its launch and start alone) and with each
// phase alone ("phase", device_sync = 0), and, per grid, an empty kernel of this program with
// an argument of the generated kernels' size ("local_empty", plain and cooperative launch):
// where in a generated kernel do its extra microseconds go?
#include <sstream>

#include "../collective_lib.h"
#include "../microbench/common.cuh"
#include "pk/host.cuh"

static std::vector<unsigned long long> list_of(const char* s) {
  std::vector<unsigned long long> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoull(item));
  return v;
}

__global__ void fill_kernel(unsigned short* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = 0x3c00u ^ static_cast<unsigned short>((i * 2654435761u + seed) & 0x00ffu);  // bf16 near 0.0078
}

// An argument as large as a generated kernel's globals (three layouts of 8 ranks, the flags).
struct big_arg {
  unsigned long long words[64];
};
__global__ void local_empty_kernel(const __grid_constant__ big_arg a) {
  if (a.words[threadIdx.x & 63] == 0xdeadbeefull) asm volatile("trap;");
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: harness_gap WORLD COUNT[,COUNT...] BPR[,BPR...] lib.so [lib.so ...]\n");
    return 2;
  }
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  const int world = std::atoi(argv[1]);
  const auto counts = list_of(argv[2]);
  const auto bprs = list_of(argv[3]);
  const size_t flush_bytes = 256ull << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int failures = 0;
  for (int li = 4; li < argc; ++li) {
    collective_lib lib;
    const std::string why = lib.open(argv[li]);
    if (!why.empty()) {
      std::fprintf(stderr, "%s: %s\n", argv[li], why.c_str());
      ++failures;
      continue;
    }
    for (unsigned long long count : counts)
      for (unsigned long long bpr : bprs) {
        pkc_args a = virtual_args(world, PKC_BF16, count, static_cast<int>(bpr));
        a.device_sync = 1;
        char msg[1024] = "";
        pkc_reqs r;
        if (lib.reqs(&a, &r, msg, sizeof(msg)) != 0) {
          std::fprintf(stderr, "%s: requirements: %s\n", argv[li], msg);
          ++failures;
          continue;
        }
        std::vector<void*> allocs;
        auto alloc = [&](size_t bytes) {
          void* p = nullptr;
          CHECK(cudaMalloc(&p, bytes ? bytes : 16));
          allocs.push_back(p);
          return p;
        };
        cudaStream_t rs[PKC_MAX_RANKS] = {};
        for (int q = 0; q < world; ++q) {
          a.in[q] = alloc(r.in_count * 2);
          a.out[q] = alloc(r.out_count * 2);
          if (r.scratch_bytes) a.scratch[q] = alloc(r.scratch_bytes);
          a.flags[q] = static_cast<unsigned int*>(alloc(4ull * r.num_flags));
          fill_kernel<<<132, 512, 0, st>>>(static_cast<unsigned short*>(a.in[q]), r.in_count, 7u + q);
          CHECK(cudaMemsetAsync(a.flags[q], 0, 4ull * r.num_flags, st));
          CHECK(cudaStreamCreateWithFlags(&rs[q], cudaStreamNonBlocking));
          a.rank_streams[q] = rs[q];
        }
        a.scratch_bytes = r.scratch_bytes;
        a.num_flags = r.num_flags;
        a.err = alloc(64);
        CHECK(cudaMemsetAsync(a.err, 0, 64, st));
        a.stream = st;
        // variant -1: the whole call; -2: no phase; p >= 0: phase p alone.
        for (int variant = -2; variant < r.phases; ++variant)
        for (int kernel_flush = 0; kernel_flush < 2; ++kernel_flush) {
          bool ok = true;
          a.device_sync = variant == -1 ? 1 : 0;
          a.phase_begin = variant < 0 ? 0 : variant;
          a.phase_end = variant == -1 ? -1 : variant == -2 ? 0 : variant + 1;
          auto call = [&] {
            if (lib.entry(&a, msg, sizeof(msg)) != 0) {
              std::fprintf(stderr, "%s: entry: %s\n", argv[li], msg);
              ok = false;
            }
            if (a.device_sync) ++a.seq;  // only device-synchronised calls move the counters
          };
          for (int w = 0; w < 3; ++w) call();
          const std::vector<double> times =
              ok ? times_behind_write(st, call, flush, flush_bytes, 100, kernel_flush) : std::vector<double>();
          CHECK(cudaStreamSynchronize(st));
          if (ok && lib.read_err(a.err, msg, sizeof(msg)) != 0) {
            std::fprintf(stderr, "%s: device error: %s\n", argv[li], msg);
            ok = false;
          }
          failures += !ok;
          const double med = times.empty() ? 0.0 : quantile(times, 0.5);
          std::printf("{\"bench\": \"harness_gap\", \"op\": \"%s\", \"algorithm\": \"%s\", "
                      "\"mechanism\": \"%s\", \"world\": %d, \"count\": %llu, \"bytes\": %llu, "
                      "\"blocks_per_rank\": %llu, \"variant\": \"%s\", \"phase\": %d, \"flush\": \"%s\", "
                      "\"time_s\": %.9g, \"time_min_s\": %.9g, \"calls\": %zu, \"check\": \"%s\"}\n",
                      lib.field("op").c_str(), lib.field("algorithm").c_str(),
                      lib.field("mechanism").c_str(), world, count, count * 2, bpr,
                      variant == -1 ? "whole" : variant == -2 ? "empty" : "phase", variant,
                      kernel_flush ? "kernel" : "memset", med, times.empty() ? 0.0 : quantile(times, 0.0),
                      times.size(), ok ? "ok" : "FAIL");
          std::fflush(stdout);
        }
        CHECK(cudaDeviceSynchronize());
        for (void* p : allocs) CHECK(cudaFree(p));
        for (int q = 0; q < world; ++q) CHECK(cudaStreamDestroy(rs[q]));
      }
  }
  // The same grids launched with an empty kernel of this program (threads as the TMA and
  // register kernels), plain and cooperative.
  big_arg arg{};
  for (int k = 0; k < 64; ++k) arg.words[k] = k + 1;
  for (unsigned long long bpr : bprs)
    for (int threads : {256, 512})
      for (int coop = 0; coop < 2; ++coop)
        for (int kernel_flush = 0; kernel_flush < 2; ++kernel_flush) {
          const dim3 grid(static_cast<unsigned>(world * bpr));
          auto go = [&] {
            if (coop) pk::launch_cooperative(local_empty_kernel, grid, dim3(threads), 0, st, arg);
            else local_empty_kernel<<<grid, threads, 0, st>>>(arg);
            CHECK_LAUNCH();
          };
          for (int w = 0; w < 3; ++w) go();
          const std::vector<double> times = times_behind_write(st, go, flush, flush_bytes, 100, kernel_flush);
          std::printf("{\"bench\": \"harness_gap\", \"variant\": \"local_empty\", \"world\": %d, "
                      "\"blocks_per_rank\": %llu, \"threads\": %d, \"launch\": \"%s\", \"flush\": \"%s\", "
                      "\"time_s\": %.9g, \"time_min_s\": %.9g, \"calls\": %zu, \"check\": \"ok\"}\n",
                      world, bpr, threads, coop ? "cooperative" : "plain", kernel_flush ? "kernel" : "memset",
                      quantile(times, 0.5), quantile(times, 0.0), times.size());
          std::fflush(stdout);
        }
  return failures ? 1 : 0;
}
