// sanitize_fused.cpp: run generated fused GEMM + communication libraries (kernels/fused) on
// small ragged shapes with plain cudaMalloc'd buffers (one allocation per rank and buffer,
// exact sizes), for `compute-sanitizer --tool memcheck`, which then sees any access outside a
// rank's buffers. Python and torch stay out of the sanitized process (they would make it slow).
//
//   nvcc -O2 -std=c++17 -I kernels -o sanitize_fused validation/device/sanitize_fused.cpp -ldl
//   compute-sanitizer --tool memcheck --error-exitcode 9 ./sanitize_fused [--shape W,M,N,K]... \
//       lib1.so lib2.so ...
//
// Default shape: world 2, 200 x 264 x 72 (each rank owns 100 rows, so the owner boundary falls
// inside a 64-row epilogue sub-tile; N and K are not multiples of the 128 x 256 x 64 tile).
// Every library runs each shape twice: with the generated block counts, and with 3 GEMM
// blocks per rank (several tiles per block). Prints one line per run; exits 1 if any failed.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "fused/abi.h"

typedef int (*entry_fn)(const pkf_args*, char*, size_t);
typedef int (*reqs_fn)(const pkf_args*, pkf_reqs*, char*, size_t);
typedef int (*err_fn)(const void*, char*, size_t);
typedef int (*table_fn)(const pkf_args*, void*, size_t, char*, size_t);
typedef const char* (*manifest_fn)(void);
typedef int (*int_fn)(void);
typedef size_t (*size_fn)(void);

struct Shape {
  int world, m, n, k;
};

// The string value of "key" in a flat JSON object ("" if absent).
static std::string json_field(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return "";
  at = json.find(':', at);
  if (at == std::string::npos) return "";
  const size_t b = json.find('"', at);
  if (b == std::string::npos) return "";
  return json.substr(b + 1, json.find('"', b + 1) - b - 1);
}

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("  CUDA error %s at %s\n", cudaGetErrorString(e_), #x);         \
      ok = false;                                                                \
      goto done;                                                                 \
    }                                                                            \
  } while (0)

