// gemm/gemm.cuh: a persistent, warp-specialised Hopper GEMM (TMA + wgmma), bf16 in, fp32
// accumulate, with hook points for fused epilogues and prologues.
//
// C[M x N] = A[M x K] @ B[K x N], every matrix row-major (torch's layout for torch.matmul(A, B)):
// A is K-contiguous, B is N-contiguous (read by wgmma as an N-major operand, imm-trans-b = 1),
// C is N-contiguous. M, N, K are run-time values; K and N must be multiples of 8 (TMA needs
// 16-byte row pitches), M is free. Ragged edges: TMA loads fill out-of-bounds elements with
// zeros (so a K tail adds nothing), TMA stores drop out-of-bounds rows and columns.
//
// Block layout (config::THREADS = 384 threads, three warpgroups):
//   warpgroup 0      producer: setmaxnreg down to 40 registers; one thread walks the block's
//                    tiles and k-blocks and issues the TMA loads of each pipeline stage;
//   warpgroups 1, 2  consumers: setmaxnreg up to 232; consumer c owns rows
//                    [c * BM/2, (c + 1) * BM/2) of the tile, issues the wgmmas of every
//                    k-block and then runs the epilogue for its half of the tile.
// Pipeline: STAGES shared-memory stages, each with a `full` mbarrier (1 arrival + the TMA
// bytes) and an `empty` mbarrier (8 arrivals: lane 0 of every consumer warp, once the wgmmas
// that read the stage have completed, i.e. after wgmma.wait_group 1 of the next k-block).
// Stage and parity counters run on across tiles, so the producer prefetches the next tile's
// operands while the consumers are still in the previous tile's epilogue.
//
// Tile scheduler (persistent grid): GEMM block b of G handles linear tiles b, b + G, ...;
// `Sched::coords` turns a linear tile index into (tile_m, tile_n). The default,
// grouped_raster, walks bands of `group_m` tile rows column by column, so the G tiles in
// flight at once share A rows and B columns in L2.
//
// Clusters (config CLUSTER_M = 2, and CLUSTER_N = 2): the C = CLUSTER_M x CLUSTER_N blocks
// C u .. C u + C - 1 form a cluster and take the adjacent tiles of one "cluster tile" (the
// scheduler then deals cluster tiles, CLUSTER_M BM rows high and CLUSTER_N BN columns wide, to
// the G / C clusters). With CLUSTER_M = 2 each block loads half of the B boxes, multicast into
// the block below or above it (same columns); with CLUSTER_N = 2 half of the A rows, multicast
// into the block beside it (same rows). A stage's `empty` barrier then waits for the consumer
// warps of every block its producer writes into (8 arrivals per block, the remote ones through
// mapa), and a cluster barrier at the start (barrier initialisation) and at the end (no block
// leaves while a peer may still arrive on its barriers) keeps them in step. At the bottom
// (right) edge a block of a cluster may get a tile row (column) past M (N): it loads valid
// boxes to stay in step with its peers, and the epilogue hooks are not called for it (the
// prologue hook is).
//
// Hooks (template parameters; see store_epilogue and no_prologue below for the contracts):
//   Epi  the epilogue. The kernel converts each finished fp32 sub-tile (BM/2 rows x 64
//        columns of one consumer) to bf16 in a 128-byte-swizzled shared-memory buffer (the
//        layout a SWIZZLE_128B tensor map with a 64-column box reads), fences it for the
//        async proxy, and then calls, on one elected thread of the consumer warpgroup,
//          Epi::store_subtile(epi_params, tile_info, subtile_info, smem_buffer)
//        which issues bulk operations reading that buffer (the kernel commits them as one
//        bulk group and waits for the group's reads before reusing the buffer);
//          Epi::tile_done(epi_params, tile_info, consumer)
//        after a consumer's last sub-tile of a tile (e.g. complete the writes and signal a
//        flag: tma::complete_writes() then pk::signal; each of the 2 consumers calls it); and
//          Epi::finish(epi_params, consumer)
//        once per consumer at the end (drain the outstanding bulk groups).
//        store_epilogue = a local TMA store; a store-add into another rank's buffer only
//        swaps store_tile_async for store_add_tile_async on a map of that rank's buffer.
//   Pro  the prologue: Pro::before_loads(pro_params, tile_info) runs on the producer thread
//        before the first TMA load of a tile (e.g. wait on the flag that says a peer's A rows
//        have arrived, then tma::acquire_for_async_reads()). A prologue may also choose where
//        each tile's A rows come from: if it declares
//          static const CUtensorMap* a_source(const params&, const tile_info&,
//                                             const CUtensorMap* own, int& a_row)
//        the producer loads the tile's A boxes through the map it returns (`own` is &p.a_map),
//        at the row it leaves in a_row (it is called with the tile's row there), instead of
//        p.a_map at the tile's row;
//          static void prefetch_a(const params&, const CUtensorMap* own)
//        then replaces the prefetch of p.a_map (e.g. a tensor map per rank's shard of A, the
//        tile's shard picked by its row). Without a_source the producer is the plain one
//        (detected at compile time; the plain GEMM's code does not change).
//
// Grid and co-scheduling: the GEMM blocks are the blocks first_block .. first_block +
// num_blocks - 1 of the launch; the standalone kernel returns in every other block (with
// clusters, first_block and num_blocks are even and the launch has a cluster dimension of
// 2). A fused kernel calls gemm_block<Cfg>(params, blockIdx.x - first_block, smem) from its
// GEMM blocks and runs communication in the others (gemm_block returns in every thread once
// the block's share is done); it must be declared __launch_bounds__(384, 1) (the
// register cap setmaxnreg needs), launched with 384 threads and at least Cfg::SMEM_BYTES of
// dynamic shared memory, and `params` must be the kernel's __grid_constant__ parameter (the
// TMA instructions take the generic address of the tensor maps inside it). Named barriers 1
// and 2 belong to the consumer warpgroups.
//
// Deadlines: every mbarrier wait traps after PK_GEMM_TIMEOUT_CYCLES clock64() cycles, so a
// broken pipeline ends the launch with an error instead of hanging the GPU.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <type_traits>

