// test_tensor_map.cu: 2-D tensor-map (cp.async.bulk.tensor) tile loads, stores and reduce-adds
// between virtual ranks (pk/tma.cuh).
//
// Tensor maps are encoded on the host with pk::make_tile_map_2d (pk/host.cuh:
// cuTensorMapEncodeTiled fetched from the driver through cudaGetDriverEntryPointByVersion, so
// the program links against the runtime only). Each rank gets maps for its own matrices; the
// kernel receives all of them in one __grid_constant__ parameter and indexes them by rank.
//
// Cases, for world sizes 2, 4, 8 and matrices with ragged edges (rows, cols not multiples of
// the 32 x 64 box). Every row has three column regions:
//   data   [0, cols)                        the matrix;
//   slack  [cols, tma_store_cols(cols))     up to the next 16-byte boundary: tile stores write
//                                            whole 16-byte chunks, so a box crossing the right
//                                            edge may write here (what the tile holds there:
//                                            zeros, the load's out-of-bounds fill);
//   guard  [tma_store_cols(cols), pitch)    one more 16-byte chunk that nothing may write.
//   tmap_copy    rank r loads each tile of its matrix (bulk tensor load, mbarrier, two stages)
//                and stores it at the same coordinates into rank r+1's matrix (bulk tensor
//                store). Out-of-bounds box parts must be zero on load (the slack may only
//                change from the sentinel to 0, never to the source's 1e30 padding) and not
//                written on store beyond the slack (the guard keeps its sentinel).
//   tmap_reduce  every rank reduce-adds each tile into every rank's zeroed sum matrix; checked
//                against an fp32 reference with a world-size-dependent tolerance; slack and
//                guard stay 0.
// A failing case names the first wrong element: rank, (row, col), region, expected, got. How
// many slack elements the stores changed is reported on stderr (hardware behaviour, not a
// failure; on the H200 a copy changes all of them to 0, a reduce-add of zeros none).
#include <cstring>
#include <sstream>

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

CUtensorMap make_map(float* base, int rows, int cols, int pitch) {
  return pk::make_tile_map_2d(base, static_cast<size_t>(rows), static_cast<size_t>(cols),
                              static_cast<size_t>(pitch), kBoxRows, kBoxCols);
}

// The first wrong element of a case, for the failure message.
struct first_bad {
  size_t count = 0;
  std::string where;
  void note(int rank, int row, int col, const char* region, const std::string& expected,
            float got) {
    if (count++ > 0) return;
    std::ostringstream os;
    os.precision(9);
    os << "first at rank " << rank << " (row " << row << ", col " << col << ", " << region
       << "): expected " << expected << ", got " << got;
    where = os.str();
  }
};

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

void case_tiles(pkt::report& rep, int mode, int world, int rows, int cols, uint64_t seed) {
  const char* name = mode == kCopyToNext ? "tmap_copy" : "tmap_reduce";
  const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(float);
  rep.run(name, world, bytes, [&] {
    // Row pitch: the store footprint (cols rounded up to 16 bytes) plus one guard chunk.
    const int store_cols = static_cast<int>(pk::tma_store_cols<float>(static_cast<size_t>(cols)));
    const int pitch = store_cols + static_cast<int>(16 / sizeof(float));
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
    first_bad bad;
    size_t slack_written = 0, slack_total = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], elems);
      const int prev = (p - 1 + world) % world;
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < pitch; ++x) {
          const size_t i = static_cast<size_t>(y) * pitch + x;
          if (x >= store_cols) {  // guard: no store may reach it
            if (d[i] != init[i]) bad.note(p, y, x, "guard", fmt(init[i]) + " (untouched)", d[i]);
            continue;
          }
          if (x >= cols) {  // slack: untouched, or written with the load's zero fill
            ++slack_total;
            slack_written += d[i] != init[i];
            if (d[i] != init[i] && d[i] != 0.0f)
              bad.note(p, y, x, "slack", fmt(init[i]) + " or 0", d[i]);
            continue;
          }
          if (mode == kCopyToNext) {
            const double e = std::fabs(static_cast<double>(d[i]) - host[prev][i]);
            max_err = std::max(max_err, std::isnan(e) ? 1e300 : e);
            if (d[i] != host[prev][i]) bad.note(p, y, x, "data", fmt(host[prev][i]), d[i]);
          } else {
            double ref = 0, sum_abs = 0;
            for (int r = 0; r < world; ++r) {
              ref += host[r][i];
              sum_abs += std::fabs(host[r][i]);
            }
            const double e = std::fabs(static_cast<double>(d[i]) - ref);
            const double tol = pkt::sum_tolerance(world, pkt::kUnitRoundoffF32, sum_abs);
            max_err = std::max(max_err, std::isnan(e) ? 1e300 : e);
            if (!(e <= tol)) bad.note(p, y, x, "data", fmt(ref) + " +- " + fmt(tol), d[i]);
          }
        }
    }
    if (slack_total > 0)
      std::fprintf(stderr, "%s world %d %dx%d: %zu of %zu slack elements changed by the stores\n",
                   name, world, rows, cols, slack_written, slack_total);
    rep.emit(name, world, bytes, bad.count == 0, max_err,
             bad.count ? std::to_string(bad.count) + " elements wrong; " + bad.where : "");
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
