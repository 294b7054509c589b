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
// one row; `partition` points at the boundaries in the device table and looks up the owner of a
// 64-row block. In the inter-SM ops neither tiles (BM rows) nor the 64-row sub-tiles of the
// epilogue need to line up with it (the owners pull what they own); the intra-SM gemm-rs and
// ag-gemm lay their tiles out per owner (owner_tiles, below).
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
// Tiles per owner (owner_tiles; the intra-SM gemm-rs and ag-gemm): the GEMM runs on a virtual
// M' where the rows of each owner (gemm-rs: the rank owning those output rows; ag-gemm: the
// rank holding that shard of A) are padded up to whole BM-row tiles, so that no tile and no
// sub-tile ever holds rows of two owners. Every store is then one TMA store through a map
// whose extent ends where the owner's rows end: the map drops the padding rows, and nothing
// else is needed at an owner boundary (docs/decisions/D65.md).
//
// Epilogues (the contract is pk::gemm's, gemm/gemm.cuh):
//   store_add_owners  gemm-rs intra-SM: each staged 64-column sub-tile is TMA-reduce-added
//                     (bf16) into the output of the owner of its tile, through a tensor map of
//                     that rank's rows(o) x N output (the padding rows fall outside it);
//   store_add_all     the same into every rank's M x N output (all-reduce);
//   store_shard_rows  ag-gemm intra-SM: a TMA store through a tensor map of the rows of the
//                     tile's shard in this rank's output (rows [lo(s), lo(s + 1)): the padding
//                     rows fall outside it);
//   store_signal      a plain TMA store into the rank's own partial buffer; once a consumer has
//                     stored its half of a tile it completes the writes (wait + proxy fence,
//                     pk::tma::complete_writes) and adds 1 to the tile's counter on every rank
//                     owning rows of the tile (pk::signal, release at system scope). A tile is
//                     complete on an owner when its counter reaches 2 consumers x world ranks
//                     per call.
// Prologues:
//   owner_rows        gemm-rs intra-SM: a tile of owner o's padded rows loads its A rows from
//                     row lo(o) + (its row in the owner's padded rows) of the rank's own A
//                     (pk::gemm's a_source hook; rows past M read as zeros);
//   load_peer_rows    ag-gemm intra-SM: no wait; the producer loads the tile's A rows straight
//                     from the rank that owns them, through a tensor map of that rank's shard
//                     (the a_source hook; the padding rows read as zeros);
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

// Tiles laid out per owner (the intra-SM gemm-rs and ag-gemm): owner o's rows, padded up to
// whole BM-row tiles, occupy the tile rows [start[o], start[o + 1]) / BM of a virtual
// M' = start[world] that the GEMM runs on; virtual row v of owner o is row v - start[o] of the
// owner (row lo(o) + v - start[o] of A and of the full output). Costs at most world - 1 tile rows
// over ceil(M / BM). Both arrays live in the device table: the owner of every virtual tile row
// (one load finds a tile's owner) and where each owner starts.
struct owner_tiles {
  const int* start;     // world + 1 entries: virtual row where owner o starts (a multiple of BM)
  const int* owner_of;  // start[world] / BM entries: the owner of each virtual tile row
  const int* lo;        // world + 1 entries: the partition, lo(o) (partition::lo)
  int world, bm;