#include "pk/common.cuh"
#include "pk/tma.cuh"
#include "gemm/wgmma.cuh"

#ifndef PK_GEMM_TIMEOUT_CYCLES
#define PK_GEMM_TIMEOUT_CYCLES (1LL << 33)  // about 4.3 s at 1.98 GHz
#endif

namespace pk {
namespace gemm {

// Compile-time tile shape. BM rows x BN columns per tile, BK of K per pipeline stage.
// CLUSTER_M = 2 pairs blocks into clusters that compute vertically adjacent tiles (same
// columns of B): each block loads half of the stage's B boxes and multicasts them to both.
// CLUSTER_N = 2 pairs them horizontally too (same rows of A): each block loads half of the A
// rows (boxes of BM / 2 rows) and multicasts them to its row peer. Cluster rank
// r = m_rank + CLUSTER_M * n_rank; the block computes tile (CLUSTER_M * cm + m_rank,
// CLUSTER_N * cn + n_rank) of cluster tile (cm, cn).
template <int BM_, int BN_, int BK_, int STAGES_, int EPI_BUFS_ = 2, int CLUSTER_M_ = 1,
          int CLUSTER_N_ = 1>
struct config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, EPI_BUFS = EPI_BUFS_;
  static constexpr int CLUSTER_M = CLUSTER_M_, CLUSTER_N = CLUSTER_N_;
  static constexpr int CLUSTER = CLUSTER_M * CLUSTER_N;  // blocks per cluster
  // Blocks whose consumers read what this block's producer writes (itself included).
  static constexpr int SHARERS = 1 + (CLUSTER_M > 1) + (CLUSTER_N > 1);
  static constexpr int CONSUMERS = 2;
  static constexpr int THREADS = 128 * (1 + CONSUMERS);
  static constexpr int PRODUCER_REGS = 40;
  static constexpr int CONSUMER_REGS = 232;
  static constexpr int SPAN = 64;                     // bf16 elements in one 128-byte swizzle span
  static constexpr int WG_ROWS = BM / CONSUMERS;      // rows of a tile per consumer warpgroup
  static constexpr int M_BLOCKS = WG_ROWS / 64;       // m64 wgmmas per 16-wide k-slice
  static constexpr int A_BOXES = BK / SPAN;           // A boxes per stage: [BM rows][64 cols]
  static constexpr int B_BOXES = BN / SPAN;           // B boxes per stage: [BK rows][64 cols]
  static constexpr int A_BOX_BYTES = BM * SPAN * 2;
  static constexpr int B_BOX_BYTES = BK * SPAN * 2;
  static constexpr int A_BYTES = A_BOXES * A_BOX_BYTES;
  static constexpr int B_BYTES = B_BOXES * B_BOX_BYTES;
  static constexpr int B_BOXES_OWN = B_BOXES / CLUSTER_M;  // B boxes this block loads
  static constexpr int A_BOX_ROWS = BM / CLUSTER_N;        // rows of the A boxes it loads
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int EPI_BYTES = WG_ROWS * SPAN * 2;  // one staged sub-tile of one consumer
  static constexpr int BARRIER_BYTES = 2 * STAGES * 8;
  static constexpr int SMEM_BYTES =
      1024 + STAGES * STAGE_BYTES + CONSUMERS * EPI_BUFS * EPI_BYTES + BARRIER_BYTES;

