// test_tma_reduce.cu: TMA bulk reduce-add into peers (cp.reduce.async.bulk .add.f32 and
// .add.noftz.bf16), completion, and a barrier after it, on virtual ranks.
//
// Cases tma_reduce_f32 / tma_reduce_bf16, for world sizes 2, 4, 8 and several lengths (some
// whose byte size is not a multiple of 16):
//   Every rank stages its vector in shared memory with bulk loads and reduce-adds each stage
//   into the destination of EVERY rank, itself included; destinations are zeroed first. The
//   tail (bytes % 16) goes through register-path atomics (ldst::red_into). Each block then
//   completes its writes (wait_group 0 + proxy fence) and enters a barrier; after the barrier
//   every rank checks its own destination against the fp32 reference in the kernel, and the
//   host checks every destination again.
//   The sums accumulate in the destination type in no fixed order, so the check is
//   |dst - ref| <= world * u * sum_r |x_r| (+1e-6): u = 2^-24 for f32, 2^-8 for bf16. The
//   bound grows with the world size because each of the world - 1 additions may round.
#include "test_util.cuh"

namespace {

constexpr unsigned kStage = 16 * 1024;
constexpr unsigned kStages = 2;
constexpr unsigned kThreads = 128;
constexpr unsigned kBlocksPerRank = 3;
constexpr size_t kSmemBytes = kStages * kStage + 128;

using pk::pgl;

float to_f(float x) { return x; }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float dev_to_f(float x) { return x; }
__device__ float dev_to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void reduce_kernel(const __grid_constant__ pgl<T> dst, const __grid_constant__ pgl<T> src,
                              const __grid_constant__ pk::flags<> f, size_t n, unsigned bpr,
                              const float* ref, const float* tol, unsigned long long* out_of_tol) {
  extern __shared__ unsigned char smem_raw[];
  const pkt::stages st = pkt::init_stages<kStages>(smem_raw);

  const int world = dst.world;
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const unsigned lb = blockIdx.x % bpr;
  const unsigned char* from = reinterpret_cast<const unsigned char*>(src.ptr[rank]);

  const pk::tma::bulk_split split = pk::tma::split_for_bulk(dst.ptr[0], from, n * sizeof(T));
  int ok = 1;
  if (threadIdx.x == 0) {
    ok = pkt::forward_stages<kStage, kStages>(
        st, from, split.body, lb, bpr, f.spin, rank,
        [&](const unsigned char* buf, size_t off, unsigned len) {  // off: bytes
          for (int k = 0; k < world; ++k) {
            const int p = (rank + k) % world;
            pk::tma::store_add_async(dst.ptr[p] + off / sizeof(T), reinterpret_cast<const T*>(buf),
                                     len);
          }
        });
  }
  if (split.tail != 0 && lb == bpr - 1) {
    const size_t first = split.body / sizeof(T);
    for (int k = 0; k < world; ++k) {
      const int p = (rank + k) % world;
      pk::ldst::red_into(dst.ptr[p] + first, src.ptr[rank] + first, n - first, pk::ldst::block_group());
    }
  }
  if (!__syncthreads_and(ok)) return;
  if (!pk::barrier(f, rank, 0, 1, bpr)) return;

  const T* mine = dst.ptr[rank];
  unsigned long long bad = 0;
  for (size_t i = lb * blockDim.x + threadIdx.x; i < n; i += bpr * blockDim.x)
    bad += !(fabsf(dev_to_f(mine[i]) - ref[i]) <= tol[i]);
  if (bad) atomicAdd(out_of_tol, bad);
}

template <typename T>
void case_reduce(pkt::report& rep, const char* name, double u, int world, size_t n, uint64_t seed) {
  rep.run(name, world, n * sizeof(T), [&] {
    auto dst = pk::alloc_virtual_pgl<T>(world, n);
    auto src = pk::alloc_virtual_pgl<T>(world, n);
    pk::error_record* err = pk::alloc_error_record();
    auto f = pk::alloc_virtual_flags(world, world, err, pkt::kTimeoutCycles);
    float *ref_d = nullptr, *tol_d = nullptr;
    unsigned long long* bad_d = nullptr;
    PK_CUDA_CHECK(cudaMalloc(&ref_d, n * sizeof(float)));
    PK_CUDA_CHECK(cudaMalloc(&tol_d, n * sizeof(float)));
    PK_CUDA_CHECK(cudaMalloc(&bad_d, sizeof(unsigned long long)));
    pkt::defer cleanup([&] {
      pk::free_virtual_pgl(dst);
      pk::free_virtual_pgl(src);
      pk::free_virtual_flags(f);
      cudaFree(err);
      cudaFree(ref_d);
      cudaFree(tol_d);
      cudaFree(bad_d);
    });
    pkt::rng g(seed);
    std::vector<double> ref(n, 0.0), sum_abs(n, 0.0);
    for (int r = 0; r < world; ++r) {
      std::vector<T> h(n);
      for (size_t i = 0; i < n; ++i) {
        h[i] = T(g.uniform());
        ref[i] += to_f(h[i]);
        sum_abs[i] += std::fabs(to_f(h[i]));
      }
      pkt::upload(src.ptr[r], h);
      PK_CUDA_CHECK(cudaMemset(dst.ptr[r], 0, n * sizeof(T)));
    }
    std::vector<float> ref_f(n), tol_f(n);
    for (size_t i = 0; i < n; ++i) {
      ref_f[i] = static_cast<float>(ref[i]);
      tol_f[i] = static_cast<float>(pkt::sum_tolerance(world, u, sum_abs[i]));
    }
    pkt::upload(ref_d, ref_f);
    pkt::upload(tol_d, tol_f);
    PK_CUDA_CHECK(cudaMemset(bad_d, 0, sizeof(unsigned long long)));

    pk::launch_cooperative(reduce_kernel<T>, dim3(world * kBlocksPerRank), dim3(kThreads),
                           kSmemBytes, nullptr, dst, src, f, n, kBlocksPerRank,
                           static_cast<const float*>(ref_d), static_cast<const float*>(tol_d), bad_d);
    pkt::finish_launch(err);

    const unsigned long long device_bad = pkt::download(bad_d, 1)[0];
    double max_err = 0;
    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], n);
      for (size_t i = 0; i < n; ++i) {
        const double e = std::fabs(static_cast<double>(to_f(d[i])) - ref[i]);
        max_err = std::max(max_err, e);
        bad += !(e <= pkt::sum_tolerance(world, u, sum_abs[i]));
      }
    }
    rep.emit_checked(name, world, n * sizeof(T), max_err, bad, device_bad,
                     "elements out of tolerance at the end", "seen after the barrier");
  });
}

}  // namespace

int main() {
  pkt::init();
  pkt::report rep;
  const size_t counts[] = {4, 1000 + 3, 65536 + 5, (1u << 20) + 1};
  uint64_t seed = 200;
  for (int world : pkt::kWorlds)
    for (size_t n : counts) {
      case_reduce<float>(rep, "tma_reduce_f32", pkt::kUnitRoundoffF32, world, n, seed++);
      case_reduce<__nv_bfloat16>(rep, "tma_reduce_bf16", pkt::kUnitRoundoffBF16, world, n, seed++);
    }
  return rep.exit_code();
}
