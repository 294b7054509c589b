// gemm/gemm_bf16.cu: C ABI of the Hopper bf16 GEMM (callable through ctypes).
//
//   int pk_gemm_bf16(A, B, C, M, N, K, sms, stream)
//       C[M x N] = A[M x K] @ B[K x N], all bf16 row-major (torch.matmul(A, B) with contiguous
//       A and B), fp32 accumulation, default tile variant; sms = persistent blocks (0 = all).
//   int pk_gemm_bf16_ex(A, B, C, M, N, K, variant, sms, first_block, group_m, flags, stream)
//       the same with a tile variant, the index of the first GEMM block in the launch (the
//       blocks before it return at once: room for communication blocks), the band height of
//       the grouped raster (0 = 16) and flags (bit 0: swap B's descriptor strides, a
//       diagnostic only).
//   int pk_gemm_num_variants(void); const char* pk_gemm_variant_name(int);
//   const char* pk_gemm_strerror(int); int pk_gemm_abi_version(void)
//
// Variants (index: name = BM x BN x BK, s = pipeline stages, cMxN = clusters of M x N blocks,
// c2 = c2x1: B multicast between vertically adjacent tiles, c1x2: A multicast between
// horizontally adjacent ones, c2x2 both): 0 128x256x64s4 (the default), 1 128x256x64s3,
// 2 128x128x64s6, 3 256x128x64s4, 4 128x256x64s4c2, 5 128x256x64s3c2, 6 256x128x64s4c2,
// 7 128x256x64s4c2x2, 8 256x128x64s4c1x2, 9 256x128x64s4c2x2 (the clustered ones need a
// first_block that is a multiple of the cluster size; the grid is capped at the number of
// co-resident clusters). Every variant passed validation/run/gemm.py's checks on an H100
// (docs/PERFORMANCE.md, "Side by side in turn"); the default is the fused kernels' GEMM.
//
// Return value: 0 on success; a negative pk::gemm::status for a bad argument (checked before
// any CUDA call, so a bad call never touches the GPU); a positive cudaError_t otherwise. The
// launch is asynchronous on `stream`; errors inside the kernel show at the next sync.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC
//        -I kernels/include -I kernels -o libpk_gemm.so kernels/gemm/gemm_bf16.cu
#include "gemm/gemm_host.cuh"

namespace {

using namespace pk::gemm;

using v128x256x64s4 = config<128, 256, 64, 4, 2>;
using v128x256x64s3 = config<128, 256, 64, 3, 2>;
using v128x128x64s6 = config<128, 128, 64, 6, 2>;
using v256x128x64s4 = config<256, 128, 64, 4, 1>;
using v128x256x64s4c2 = config<128, 256, 64, 4, 2, 2>;  // clusters of 2, B multicast
using v128x256x64s3c2 = config<128, 256, 64, 3, 2, 2>;
using v256x128x64s4c2 = config<256, 128, 64, 4, 1, 2>;
using v128x256x64s4c2x2 = config<128, 256, 64, 4, 2, 2, 2>;  // 2 x 2 clusters, A and B multicast
using v256x128x64s4c1x2 = config<256, 128, 64, 4, 1, 1, 2>;  // 1 x 2 clusters, A multicast
using v256x128x64s4c2x2 = config<256, 128, 64, 4, 1, 2, 2>;

using launcher = int (*)(const void*, const void*, void*, int, int, int, int, int, int, bool,
                         cudaStream_t);

struct variant {
  const char* name;
  launcher fn;
};

const variant kVariants[] = {
    {"128x256x64s4", &gemm_bf16<v128x256x64s4>},
    {"128x256x64s3", &gemm_bf16<v128x256x64s3>},
    {"128x128x64s6", &gemm_bf16<v128x128x64s6>},
    {"256x128x64s4", &gemm_bf16<v256x128x64s4>},
    {"128x256x64s4c2", &gemm_bf16<v128x256x64s4c2>},
    {"128x256x64s3c2", &gemm_bf16<v128x256x64s3c2>},
    {"256x128x64s4c2", &gemm_bf16<v256x128x64s4c2>},
    {"128x256x64s4c2x2", &gemm_bf16<v128x256x64s4c2x2>},
    {"256x128x64s4c1x2", &gemm_bf16<v256x128x64s4c1x2>},
    {"256x128x64s4c2x2", &gemm_bf16<v256x128x64s4c2x2>},
};
constexpr int kNumVariants = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

}  // namespace

extern "C" {

int pk_gemm_abi_version(void) { return 1; }

int pk_gemm_num_variants(void) { return kNumVariants; }

const char* pk_gemm_variant_name(int v) {
  return (v >= 0 && v < kNumVariants) ? kVariants[v].name : nullptr;
}

const char* pk_gemm_strerror(int code) { return status_string(code); }

int pk_gemm_bf16_ex(const void* A, const void* B, void* C, int M, int N, int K, int variant,
                    int sms, int first_block, int group_m, int flags, cudaStream_t stream) {
  if (variant < 0 || variant >= kNumVariants) return ERR_BAD_VARIANT;
  return kVariants[variant].fn(A, B, C, M, N, K, sms, first_block, group_m, (flags & 1) != 0,
                               stream);
}

int pk_gemm_bf16(const void* A, const void* B, void* C, int M, int N, int K, int sms,
                 cudaStream_t stream) {
  return pk_gemm_bf16_ex(A, B, C, M, N, K, 0, sms, 0, 0, 0, stream);
}

}  // extern "C"