  static_assert(BK % SPAN == 0 && BK >= SPAN && BK <= 256, "BK must be 64, 128, 192 or 256");
  static_assert(BN == 128 || BN == 256, "BN must be 128 or 256 (one m64nBNk16 wgmma)");
  static_assert(WG_ROWS % 64 == 0 && WG_ROWS <= 256, "BM must be 128, 256, 384 or 512");
  static_assert(M_BLOCKS * BN / 2 <= 128, "more than 128 accumulators per consumer thread");
  static_assert(STAGES >= 2, "need at least two pipeline stages");
  static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "clusters of 1 or 2 blocks along M");
  static_assert(CLUSTER_N == 1 || CLUSTER_N == 2, "clusters of 1 or 2 blocks along N");
  static_assert(B_BOXES % CLUSTER_M == 0, "B boxes must split evenly over the cluster");
  static_assert(EPI_BUFS >= 1 && EPI_BUFS <= 4, "1 to 4 epilogue staging buffers");
  static_assert(SMEM_BYTES <= 232448, "tile shape needs more than 227 KiB of shared memory");
  static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536,
                "register split exceeds the register file");
};

// Where a tile lies. rows / cols are the in-bounds extents (<= BM, BN).
struct tile_info {
  int tile_m, tile_n;
  int row0, col0;
  int rows, cols;
};

// One consumer's staged sub-tile: rows [row0, row0 + rows) x cols [col0, col0 + cols) of C
// (clipped extents; may be 0 at the bottom/right edge, then store nothing).
struct subtile_info {
  int row0, col0;
  int rows, cols;
  int consumer;  // 0 or 1
  int index;     // 0 .. BN/64 - 1 within the tile
};

// Grouped raster order: bands of group_m tile rows, walked column by column.
struct grouped_raster {
  int num_m, num_n, group_m;

  PK_HD int tiles() const { return num_m * num_n; }
  PK_HD void coords(int t, int& tm, int& tn) const {
    const int per_band = group_m * num_n;
    const int band = t / per_band;
    const int first = band * group_m;
    const int height = min(group_m, num_m - first);
    const int r = t - band * per_band;
    tm = first + r % height;
    tn = r / height;
  }
};

