// fused/fused.cuh: what every fused GEMM + communication kernel shares: the row partition, the
// tile order, the GEMM-side hooks (epilogues, prologue) and the block-role dispatch.
//
// A fused kernel is one launch over every (virtual) rank: rank r owns blocks
// [r * P, (r + 1) * P), P = gemm_blocks + comm_blocks; the first gemm_blocks of them run the
// persistent Hopper GEMM of kernels/gemm (pk::gemm::gemm_block on the rank's own parameters),
// the others run the op's communication routine (fused/comm.cuh). The op structs
// (fused/ops.cuh) choose an epilogue, a prologue and a communication routine from here.
//
// Row partition (reduce-scatter rows, all-gather shards): rank r owns rows
// [lo(r), lo(r + 1)) with lo(r) = floor(r * M / world); with M >= world every rank owns at least
// one row; `partition` points at the boundaries in the device table and finds the owner of a
// row by bisection. Neither tiles (BM rows) nor the 64-row sub-tiles of the epilogue need to
// line up with it.
//
// Sizes: every per-rank array (the ranks' GEMM parameters, tensor maps of every rank's output or
// shard, pointers, boundaries) lives in the caller's device table (fused/abi.h, fused/entry.cuh
// table_plan), so that the kernel parameter stays small at any world. Tensor maps there are
// acquired for the tensormap proxy before their first use (acquire_map).
//
// Tile order (rotated_raster): the GEMM's grouped raster with its tile rows rotated by m_shift,
// so that a rank can start at any row band: "staggered" starts rank r where the op wants it
// (ag-gemm: its own shard; gemm-rs / gemm-ar: the rows of rank r + 1), "sequential" starts
// every rank at row 0.
//
// Epilogues (the contract is pk::gemm's, gemm/gemm.cuh):
//   store_add_owners  each staged 64-column sub-tile is TMA-reduce-added (bf16) into the output
//                     of the rank owning its first row, through a tensor map of that rank's
//                     output (rows past the owner's end are out of bounds and skipped); the rows
//                     of any later owner of the same sub-tile go as 16-byte bulk reduce-adds;
//   store_add_all     the same into every rank's M x N output (all-reduce);
//   store_shard_rows  ag-gemm intra-SM: a TMA store through a tensor map of the rank's output,
//                     at the rows the tile's shard of A produces; a sub-tile that runs past its
//                     shard's end (into the padding) stores its rows before the end as 16-byte
//                     bulk copies, so the padding never reaches the next shard's rows;
//   store_signal      a plain TMA store into the rank's own partial buffer; once a consumer has
//                     stored its half of a tile it completes the writes (wait + proxy fence,
//                     pk::tma::complete_writes) and adds 1 to the tile's counter on every rank
//                     owning rows of the tile (pk::signal, release at system scope). A tile is
//                     complete on an owner when its counter reaches 2 consumers x world ranks
//                     per call.
// Prologues:
//   load_peer_rows    ag-gemm intra-SM: no wait; the producer loads the tile's A rows straight
//                     from the rank that owns them, through a tensor map of that rank's shard
//                     (pk::gemm's a_source hook). Tiles are laid out per shard (shard_tiles), so
//                     a tile never reads two shards;
//   wait_rows         before the first load of a tile, the producer thread waits until the
//                     tile's row band of the gathered A has arrived (counter = pieces copied),
//                     then fences for the async proxy (TMA loads). A wait that passes its
//                     deadline records the error and lets the loads go ahead, so the pipeline
//                     drains and the host reads the error instead of a hang.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "collectives/collective.cuh"
#include "gemm/gemm.cuh"
#include "pk/pk.cuh"
#include "abi.h"

namespace pkf {

using bf16 = __nv_bfloat16;

// ---- row partition ---------------------------------------------------------------------------

PK_HD int row_lo(int r, int M, int world) {
  return static_cast<int>(static_cast<long long>(r) * M / world);
}

// The partition as the device uses it: two arrays of the device table, so that no kernel
// divides or searches (the GEMM's consumers look owners up in the epilogue, with their
// accumulators live: a bisection there spilled 12 B, 32-bit divisions 28 B; ptxas -v, sm_90a,
// CUDA 13.0): lo[r] = row_lo(r, M, world) for r <= world, and the owner of every 64-row block
// (the epilogue's sub-tiles and the tiles start on such a block).
struct partition {
  const int* lo;       // world + 1 entries
  const int4* block;   // ceil(M / 64) entries: row 64 i's owner o, lo[o], lo[o + 1] (one load)
  int world;

