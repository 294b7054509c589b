// test_tensor_map.cu: 2-D tensor-map (cp.async.bulk.tensor) tile loads, stores and reduce-adds
// between virtual ranks (pk/tma.cuh).
//
// Tensor maps are encoded on the host with cuTensorMapEncodeTiled, fetched from the driver
// through cudaGetDriverEntryPointByVersion, so the program links against the runtime only (no
// -lcuda). Each rank gets maps for its own matrices; the kernel receives all of them in one
// __grid_constant__ parameter and indexes them by rank.
//
// Cases, for world sizes 2, 4, 8 and matrices with ragged edges (rows, cols not multiples of
// the 32 x 64 box; row pitch padded to 16 bytes):
//   tmap_copy    rank r loads each tile of its matrix (bulk tensor load, mbarrier, two stages)
//                and stores it at the same coordinates into rank r+1's matrix (bulk tensor
//                store). Out-of-bounds box parts must be zero on load and not written on store:
//                the padding columns of the destination keep their sentinel.
//   tmap_reduce  every rank reduce-adds each tile into every rank's zeroed sum matrix; checked
//                against an fp32 reference with a world-size-dependent tolerance.
#include <cstring>

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include "test_util.cuh"

namespace {

constexpr int kBoxRows = 32;
constexpr int kBoxCols = 64;
constexpr unsigned kTileBytes = kBoxRows * kBoxCols * sizeof(float);
constexpr unsigned kStages = 2;
constexpr unsigned kThreads = 128;
constexpr unsigned kBlocksPerRank = 3;
constexpr size_t kSmemBytes = kStages * kTileBytes + 128;
constexpr float kSentinel = -7.0f;

struct maps_t {
  CUtensorMap src[pkt::kMaxRanks];
  CUtensorMap dst[pkt::kMaxRanks];
  CUtensorMap sum[pkt::kMaxRanks];
};

enum tile_mode : int { kCopyToNext = 0, kReduceToAll = 1 };

__global__ void tile_kernel(const __grid_constant__ maps_t maps, int world, int rows, int cols,
                            unsigned bpr, int mode, pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bar[kStages];
  unsigned char* stages = pk::tma::align_smem<128>(smem_raw);
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const unsigned lb = blockIdx.x % bpr;
  const pk::spin_ctx spin = pk::spin_ctx::make(err, pkt::kTimeoutCycles);

  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kStages; ++s) pk::tma::mbar_init(&bar[s], 1);
    pk::tma::mbar_init_fence();
    pk::tma::prefetch_map(&maps.src[rank]);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;  // one thread drives the copy engine

  const int tiles_x = (cols + kBoxCols - 1) / kBoxCols;
  const int tiles = tiles_x * ((rows + kBoxRows - 1) / kBoxRows);
  unsigned phase = 0;
  unsigned it = 0;
  for (int t = static_cast<int>(lb); t < tiles; t += static_cast<int>(bpr), ++it) {
    const unsigned s = it % kStages;
    unsigned char* buf = stages + s * kTileBytes;
    const int c0 = (t % tiles_x) * kBoxCols;
    const int c1 = (t / tiles_x) * kBoxRows;
    if (it >= kStages) pk::tma::wait_group_read<kStages - 1>();
    // The whole box is always delivered (out-of-bounds elements as zeros), so the
    // transaction count is the full box.
    pk::tma::mbar_arrive_expect_tx(&bar[s], kTileBytes);
    pk::tma::load_tile_async(buf, &maps.src[rank], c0, c1, &bar[s]);
    if (!pk::tma::mbar_wait(&bar[s], (phase >> s) & 1u, spin, rank)) break;
    phase ^= 1u << s;
    pk::tma::fence_shared_to_async();
    if (mode == kCopyToNext) {
      pk::tma::store_tile_async(&maps.dst[(rank + 1) % world], c0, c1, buf);
    } else {
      for (int k = 0; k < world; ++k) pk::tma::store_add_tile_async(&maps.sum[(rank + k) % world], c0, c1, buf);
    }
    pk::tma::commit_group();
  }
  pk::tma::complete_writes();
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    PK_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw pk::cuda_error("the driver does not export cuTensorMapEncodeTiled (version 12000)");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// Row-major rows x cols floats with a row pitch of `pitch` elements (pitch * 4 % 16 == 0).
CUtensorMap make_map(float* base, int rows, int cols, int pitch) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch) * sizeof(float)};
  const cuuint32_t box[2] = {kBoxCols, kBoxRows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box,
                                 elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw pk::cuda_error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)));
  return m;
}