  // The owner of virtual row v (0 <= v < start[world]).
  PK_HD int owner(int v) const { return owner_of[v / bm]; }
  // {owner of virtual row v, v's row among that owner's rows}; the row may lie in the
  // padding, at or past rows(owner).
  PK_HD int2 locate(int v) const {
    const int o = owner(v);
    return make_int2(o, v - start[o]);
  }
  PK_HD int rows(int o) const { return lo[o + 1] - lo[o]; }
  // Host: both arrays into `start_host` (world + 1) and `of_host` (at most tile_rows entries),
  // the device view at `start_dev`, `of_dev`, with the partition's boundaries at `lo_dev`.
  static owner_tiles make(int* start_host, int* of_host, const int* start_dev, const int* of_dev,
                          const int* lo_dev, int M, int world, int bm) {
    start_host[0] = 0;
    for (int o = 0; o < world; ++o) {
      const int rows = row_lo(o + 1, M, world) - row_lo(o, M, world);
      start_host[o + 1] = start_host[o] + (rows + bm - 1) / bm * bm;
      for (int t = start_host[o] / bm; t < start_host[o + 1] / bm; ++t) of_host[t] = o;
    }
    return owner_tiles{start_dev, of_dev, lo_dev, world, bm};
  }
  // A bound on the tile rows of the padded layout (the size of owner_of) for M rows over
  // world owners.
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

// gemm-rs, intra-SM: reduce-add each sub-tile into the owner of its tile (tiles per owner).
struct store_add_owners {
  struct params {
    const CUtensorMap* out;  // device table: rank o's output, rows(o) x N, box [BM/2][64], 128B swizzle
    owner_tiles tiles;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    const int2 at = p.tiles.locate(s.row0);
    if (at.y < p.tiles.rows(at.x)) pk::tma::store_add_tile_async(&p.out[at.x], s.col0, at.y, smem);
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    for (int o = 0; o < p.tiles.world; ++o) {
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

// ag-gemm, intra-SM: the rows of shard s go to rows [lo(s), lo(s + 1)) of this rank's output,
// through a map of just those rows (tiles per owner: a sub-tile never holds two shards' rows).
struct store_shard_rows {
  struct params {
    const CUtensorMap* out;  // device table: this rank's world maps, shard s: rows(s) x N of the
                             // output from row lo(s), box [BM/2][64], 128B swizzle
    owner_tiles tiles;
  };
  PK_DEV static void store_subtile(const params& p, const pk::gemm::tile_info&,
                                   const pk::gemm::subtile_info& s, const void* smem) {
    if (s.rows <= 0 || s.cols <= 0) return;
    const int2 at = p.tiles.locate(s.row0);
    if (at.y < p.tiles.rows(at.x)) pk::tma::store_tile_async(&p.out[at.x], s.col0, at.y, smem);
  }
  PK_DEV static void tile_done(const params&, const pk::gemm::tile_info&, int) {}
  PK_DEV static void finish(const params&, int) { pk::tma::wait_group<0>(); }
  PK_DEV static void prefetch(const params& p) {
    for (int s = 0; s < p.tiles.world; ++s) {
      acquire_map(&p.out[s]);
      pk::tma::prefetch_map(&p.out[s]);
    }
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

// gemm-rs, intra-SM: a tile of owner o's padded rows reads rows lo(o) + (its row there) of the
// rank's own A (`own`: the GEMM parameters' map).
struct owner_rows {
  struct params {
    owner_tiles tiles;
  };
  PK_DEV static void before_loads(const params&, const pk::gemm::tile_info&) {}
  PK_DEV static const CUtensorMap* a_source(const params& p, const pk::gemm::tile_info& t,
                                            const CUtensorMap* own, int& a_row) {
    const int2 at = p.tiles.locate(t.row0);
    a_row = p.tiles.lo[at.x] + at.y;
    return own;
  }
  PK_DEV static void prefetch_a(const params&, const CUtensorMap* own) { pk::tma::prefetch_map(own); }
};

// ag-gemm, intra-SM: the A rows of a tile come from the shard's owner (virtual ranks: another
// buffer on this device; real ranks: the peer's IPC-mapped shard), nothing to wait for.
struct load_peer_rows {
  struct params {
    const CUtensorMap* a;  // device table: rank s's shard of A, rows(s) x K, box [BM][64], 128B swizzle
    owner_tiles tiles;
  };
  PK_DEV static void before_loads(const params&, const pk::gemm::tile_info&) {}
  PK_DEV static const CUtensorMap* a_source(const params& p, const pk::gemm::tile_info& t,
                                            const CUtensorMap*, int& a_row) {
    const int2 at = p.tiles.locate(t.row0);
    a_row = at.y;
    return &p.a[at.x];
  }
  PK_DEV static void prefetch_a(const params& p, const CUtensorMap*) {
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

// Block b serves rank first_rank + b / (gemm_blocks + comm_blocks) (first_rank: 0, or the one
// rank of a one-rank launch); the first gemm_blocks of a rank's blocks compute, the rest
// communicate (Op::comm).
// Every block first checks that the device table was written for this call (a stale one would
// hand the GEMM tensor maps of other buffers); the threads that issue TMA on the rank's A and B
// maps (the producer, thread 0, and the consumers' leaders, who store through the epilogue's
// maps and acquire those in Epi::prefetch) acquire them.
// kWide: the kernel instance for worlds above 8 (fused/entry.cuh launch picks it).
template <class Op, bool kWide>
__device__ __forceinline__ void run(const typename Op::globals& g, unsigned char* smem) {
  const int per_rank = g.gemm_blocks + g.comm_blocks;
  const int rank = g.first_rank + static_cast<int>(blockIdx.x) / per_rank;
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