  PK_HD int begin(int r) const { return lo[r]; }
  PK_HD int end(int r) const { return lo[r + 1]; }
  // The rank owning `row`, a multiple of 64 (a tile's or a sub-tile's first row), with its
  // rows: {owner, begin(owner), end(owner)}.
  PK_HD int4 owner_rows(int row) const { return block[row >> 6]; }
  PK_HD int owner(int row) const { return block[row >> 6].x; }
  static int blocks(int M) { return (M + 63) / 64; }
  // Host: the arrays into `lo_host` (world + 1) and `blk_host` (blocks(M)); the device view.
  static partition make(int* lo_host, int4* blk_host, const int* lo_dev, const int4* blk_dev, int M,
                        int world) {
    for (int r = 0; r <= world; ++r) lo_host[r] = row_lo(r, M, world);
    for (int b = 0, o = 0; b < blocks(M); ++b) {
      while (o + 1 < world && lo_host[o + 1] <= 64 * b) ++o;
      blk_host[b] = make_int4(o, lo_host[o], lo_host[o + 1], 0);
    }
    return partition{lo_dev, blk_dev, world};
  }
};

// Tiles laid out per shard (ag-gemm intra-SM): shard s's rows, padded up to whole BM-row tiles,
// occupy the "tile rows" [start[s], start[s + 1]) / BM of a virtual M' = start[world] that the
// GEMM runs on; virtual row v of shard s is row v - start[s] of the shard (row lo(s) + v -
// start[s] of A and of the output). A tile never straddles two shards, so its A box comes from
// one rank; the padding rows read as zeros (out of bounds of the shard's map) and are never
// stored. Costs at most world - 1 extra tile rows over ceil(M / BM). Both arrays live in the
// device table: the shard of every virtual tile row (one load finds a tile's shard) and where
// each shard starts.
struct shard_tiles {
  const int* start;  // world + 1 entries: virtual row where shard s starts (a multiple of BM)
  const int* shard_of;  // start[world] / BM entries: the shard of each virtual tile row
  int world, bm;

  // The shard holding virtual row v (0 <= v < start[world]).
  PK_HD int shard(int v) const { return shard_of[v / bm]; }
  // Host: both arrays into `start_host` (world + 1) and `of_host` (virtual rows / BM; at most
  // M / BM + world), the device view at `start_dev`, `of_dev`.
  static shard_tiles make(int* start_host, int* of_host, const int* start_dev, const int* of_dev,
                          int M, int world, int bm) {
    start_host[0] = 0;
    for (int s = 0; s < world; ++s) {
      const int rows = row_lo(s + 1, M, world) - row_lo(s, M, world);
      start_host[s + 1] = start_host[s] + (rows + bm - 1) / bm * bm;
      for (int t = start_host[s] / bm; t < start_host[s + 1] / bm; ++t) of_host[t] = s;
    }
    return shard_tiles{start_dev, of_dev, world, bm};
  }
  // Tile rows of the padded layout (the size of shard_of) for M rows over world shards.
  static int tile_rows(int M, int world, int bm) { return (M + bm - 1) / bm + world; }
};

// A tensor map written into device memory by the host (the device table): acquired for the
// tensormap proxy by a thread before its first TMA use of it.
PK_DEV void acquire_map(const CUtensorMap* m) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" : : "l"(m) : "memory");
}

// ---- tile order ------------------------------------------------------------------------------

struct rotated_raster {
  pk::gemm::grouped_raster base;
  int m_shift;  // tile rows to rotate by, in [0, base.num_m)

  PK_HD int tiles() const { return base.tiles(); }
  PK_HD void coords(int t, int& tm, int& tn) const {
    base.coords(t, tm, tn);
    tm += m_shift;
    if (tm >= base.num_m) tm -= base.num_m;
  }
};

// ---- epilogues -------------------------------------------------------------------------------

// gemm-rs, intra-SM: reduce-add each sub-tile into the owners of its rows.
struct store_add_owners {
  struct params {
    const CUtensorMap* out;  // device table: rank o's output, rows(o) x N, box [BM/2][64], 128B swizzle
    bf16* const* ptr;        // device table: the same outputs as pointers (rows past an owner boundary)
    partition rows;
    int n;
  };
  // The first owner of the sub-tile's rows takes the whole box through its tensor map (rows past
  // its end are out of bounds there and skipped). A later owner's rows start inside the box,
  // and a tensor store cannot start there: issued at a negative row coordinate it ended the
  // launch with an illegal instruction on the H200 (the only failing cases were
  // those crossing an owner boundary). Those rows go as 16-byte bulk reduce-adds, one per
  // 8-column chunk, read from the chunk's place in the 128-byte-swizzled buffer (chunk c of
  // buffer row r sits at 16 * (c ^ (r % 8)) in the row). Only boundary sub-tiles do this.
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    const int4 first = p.rows.owner_rows(s.row0);  // owner, its first row, its end
    pk::tma::store_add_tile_async(&p.out[first.x], s.col0, s.row0 - first.y, smem);
    if (first.z < s.row0 + s.rows) add_later_owners(p, s, first.x, smem);
  }
  // Kept out of line and lean: the consumer's accumulators are live around it.
  __device__ __noinline__ static void add_later_owners(const params& p,
                                                       const pk::gemm::subtile_info& s, int first,
                                                       const void* smem) {
    const int last = s.row0 + s.rows;
    const int chunks = s.cols / 8;
    const uint32_t sbase = pk::tma::smem_u32(smem);
    for (int o = first + 1; o < p.rows.world && p.rows.begin(o) < last; ++o) {
      int r = p.rows.begin(o) - s.row0;
      const int r1 = min(p.rows.end(o), last) - s.row0;
      uint64_t dst = pk::tma::gmem_u64(p.ptr[o] + s.col0);
#pragma unroll 1
      for (; r < r1; ++r, dst += 2ull * p.n) {
#pragma unroll 1
        for (int c = 0; c < chunks; ++c) {
          asm volatile(
              "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], 16;"
              :
              : "l"(dst + 16ull * c), "r"(sbase + r * 128 + ((c ^ (r & 7)) << 4))
              : "memory");
        }
      }
    }
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    for (int o = 0; o < p.rows.world; ++o) {
      acquire_map(&p.out[o]);
      pk::tma::prefetch_map(&p.out[o]);
    }
  }
};

