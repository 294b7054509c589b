// sanitize_collectives.cpp: run generated collective libraries on small cases with plain
// cudaMalloc'd buffers (one allocation per rank and buffer, exact sizes), for
// `compute-sanitizer --tool memcheck`, which then sees any access outside a rank's buffers.
// Python and torch stay out of the sanitized process (they would make it slow).
//
//   nvcc -O2 -std=c++17 -I kernels -o sanitize_collectives validation/device/sanitize_collectives.cpp -ldl
//   compute-sanitizer --tool memcheck --error-exitcode 9 ./sanitize_collectives lib1.so lib2.so ...
//
// For every library: world 2 in bf16, world 8 in fp32 and world 16 in bf16 (the wide kernel:
// pointers from the device peer table, moves over every rank in batches), an odd element
// count, once with device synchronisation (one launch, barriers / flags on the device) and once
// phase by phase with the host synchronising. A world the library refuses (recursive halving
// at world 2 is fine; TMA sums past 8 sources are refused by design) is reported and skipped.
// Prints one line per run; exits 1 if any run failed.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "collective_lib.h"

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("  CUDA error %s at %s\n", cudaGetErrorString(e_), #x);         \
      return false;                                                              \
    }                                                                            \
  } while (0)

static bool run_one(const char* name, const collective_lib& lib, int world, int dtype,
                    unsigned long long count, bool device_sync) {
  pkc_args a = virtual_args(world, dtype, count, 3);
  a.device_sync = device_sync ? 1 : 0;
  a.timeout_cycles = 1LL << 37;  // the sanitizer slows everything down
  char msg[1024] = "";
  pkc_reqs r;
  if (lib.reqs(&a, &r, msg, sizeof(msg)) != 0) {
    std::printf("%s world %d: refused (%s)\n", name, world, msg);
    return std::strstr(msg, "world") != nullptr;   // a world the algorithm does not take
  }
  const size_t elem = dtype == PKC_BF16 ? 2 : 4;
  std::vector<void*> allocs;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) return static_cast<void*>(nullptr);
    allocs.push_back(p);
    return p;
  };
  cudaStream_t main_stream = nullptr;
  std::vector<cudaStream_t> rs(world, nullptr);
  std::vector<void*> in(world), out(world), scratch(world), streams(world);
  std::vector<unsigned int*> flags(world);
  CHECK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  for (int q = 0; q < world; ++q) {
    in[q] = alloc(r.in_count * elem);
    out[q] = alloc(r.out_count * elem);
    if (r.scratch_bytes) scratch[q] = alloc(r.scratch_bytes);
    flags[q] = static_cast<unsigned int*>(alloc(4ull * r.num_flags));
    CHECK(cudaMemset(in[q], 0x3c, r.in_count * elem));
    CHECK(cudaMemset(out[q], 0, r.out_count * elem));
    CHECK(cudaMemset(flags[q], 0, 4ull * r.num_flags));
    CHECK(cudaStreamCreateWithFlags(&rs[q], cudaStreamNonBlocking));
    streams[q] = rs[q];
  }
  a.in = in.data();
  a.out = out.data();
  a.scratch = r.scratch_bytes ? scratch.data() : nullptr;
  a.flags = flags.data();
  a.rank_streams = streams.data();
  a.scratch_bytes = r.scratch_bytes;
  a.num_flags = r.num_flags;
  a.err = alloc(64);
  CHECK(cudaMemset(a.err, 0, 64));
  a.stream = main_stream;
  if (r.table_bytes) {  // the device peer table (abi.h): its bytes from the library, copied over
    std::vector<unsigned char> host(r.table_bytes);
    a.table = alloc(r.table_bytes);
    a.table_bytes = r.table_bytes;
    if (lib.table(&a, host.data(), host.size(), msg, sizeof(msg)) != 0) {
      std::printf("  pkc_table failed: %s\n", msg);
      return false;
    }
    CHECK(cudaMemcpy(a.table, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  bool ok = true;
  const int phases = device_sync ? 1 : r.phases;
  for (int p = 0; p < phases && ok; ++p) {
    if (!device_sync) {
      a.phase_begin = p;
      a.phase_end = p + 1;
    }
    const int st = lib.entry(&a, msg, sizeof(msg));
    if (st != 0) {
      std::printf("  entry returned %d: %s\n", st, msg);
      ok = false;
      break;
    }
    CHECK(cudaStreamSynchronize(main_stream));
    if (lib.read_err(a.err, msg, sizeof(msg)) != 0) {
      std::printf("  device error: %s\n", msg);
      ok = false;
    }
  }
  CHECK(cudaDeviceSynchronize());
  for (void* p : allocs) cudaFree(p);
  for (int q = 0; q < world; ++q) cudaStreamDestroy(rs[q]);
  cudaStreamDestroy(main_stream);
  std::printf("%s world %d %s count %llu %s: %s\n", name, world, dtype == PKC_BF16 ? "bf16" : "fp32",
              count, device_sync ? "device-sync" : "host-sync", ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok;
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "no usable CUDA device\n");
    return 2;
  }
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    collective_lib lib;
    const std::string why = lib.open(argv[i]);
    if (!why.empty()) {
      std::printf("%s: %s\n", argv[i], why.c_str());
      ++failures;
      continue;
    }
    const std::string entry_name = lib.field("entry");
    const int shapes[3][2] = {{2, PKC_BF16}, {8, PKC_FP32}, {16, PKC_BF16}};  // (world, dtype)
    for (const auto& wd : shapes)
      for (bool ds : {true, false})
        failures += !run_one(entry_name.c_str(), lib, wd[0], wd[1], 5003, ds);
  }
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