static bool run_one(const char* name, const std::string& op, entry_fn entry, reqs_fn reqs_of,
                    err_fn read_err, table_fn table_of, const Shape& s, int gemm_blocks) {
  pkf_args a;
  std::memset(&a, 0, sizeof(a));
  a.abi_version = PKF_ABI_VERSION;
  a.world = s.world;
  a.M = s.m;
  a.N = s.n;
  a.K = s.k;
  a.gemm_blocks = gemm_blocks;
  a.tile_order = -1;
  a.zero_output = 1;
  a.timeout_cycles = 1LL << 37;  // the sanitizer slows everything down
  char msg[1024] = "";
  bool ok = true;
  std::vector<void*> allocs;
  cudaStream_t stream = nullptr;
  pkf_reqs r;
  std::memset(&r, 0, sizeof(r));
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) return static_cast<void*>(nullptr);
    allocs.push_back(p);
    return p;
  };
  auto lo = [&](int q) { return static_cast<size_t>(q) * s.m / s.world; };
  const size_t bf16 = 2;
  std::vector<void*> A(s.world), B(s.world), O(s.world), P(s.world), G(s.world);
  std::vector<unsigned int*> F(s.world);
  std::vector<unsigned char> host;
  a.a = A.data();
  a.b = B.data();
  a.out = O.data();
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int q = 0; q < s.world; ++q) {
    const size_t own = lo(q + 1) - lo(q);
    const size_t a_rows = op == "ag-gemm" ? own : s.m;
    const size_t out_rows = op == "gemm-rs" ? own : s.m;
    A[q] = alloc(a_rows * s.k * bf16);
    B[q] = alloc(static_cast<size_t>(s.k) * s.n * bf16);
    O[q] = alloc(out_rows * s.n * bf16);
    if (!A[q] || !B[q] || !O[q]) {
      std::printf("  cudaMalloc failed\n");
      ok = false;
      goto done;
    }
    CHECK(cudaMemset(A[q], 0x3c, a_rows * s.k * bf16));
    CHECK(cudaMemset(B[q], 0x3c, static_cast<size_t>(s.k) * s.n * bf16));
    CHECK(cudaMemset(O[q], 0, out_rows * s.n * bf16));
  }
  if (reqs_of(&a, &r, msg, sizeof(msg)) != 0) {
    std::printf("  requirements failed: %s\n", msg);
    ok = false;
    goto done;
  }
  for (int q = 0; q < s.world; ++q) {
    if (r.partial_bytes) P[q] = alloc(r.partial_bytes);
    if (r.gathered_bytes) G[q] = alloc(r.gathered_bytes);
    if (r.num_flags) {
      F[q] = static_cast<unsigned int*>(alloc(4ull * r.num_flags));
      CHECK(cudaMemset(F[q], 0, 4ull * r.num_flags));
    }
  }
  a.partial = r.partial_bytes ? P.data() : nullptr;
  a.gathered = r.gathered_bytes ? G.data() : nullptr;
  a.flags = r.num_flags ? F.data() : nullptr;
  a.num_flags = r.num_flags;
  a.err = alloc(64);
  CHECK(cudaMemset(a.err, 0, 64));
  a.stream = stream;
  // the device table (fused/abi.h): its bytes from the library, for its device address
  a.table = alloc(r.table_bytes);
  a.table_bytes = r.table_bytes;
  host.resize(r.table_bytes);
  if (table_of(&a, host.data(), host.size(), msg, sizeof(msg)) != 0) {
    std::printf("  pkf_table failed: %s\n", msg);
    ok = false;
    goto done;
  }
  CHECK(cudaMemcpy(a.table, host.data(), host.size(), cudaMemcpyHostToDevice));
  {
    const int st = entry(&a, msg, sizeof(msg));
    if (st != 0) {
      std::printf("  entry returned %d: %s\n", st, msg);
      ok = false;
      goto done;
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  if (read_err(a.err, msg, sizeof(msg)) != 0) {
    std::printf("  device error: %s\n", msg);
    ok = false;
  }
done:
  cudaDeviceSynchronize();
  for (void* p : allocs) cudaFree(p);
  if (stream) cudaStreamDestroy(stream);
  std::printf("%s world %d %dx%dx%d gemm_blocks %d (%d + %d per rank): %s\n", name, s.world, s.m,
              s.n, s.k, gemm_blocks, r.gemm_blocks, r.comm_blocks, ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok;
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  std::vector<Shape> shapes;
  std::vector<const char*> libs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      Shape s;
      if (std::sscanf(argv[++i], "%d,%d,%d,%d", &s.world, &s.m, &s.n, &s.k) != 4) {
        std::fprintf(stderr, "--shape %s: expected W,M,N,K\n", argv[i]);
        return 2;
      }
      shapes.push_back(s);
    } else {
      libs.push_back(argv[i]);
    }
  }
  if (shapes.empty()) shapes.push_back({2, 200, 264, 72});
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "no usable CUDA device\n");
    return 2;
  }
  int failures = 0;
  for (const char* path : libs) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::printf("%s: dlopen failed: %s\n", path, dlerror());
      ++failures;
      continue;
    }
    auto abi = reinterpret_cast<int_fn>(dlsym(h, "pkf_abi_version"));
    auto args_size = reinterpret_cast<size_fn>(dlsym(h, "pkf_args_size"));
    auto manifest_of = reinterpret_cast<manifest_fn>(dlsym(h, "pkf_manifest"));
    if (!abi || !args_size || !manifest_of || abi() != PKF_ABI_VERSION ||
        args_size() != sizeof(pkf_args)) {
      std::printf("%s: not a fused library of ABI version %d (pkf_args of %zu bytes)\n", path,
                  PKF_ABI_VERSION, sizeof(pkf_args));
      ++failures;
      continue;
    }
    const std::string manifest = manifest_of();
    const std::string op = json_field(manifest, "op");
    const std::string entry_name = json_field(manifest, "entry");
    auto entry = reinterpret_cast<entry_fn>(dlsym(h, entry_name.c_str()));
    auto reqs_of = reinterpret_cast<reqs_fn>(dlsym(h, "pkf_requirements"));
    auto read_err = reinterpret_cast<err_fn>(dlsym(h, "pkc_read_error"));
    auto table_of = reinterpret_cast<table_fn>(dlsym(h, "pkf_table"));
    if (!entry || !reqs_of || !read_err || !table_of) {
      std::printf("%s: missing symbols (%s)\n", path, entry_name.c_str());
      ++failures;
      continue;
    }
    const std::string name = entry_name + "/" + json_field(manifest, "mechanism");
    for (const Shape& s : shapes)
      for (int gemm_blocks : {0, 3})
        failures += !run_one(name.c_str(), op, entry, reqs_of, read_err, table_of, s, gemm_blocks);
  }
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