// gemm-ar, intra-SM: reduce-add each sub-tile into every rank's output, starting at rank + 1.
struct store_add_all {
  struct params {
    const CUtensorMap* out;  // device table: rank o's output, M x N, box [BM/2][64], 128B swizzle
    int world, rank;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    for (int k = 1, o = p.rank + 1; k <= p.world; ++k, ++o) {
      if (o == p.world) o = 0;
      pk::tma::store_add_tile_async(&p.out[o], s.col0, s.row0, smem);
    }
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    for (int o = 0; o < p.world; ++o) {
      acquire_map(&p.out[o]);
      pk::tma::prefetch_map(&p.out[o]);
    }
  }
};

// ag-gemm, intra-SM: the rows of shard s go to rows [lo(s), lo(s + 1)) of the output, through
// one map of the rank's whole M x N output. The tile rows are laid out per shard (shard_tiles),
// padded to whole tiles: a sub-tile inside its shard is one TMA store; one that runs past its
// shard's end (into the padding) stores only its rows before the end, as 16-byte bulk copies
// read from the 128-byte-swizzled buffer (chunk c of buffer row r sits at 16 * (c ^ (r % 8))),
// so that the padding never lands on the next shard's rows; the last shard ends at M, where the
// map drops what lies past it. A sub-tile entirely in the padding stores nothing.
struct store_shard_rows {
  struct params {
    CUtensorMap out;   // this rank's output, M x N, box [BM/2][64], 128B swizzle
    bf16* base;        // the same output as a pointer
    partition rows;    // shard s = rows [lo(s), lo(s + 1))
    shard_tiles tiles;
    int n;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    const int sh = p.tiles.shard(s.row0);
    const int row = s.row0 - p.tiles.start[sh];
    const int lo = p.rows.begin(sh), have = p.rows.end(sh) - lo;
    if (row >= have) return;
    if (row + s.rows <= have || sh == p.rows.world - 1) {
      pk::tma::store_tile_async(&p.out, s.col0, lo + row, smem);
      return;
    }
    store_rows(p, s, lo + row, have - row, smem);
  }
  // Kept out of line and lean: the consumer's accumulators are live around it.
  __device__ __noinline__ static void store_rows(const params& p, const pk::gemm::subtile_info& s,
                                                 int out_row, int nrows, const void* smem) {
    const int chunks = s.cols / 8;
    const uint32_t sbase = pk::tma::smem_u32(smem);
    uint64_t dst = pk::tma::gmem_u64(p.base + static_cast<size_t>(out_row) * p.n + s.col0);
#pragma unroll 1
    for (int r = 0; r < nrows; ++r, dst += 2ull * p.n) {
#pragma unroll 1
      for (int c = 0; c < chunks; ++c) {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16;"
                     :
                     : "l"(dst + 16ull * c), "r"(sbase + r * 128 + ((c ^ (r & 7)) << 4))
                     : "memory");
      }
    }
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    acquire_map(&p.out);
    pk::tma::prefetch_map(&p.out);
  }
};

// Inter-SM: store the tile locally, then tell the owners of its rows.
struct store_signal {
  struct params {
    CUtensorMap partial;  // this rank's M x N partial buffer, box [BM/2][64], 128B swizzle
    pkc::flag_set<true> flags;  // counter t of rank o: tile t's halves stored for o
    partition rows;
    int num_n;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows > 0 && s.cols > 0) pk::tma::store_tile_async(&p.partial, s.col0, s.row0, smem);
  }
  PK_DEV static void tile_done(const params& p, const pk::gemm::tile_info& t, int) {
    pk::tma::complete_writes();  // this consumer's stores are in memory, ordered before...
    const int idx = t.tile_m * p.num_n + t.tile_n;
    const int last = t.row0 + t.rows;
    for (int o = p.rows.owner(t.row0); o < p.rows.world && p.rows.begin(o) < last; ++o)
      pk::red_release_sys(p.flags.at(o, idx), 1u);  // ...these releases
  }
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    acquire_map(&p.partial);
    pk::tma::prefetch_map(&p.partial);
  }
};