// (a) the plain epilogue: TMA-store each staged sub-tile into C.
struct store_epilogue {
  struct params {
    CUtensorMap c_map;  // C: M x N bf16, box [BM/2 rows][64 cols], SWIZZLE_128B
  };
  PK_DEV static void store_subtile(const params& p, const tile_info&, const subtile_info& s,
                                   const void* smem) {
    if (s.rows > 0 && s.cols > 0) tma::store_tile_async(&p.c_map, s.col0, s.row0, smem);
  }
  PK_DEV static void tile_done(const params&, const tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) { tma::prefetch_map(&p.c_map); }
};

struct no_prologue {
  struct params {};
  PK_DEV static void before_loads(const params&, const tile_info&) {}
};

template <class Epi, class Pro = no_prologue, class Sched = grouped_raster>
struct params {
  CUtensorMap a_map;  // A: M x K, box [BM rows][64 cols], SWIZZLE_128B
  CUtensorMap b_map;  // B: K x N, box [BK rows][64 cols], SWIZZLE_128B
  typename Epi::params epi;
  typename Pro::params pro;
  Sched sched;
  int M, N, K;
  int k_blocks;     // ceil(K / BK)
  int first_block;  // index of the first GEMM block in the launch
  int num_blocks;   // number of persistent GEMM blocks
  uint32_t b_lbo;   // B descriptor strides (bytes); set by the host (make_params)
  uint32_t b_sbo;
};

namespace detail {

// Does the prologue choose the A tensor map per tile (Pro::a_source)?
template <class Pro, class = void>
struct has_a_source : std::false_type {};
template <class Pro>
struct has_a_source<Pro, std::void_t<decltype(&Pro::a_source)>> : std::true_type {};

PK_DEV void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];"
               :
               : "r"(tma::smem_u32(bar))
               : "memory");
}

// Arrive on the mbarrier at the same shared-memory offset in block `cta` of the cluster.
// The consumers arrive here to say "this stage's operands are read": the reads are the
// wgmmas', complete before the arrival (wgmma.wait_group), so the arrival needs no
// cluster-scope release. It is a CTA-scope release (PTX: mbarrier.arrive{.sem}{.scope}
// .shared::cluster, .sem release | relaxed, .scope cta | cluster): with .release.cluster,
// ptxas (sm_90a, CUDA 13.0) puts MEMBAR.ALL.GPU + ERRBAR before every arrival, two per
// consumer warp and k-block: what held the clustered variant back (docs/PERFORMANCE.md,
// "Hopper GEMM against torch.matmul").
PK_DEV void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n\t"
      ".reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote];\n\t"
      "}"
      :
      : "r"(tma::smem_u32(bar)), "r"(cta)
      : "memory");
}

PK_DEV uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// All threads of all blocks of the cluster (also orders shared-memory accesses among them).
PK_DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// A TMA tile load written to the same offset of every block in `mask`, completing on the
// mbarrier at the same offset in each of them.
PK_DEV void load_tile_multicast(void* smem_dst, const CUtensorMap* map, int c0, int c1,
                                uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
      :
      : "r"(tma::smem_u32(smem_dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1),
        "r"(tma::smem_u32(bar)), "h"(mask)
      : "memory");
}

PK_DEV void mbar_wait_or_trap(uint64_t* bar, uint32_t parity) {
  if (tma::mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
  while (!tma::mbar_try_wait(bar, parity)) {
    if (clock64() - start > PK_GEMM_TIMEOUT_CYCLES) __trap();
  }
}

PK_DEV uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

PK_DEV void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" : : "r"(addr), "r"(v) : "memory");
}

// The scheduler deals cluster tiles (CLUSTER_M tile rows high, CLUSTER_N tile columns wide);
// the block of ranks (m_rank, n_rank) takes tile (tile_m * CLUSTER_M + m_rank,
// tile_n * CLUSTER_N + n_rank).
template <class Cfg, class Sched>
PK_DEV tile_info make_tile(const Sched& sched, int t, int M, int N, int m_rank, int n_rank) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN;
  tile_info ti;
  sched.coords(t, ti.tile_m, ti.tile_n);
  ti.tile_m = ti.tile_m * Cfg::CLUSTER_M + m_rank;
  ti.tile_n = ti.tile_n * Cfg::CLUSTER_N + n_rank;
  ti.row0 = ti.tile_m * BM;
  ti.col0 = ti.tile_n * BN;
  ti.rows = min(BM, M - ti.row0);
  ti.cols = min(BN, N - ti.col0);
  return ti;
}

}  // namespace detail