void case_tiles(pkt::report& rep, int mode, int world, int rows, int cols, uint64_t seed) {
  const char* name = mode == kCopyToNext ? "tmap_copy" : "tmap_reduce";
  const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(float);
  rep.run(name, world, bytes, [&] {
    const int pitch = (cols + 3) & ~3;
    const size_t elems = static_cast<size_t>(rows) * pitch;
    auto src = pk::alloc_virtual_pgl<float>(world, elems);
    auto dst = pk::alloc_virtual_pgl<float>(world, elems);
    pk::error_record* err = pk::alloc_error_record();
    pkt::defer cleanup([&] {
      pk::free_virtual_pgl(src);
      pk::free_virtual_pgl(dst);
      cudaFree(err);
    });
    pkt::rng g(seed);
    std::vector<std::vector<float>> host(world);
    const std::vector<float> init(elems, mode == kCopyToNext ? kSentinel : 0.0f);
    maps_t maps;
    std::memset(&maps, 0, sizeof(maps));
    for (int r = 0; r < world; ++r) {
      host[r].assign(elems, 1e30f);  // padding columns: must never be read into a result
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < cols; ++x) host[r][static_cast<size_t>(y) * pitch + x] = g.uniform();
      pkt::upload(src.ptr[r], host[r]);
      pkt::upload(dst.ptr[r], init);
      maps.src[r] = make_map(src.ptr[r], rows, cols, pitch);
      maps.dst[r] = make_map(dst.ptr[r], rows, cols, pitch);
      maps.sum[r] = maps.dst[r];
    }
    pk::launch_cooperative(tile_kernel, dim3(world * kBlocksPerRank), dim3(kThreads), kSmemBytes,
                           nullptr, maps, world, rows, cols, kBlocksPerRank, mode, err);
    pkt::finish_launch(err);

    double max_err = 0;
    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], elems);
      const int prev = (p - 1 + world) % world;
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < pitch; ++x) {
          const size_t i = static_cast<size_t>(y) * pitch + x;
          if (x >= cols) {  // padding: untouched
            bad += d[i] != init[i];
            continue;
          }
          if (mode == kCopyToNext) {
            bad += d[i] != host[prev][i];
            max_err = std::max(max_err, std::fabs(static_cast<double>(d[i]) - host[prev][i]));
          } else {
            double ref = 0, sum_abs = 0;
            for (int r = 0; r < world; ++r) {
              ref += host[r][i];
              sum_abs += std::fabs(host[r][i]);
            }
            const double e = std::fabs(static_cast<double>(d[i]) - ref);
            max_err = std::max(max_err, e);
            bad += !(e <= pkt::sum_tolerance(world, pkt::kUnitRoundoffF32, sum_abs));
          }
        }
    }
    rep.emit(name, world, bytes, bad == 0, max_err,
             bad ? std::to_string(bad) + " elements wrong" : "");
  });
}

}  // namespace

int main() {
  pkt::init();
  pkt::report rep;
  const int shapes[][2] = {{64, 64}, {100, 70}, {1000, 333}};
  uint64_t seed = 400;
  for (int world : pkt::kWorlds)
    for (const auto& s : shapes) {
      case_tiles(rep, kCopyToNext, world, s[0], s[1], seed++);
      case_tiles(rep, kReduceToAll, world, s[0], s[1], seed++);
    }
  return rep.exit_code();
}