// ag-gemm, inter-SM: the plain local store (pk::gemm's), its map acquired from the device table.
struct store_local : pk::gemm::store_epilogue {
  PK_DEV static void prefetch(const params& p) {
    acquire_map(&p.c_map);
    pk::tma::prefetch_map(&p.c_map);
  }
};

// ---- prologues -------------------------------------------------------------------------------

// ag-gemm, intra-SM: the A rows of a tile come from the shard's owner (virtual ranks: another
// buffer on this device; real ranks: the peer's IPC-mapped shard), nothing to wait for.
struct load_peer_rows {
  struct params {
    const CUtensorMap* a;  // device table: rank s's shard of A, rows(s) x K, box [BM][64], 128B swizzle
    shard_tiles tiles;
  };
  PK_DEV static void before_loads(const params&, const pk::gemm::tile_info&) {}
  PK_DEV static const CUtensorMap* a_source(const params& p, const pk::gemm::tile_info& t,
                                            int& a_row) {
    const int sh = p.tiles.shard(t.row0);
    a_row = t.row0 - p.tiles.start[sh];
    return &p.a[sh];
  }
  PK_DEV static void prefetch_a(const params& p) {
    for (int s = 0; s < p.tiles.world; ++s) {
      acquire_map(&p.a[s]);
      pk::tma::prefetch_map(&p.a[s]);
    }
  }
};

// ag-gemm, inter-SM: wait for the rows of A a tile reads.
struct wait_rows {
  struct params {
    const unsigned int* band_flags;  // this rank's counters: pieces of each BM-row band copied
    pk::spin_ctx spin;
    partition rows;
    int rank;
    const unsigned int* seq;  // the device table's copy of pkf_args::seq (run() writes it)
  };
  PK_DEV static void before_loads(const params& p, const pk::gemm::tile_info& t) {
    // pieces of this band: one per shard that owns some of rows [row0, row0 + rows)
    const int last = t.row0 + t.rows;
    unsigned int pieces = 0;
    for (int o = p.rows.owner(t.row0); o < p.rows.world && p.rows.begin(o) < last; ++o) ++pieces;
    const unsigned int need = pieces * (*p.seq + 1u);
    pk::wait_geq(p.band_flags + t.tile_m, need, p.spin, p.rank, -1, t.tile_m);
    pk::tma::acquire_for_async_reads();
  }
};

// ---- the kernel body -------------------------------------------------------------------------

// Block b serves rank b / (gemm_blocks + comm_blocks); the first gemm_blocks of a rank's blocks
// compute, the rest communicate (Op::comm).
// Every block first checks that the device table was written for this call (a stale one would
// hand the GEMM tensor maps of other buffers); the threads that issue TMA on the rank's A and B
// maps (the producer, thread 0, and the consumers' leaders, who store through the epilogue's
// maps and acquire those in Epi::prefetch) acquire them.
// kWide: the kernel instance for worlds above 8 (fused/entry.cuh launch picks it).
template <class Op, bool kWide>
__device__ __forceinline__ void run(const typename Op::globals& g, unsigned char* smem) {
  const int per_rank = g.gemm_blocks + g.comm_blocks;
  const int rank = static_cast<int>(blockIdx.x) / per_rank;
  const int local = static_cast<int>(blockIdx.x) % per_rank;
  int ok = 1;
  if (threadIdx.x == 0) {
    if (g.table->hash != g.table_hash) {
      pk::record_error(g.err, pk::PK_ERR_STALE_TABLE, rank, -1, -1, static_cast<unsigned>(g.table_hash),
                       static_cast<unsigned>(g.table->hash));
      ok = 0;
    }
    // The call's seq, where table parameters read it (wait_rows): every block writes the same
    // value before its own thread 0 reads it, so no block can see another call's.
    *g.seq_slot = g.seq;
  }
  if (!__syncthreads_and(ok)) return;
  if (local < g.gemm_blocks) {
    const auto& p = kWide ? g.gemm[rank] : g.inl[rank];
    if (threadIdx.x == 0) {
      acquire_map(&p.a_map);
      acquire_map(&p.b_map);
    }
    pk::gemm::gemm_block<typename Op::cfg>(p, local, smem);
  } else {
    Op::template comm<kWide>(g, rank, local - g.gemm_blocks, smem);
  }
}

}  // namespace pkf