// The whole life of one persistent GEMM block. `block` in [0, p.num_blocks).
template <class Cfg, class Epi, class Pro, class Sched>
__device__ __forceinline__ void gemm_block(const params<Epi, Pro, Sched>& p, int block,
                                           unsigned char* smem_raw) {
  using C = Cfg;
  unsigned char* smem = tma::align_smem<1024>(smem_raw);
  unsigned char* a_s = smem;
  unsigned char* b_s = a_s + C::STAGES * C::A_BYTES;
  unsigned char* c_s = b_s + C::STAGES * C::B_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(c_s + C::CONSUMERS * C::EPI_BUFS * C::EPI_BYTES);
  uint64_t* empty = full + C::STAGES;

  const int wgi = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      tma::mbar_init(&full[s], 1);
      tma::mbar_init(&empty[s], C::CONSUMERS * 4 * C::SHARERS);
    }
    tma::mbar_init_fence();
  }
  if constexpr (C::CLUSTER > 1) {
    detail::cluster_sync();  // the peers' barriers are initialised before anyone uses them
  } else {
    __syncthreads();
  }

  // Tiles are dealt per cluster: unit u of U handles cluster tiles u, u + U, ...
  const int tiles = p.sched.tiles();
  const int rank = C::CLUSTER > 1 ? static_cast<int>(detail::cluster_ctarank()) : 0;
  const int m_rank = rank % C::CLUSTER_M, n_rank = rank / C::CLUSTER_M;
  const int unit = block / C::CLUSTER;
  const int units = p.num_blocks / C::CLUSTER;
  if (wgi == 0) {
    // ---------------- producer ----------------
    wg::set_max_regs_dec<C::PRODUCER_REGS>();
    if (tid == 0) {
      if constexpr (detail::has_a_source<Pro>::value) {
        Pro::prefetch_a(p.pro, &p.a_map);
      } else {
        tma::prefetch_map(&p.a_map);
      }
      tma::prefetch_map(&p.b_map);
      int s = 0;
      uint32_t phase = 0;
      for (int t = unit; t < tiles; t += units) {
        const tile_info ti = detail::make_tile<C>(p.sched, t, p.M, p.N, m_rank, n_rank);
        // A tile row past M (the lower block of a cluster at the bottom edge) or column past N
        // (the right one at the right edge) still loads valid boxes, so that the pipeline
        // stays in step with the peers; it is never stored.
        int a_row = ti.rows > 0 ? ti.row0 : 0;
        const int b_col = (C::CLUSTER_N == 1 || ti.cols > 0) ? ti.col0 : 0;
        const CUtensorMap* a_map = &p.a_map;
        if constexpr (detail::has_a_source<Pro>::value)
          a_map = Pro::a_source(p.pro, ti, &p.a_map, a_row);
        Pro::before_loads(p.pro, ti);
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          detail::mbar_wait_or_trap(&empty[s], phase ^ 1u);
          tma::mbar_arrive_expect_tx(&full[s], C::STAGE_BYTES);
          const int k0 = kb * C::BK;
          unsigned char* a_dst = a_s + s * C::A_BYTES;
          unsigned char* b_dst = b_s + s * C::B_BYTES;
          if constexpr (C::CLUSTER_N == 1) {
#pragma unroll
            for (int i = 0; i < C::A_BOXES; ++i)
              tma::load_tile_async(a_dst + i * C::A_BOX_BYTES, a_map, k0 + i * C::SPAN, a_row,
                                   &full[s]);
          } else {
            // Rows [n_rank * BM/2, (n_rank + 1) * BM/2) of the tile, to both blocks of the
            // same m_rank (ranks m_rank and m_rank + CLUSTER_M).
            const uint16_t a_mask =
                static_cast<uint16_t>((1u << m_rank) | (1u << (m_rank + C::CLUSTER_M)));
#pragma unroll
            for (int i = 0; i < C::A_BOXES; ++i)
              detail::load_tile_multicast(a_dst + i * C::A_BOX_BYTES + n_rank * C::A_BOX_ROWS * 128,
                                          a_map, k0 + i * C::SPAN, a_row + n_rank * C::A_BOX_ROWS,
                                          &full[s], a_mask);
          }
          if constexpr (C::CLUSTER_M == 1) {
#pragma unroll
            for (int j = 0; j < C::B_BOXES; ++j)
              tma::load_tile_async(b_dst + j * C::B_BOX_BYTES, &p.b_map, b_col + j * C::SPAN,
                                   k0, &full[s]);
          } else {
            // Boxes [m_rank * B_BOXES_OWN, ...) of the tile's B, to both blocks of the same
            // n_rank (ranks CLUSTER_M * n_rank and the next).
            const uint16_t b_mask =
                static_cast<uint16_t>(((1u << C::CLUSTER_M) - 1) << (C::CLUSTER_M * n_rank));
#pragma unroll
            for (int jo = 0; jo < C::B_BOXES_OWN; ++jo) {
              const int j = m_rank * C::B_BOXES_OWN + jo;
              detail::load_tile_multicast(b_dst + j * C::B_BOX_BYTES, &p.b_map,
                                          b_col + j * C::SPAN, k0, &full[s], b_mask);
            }
          }
          if (++s == C::STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    // ---------------- consumers ----------------
    wg::set_max_regs_inc<C::CONSUMER_REGS>();
    const int c = wgi - 1;
    const int warp = tid / 32;
    const int lane = tid % 32;
    if (tid == 0) Epi::prefetch(p.epi);

    // Descriptor of stage 0, k-slice 0, for this consumer's first m64 block; everything else is
    // a byte offset added to the (14-bit, >> 4) address field.
    const uint64_t a_desc0 =
        wg::smem_desc(tma::smem_u32(a_s) + c * C::WG_ROWS * 128, 16, 1024);
    const uint64_t b_desc0 = wg::smem_desc(tma::smem_u32(b_s), p.b_lbo, p.b_sbo);
    const uint32_t c_base = tma::smem_u32(c_s + c * C::EPI_BUFS * C::EPI_BYTES);

    // A stage is free once every consumer warp of every block its producer writes into has
    // released it: this block, its column peer (rank ^ 1, the other half of B) and its row
    // peer (rank ^ CLUSTER_M, the other half of A).
    auto release = [rank](uint64_t* bar) {
      if constexpr (C::CLUSTER == 1) {
        detail::mbar_arrive(bar);
      } else {
        detail::mbar_arrive_cluster(bar, rank);
        if constexpr (C::CLUSTER_M > 1) detail::mbar_arrive_cluster(bar, rank ^ 1);
        if constexpr (C::CLUSTER_N > 1) detail::mbar_arrive_cluster(bar, rank ^ C::CLUSTER_M);
      }
    };

    float acc[C::M_BLOCKS][C::BN / 2];
    int s = 0;
    uint32_t phase = 0;
    int epi_seq = 0;

    for (int t = unit; t < tiles; t += units) {
      const tile_info ti = detail::make_tile<C>(p.sched, t, p.M, p.N, m_rank, n_rank);
      const bool stored = ti.rows > 0 && (C::CLUSTER_N == 1 || ti.cols > 0);

#pragma unroll
      for (int mb = 0; mb < C::M_BLOCKS; ++mb)
#pragma unroll
        for (int r = 0; r < C::BN / 2; ++r) wg::keep(acc[mb][r]);

      int prev = 0;
      for (int kb = 0; kb < p.k_blocks; ++kb) {
        detail::mbar_wait_or_trap(&full[s], phase);
        __syncwarp();
        wg::fence();
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; ++kk) {
          const uint64_t b_desc = b_desc0 + ((s * C::B_BYTES + kk * 16 * 128) >> 4);
#pragma unroll
          for (int mb = 0; mb < C::M_BLOCKS; ++mb) {
            const uint32_t a_off = s * C::A_BYTES + (kk / 4) * C::A_BOX_BYTES + mb * 64 * 128 +
                                   (kk % 4) * 32;
            wg::mma_m64k16<C::BN, 1>(acc[mb], a_desc0 + (a_off >> 4), b_desc,
                                     (kb > 0 || kk > 0) ? 1 : 0);
          }
        }
        wg::commit();
        wg::wait<1>();
        if (kb > 0 && lane == 0) release(&empty[prev]);
        prev = s;
        if (++s == C::STAGES) {
          s = 0;
          phase ^= 1u;
        }
      }
      wg::wait<0>();
      if (lane == 0) release(&empty[prev]);
#pragma unroll
      for (int mb = 0; mb < C::M_BLOCKS; ++mb)
#pragma unroll
        for (int r = 0; r < C::BN / 2; ++r) wg::keep(acc[mb][r]);

      // ---- epilogue: one 64-column sub-tile at a time through the staging buffers ----
      const int sub_row0 = ti.row0 + c * C::WG_ROWS;
#pragma unroll
      for (int i = 0; i < C::B_BOXES; ++i) {
        const int buf = epi_seq % C::EPI_BUFS;
        const uint32_t sb = c_base + buf * C::EPI_BYTES;
        if (tid == 0) tma::wait_group_read<C::EPI_BUFS - 1>();
        wg::named_sync(1 + c, 128);
        const int rq = lane / 4;  // row within the 8-row group (= row % 8)
#pragma unroll
        for (int mb = 0; mb < C::M_BLOCKS; ++mb) {
          const uint32_t row_addr = sb + (mb * 64 + warp * 16 + rq) * 128 + (lane % 4) * 4;
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) {
            const int j = i * 8 + jj;
            const uint32_t a0 = row_addr + ((jj ^ rq) << 4);
            detail::st_shared_u32(a0, detail::pack_bf16x2(acc[mb][4 * j], acc[mb][4 * j + 1]));
            detail::st_shared_u32(a0 + 8 * 128,
                                  detail::pack_bf16x2(acc[mb][4 * j + 2], acc[mb][4 * j + 3]));
          }
        }
        tma::fence_shared_to_async();
        wg::named_sync(1 + c, 128);
        if (tid == 0) {
          subtile_info si;
          si.row0 = sub_row0;
          si.col0 = ti.col0 + i * C::SPAN;
          si.rows = max(0, min(C::WG_ROWS, p.M - si.row0));
          si.cols = max(0, min(C::SPAN, p.N - si.col0));
          si.consumer = c;
          si.index = i;
          if (stored)
            Epi::store_subtile(p.epi, ti, si, c_s + (c * C::EPI_BUFS + buf) * C::EPI_BYTES);
          tma::commit_group();
        }
        ++epi_seq;
      }
      if (tid == 0 && stored) Epi::tile_done(p.epi, ti, c);
    }
    if (tid == 0) Epi::finish(p.epi, c);
  }  // consumers

  // No block of a cluster may leave while a peer can still arrive on its barriers.
  if constexpr (C::CLUSTER > 1) detail::cluster_sync();
}

// The standalone kernel: GEMM blocks only (blocks below first_block do nothing).
template <class Cfg, class Epi, class Pro, class Sched>
__global__ void __launch_bounds__(Cfg::THREADS, 1)
    gemm_kernel(const __grid_constant__ params<Epi, Pro, Sched> p) {
  extern __shared__ __align__(1024) unsigned char gemm_smem[];
  const int b = static_cast<int>(blockIdx.x) - p.first_block;
  if (b < 0 || b >= p.num_blocks) return;
  gemm_block<Cfg>(p, b, gemm_smem);
}

}  // namespace gemm
}  // namespace pk
