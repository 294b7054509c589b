// fused/ops.cuh: the fused operations, one struct per (op, overlap), and their globals.
//
// A generated translation unit defines `config` (the GEMM tile config, the default number of
// communication blocks per rank, the default tile order, the communication blocks' mechanism:
// kCopyTma, TMA or registers) and picks one op:
//
//   op                 GEMM epilogue      GEMM prologue  communication blocks     spins
//   gemm_rs_intra      store_add_owners   owner_rows     none                     no
//   gemm_rs_inter      store_signal       -              pull_reduce<0, tma|reg>  yes
//   gemm_ar_intra      store_add_all      -              none                     no
//   gemm_ar_inter      store_signal       -              pull_reduce<1, tma|reg>  yes
//   gemm_ar_in_network store_signal       -              pull_reduce<2> (multimem) yes
//   ag_gemm_inter      store_local        wait_rows      gather_rows<tma|reg>     yes
//   ag_gemm_intra      store_shard_rows   load_peer_rows none                     no
//
// Each op has `globals` (the kernel's __grid_constant__ parameter: a pointer to the ranks'
// pk::gemm::params in the device table, the communication parameters, the grid split), `comm`
// (device), `comm_params` (host: the communication parameters of a call, pointing into the
// table) and `fill` (host: the table's GEMM parameters, tensor maps and arrays for a call). The
// table's layout is table_plan (fused/entry.cuh); static traits tell the host side which
// buffers and which table arrays a call needs.
#pragma once

#include <type_traits>

#include "fused/comm.cuh"
#include "gemm/gemm_host.cuh"

namespace pkf {

enum class kind { gemm_rs, gemm_ar, ag_gemm };

// Worlds up to this run the narrow instance, whose GEMM parameters ride in the kernel
// parameter (`inl`) as the kernels were tuned: a parameter reference costs the GEMM's
// consumers no register, a pointer into the table two, and with them the intra-SM epilogues
// spilled 28 B (ptxas -v, sm_90a, CUDA 13.0). About 5 KiB at 8 ranks.
constexpr int kNarrowRanks = 8;

template <class Epi, class Pro, class Comm>
struct globals_t {
  using gemm_params = pk::gemm::params<Epi, Pro, rotated_raster>;
  const gemm_params* gemm;             // device table: world entries (the wide instance)
  gemm_params inl[kNarrowRanks];       // the same, world <= kNarrowRanks (the narrow instance)
  Comm comm;
  int world, gemm_blocks, comm_blocks;
  int first_rank;                      // the rank of block 0 (pkf_args::one_rank: its rank)
  const pkc::table_header* table;      // the device table's header
  unsigned long long table_hash;       // what it must say it was written for
  pk::error_record* err;
  unsigned int* seq_slot;              // the table's copy of seq (fused.cuh run writes it)
  unsigned int seq;                    // pkf_args::seq
};

struct no_comm {
  struct params {};
};

// What fill() needs besides the arguments.
struct call_info {
  int gemm_blocks, comm_blocks, group_m;
  bool staggered;
  long long timeout_cycles;
};

// Where a call's arrays lie in the device table (offsets in bytes; 0: not used). Every op
// has the header, the seq slot and one pk::gemm::params per rank; the others as it needs:
// maps    Op::maps(world) tensor maps (every rank's output, or every rank's shard of A; the TMA
//         pull: every rank's partial, then every rank's output)
// start   world + 1 ints and the padded tile rows' owners (owner_tiles)
// ptr0/1  world pointers each (partials and outputs; shards and gathered copies)
// flags   world flag-counter pointers
struct table_offsets {
  size_t seq = 0, params = 0, lo = 0, owner64 = 0, start = 0, owner_of = 0, maps = 0, ptr0 = 0,
         ptr1 = 0, flags = 0, bytes = 0;
};


// ---- the parts every op shares -------------------------------------------------------------------

// Rows rank r owns: its reduce-scatter output rows, or its shard of A (ag-gemm).
inline int owned_rows(int r, const pkf_args* a) {
  return row_lo(r + 1, a->M, a->world) - row_lo(r, a->M, a->world);
}
// Rows of out[r].
inline int out_rows(kind k, int r, const pkf_args* a) {
  return k == kind::gemm_rs ? owned_rows(r, a) : a->M;
}

template <class Cfg, class P>
inline int fill_gemm(P& p, const void* A, const void* B, const pkf_args* a, int m_shift,
                     const call_info& ci) {
  const int rc = pk::gemm::fill_operands<Cfg>(p, A, B, a->M, a->N, a->K);
  if (rc != pk::gemm::OK) return rc;
  p.sched.base = pk::gemm::make_raster(a->M, a->N, Cfg::BM, Cfg::BN, ci.group_m);
  p.sched.m_shift = m_shift % p.sched.base.num_m;
  p.first_block = 0;
  p.num_blocks = ci.gemm_blocks;
  return pk::gemm::OK;
}

inline bool swizzled_out_map(CUtensorMap* m, void* base, int rows, int cols, int box_rows) {
  return pk::gemm::make_swizzled_map(m, base, static_cast<uint64_t>(rows),
                                     static_cast<uint64_t>(cols), static_cast<uint32_t>(box_rows));
}

// A map of the TMA pull (comm.cuh reduce_rect_tma): rows x cols bf16, boxes of
// pull_stages::kRows x BN, no swizzle.
template <class Cfg>
inline bool pull_map(CUtensorMap* m, void* base, int rows, int cols) {
  try {
    *m = pk::make_tile_map_2d(static_cast<bf16*>(base), rows, cols, cols, pull_stages::kRows, Cfg::BN);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The flag counters of every rank, read from the table's pointer array at `dev`.
inline pkc::flag_set<true> table_flags(const pkf_args* a, const unsigned char* dev, const table_offsets& t,
                                       const call_info& ci) {
  pkc::flag_set<true> f{};
  f.ctr.table = reinterpret_cast<unsigned int* const*>(dev + t.flags);
  f.ctr.world = a->world;
  f.num_flags = a->num_flags;
  f.spin = pk::spin_ctx::make(static_cast<pk::error_record*>(a->err), ci.timeout_cycles);
  return f;
}

template <typename T>
inline T* at(unsigned char* base, size_t off) {
  return reinterpret_cast<T*>(base + off);
}
template <typename T>
inline const T* at(const unsigned char* base, size_t off) {
  return reinterpret_cast<const T*>(base + off);
}

// The call's row partition (fused.cuh): written into the host copy, pointing into the device one.
inline partition table_partition(unsigned char* host, const unsigned char* dev, const table_offsets& t,
                                 const pkf_args* a) {
  return partition::make(at<int>(host, t.lo), at<int4>(host, t.owner64), at<int>(dev, t.lo),
                         at<int4>(dev, t.owner64), a->M, a->world);
}
inline partition table_partition(const unsigned char* dev, const table_offsets& t, const pkf_args* a) {
  return partition{at<int>(dev, t.lo), at<int4>(dev, t.owner64), a->world};
}

// The inter-SM ops' table arrays: every rank's buffer its blocks read (ptr0), the one they
// write (ptr1) and its flags; the call's row partition, as table_partition.
inline partition table_buffers(unsigned char* host, const unsigned char* dev, const table_offsets& t,
                               const pkf_args* a, void* const* read, void* const* written) {
  const partition rows = table_partition(host, dev, t, a);
  for (int r = 0; r < a->world; ++r) {
    at<const bf16*>(host, t.ptr0)[r] = static_cast<const bf16*>(read[r]);
    at<bf16*>(host, t.ptr1)[r] = static_cast<bf16*>(written[r]);
    at<unsigned int*>(host, t.flags)[r] = a->flags[r];
  }
  return rows;
}

// Tile row where rank r's GEMM starts: the band of rank `first` (staggered) or 0.
template <class Cfg>
inline int start_row_tile(const pkf_args* a, int first, bool staggered) {
  return staggered ? row_lo(first % a->world, a->M, a->world) / Cfg::BM : 0;
}

template <class Cfg>
inline int num_tiles_n(int N) { return (N + Cfg::BN - 1) / Cfg::BN; }
template <class Cfg>
inline int num_tiles_m(int M) { return (M + Cfg::BM - 1) / Cfg::BM; }

// ---- tiles per owner (the intra-SM gemm-rs and ag-gemm) -------------------------------------

// The owners' padded tile rows (owner_tiles) written into the host copy of the table, pointing
// into the device one; rank r's GEMM parameters over them: A and B as the plain GEMM has them
// (p.a_map: `a_rows` rows of A at `A`), the virtual M, the raster, starting at owner `first`'s
// tile rows when staggered (gemm-rs: the rows of rank r + 1; ag-gemm: rank r's own shard).
template <class Cfg>
inline owner_tiles table_owner_tiles(unsigned char* host, const unsigned char* dev, const table_offsets& t,
                                     const pkf_args* a) {
  return owner_tiles::make(at<int>(host, t.start), at<int>(host, t.owner_of), at<int>(dev, t.start),
                           at<int>(dev, t.owner_of), at<int>(dev, t.lo), a->M, a->world, Cfg::BM);
}

template <class Cfg, class P>
inline int fill_owner_gemm(P& p, const void* A, int a_rows, const void* B, const pkf_args* a,
                           const int* start, int first, const call_info& ci) {
  const int rc = pk::gemm::fill_operands<Cfg>(p, A, B, a_rows, a->N, a->K);
  if (rc != pk::gemm::OK) return rc;
  p.M = start[a->world];
  p.sched.base = pk::gemm::make_raster(p.M, a->N, Cfg::BM, Cfg::BN, ci.group_m);
  p.sched.m_shift = ci.staggered ? start[first % a->world] / Cfg::BM : 0;
  p.first_block = 0;
  p.num_blocks = ci.gemm_blocks;
  return pk::gemm::OK;
}

// The store-add ops' table maps: every rank's output (out_rows of it), boxes of a sub-tile.
template <class Cfg>
inline bool output_maps(CUtensorMap* maps, const pkf_args* a, kind k) {
  for (int o = 0; o < a->world; ++o)
    if (!swizzled_out_map(&maps[o], a->out[o], out_rows(k, o, a), a->N, Cfg::WG_ROWS)) return false;
  return true;
}

// What the intra-SM ops share: no communication blocks, no flags, nothing to wait on.
template <class Epi, class Pro>
struct intra_op {
  using epi = Epi;
  using pro = Pro;
  using comm_t = no_comm;
  using globals = globals_t<Epi, Pro, typename comm_t::params>;
  static constexpr bool kSpins = false, kPartial = false, kGathered = false, kMulticast = false;
  static constexpr bool kPtr0 = false, kPtr1 = false, kFlags = false;
  static int num_flags(const pkf_args*) { return 0; }

  template <bool>
  __device__ static void comm(const globals&, int, int, unsigned char*) {}

  static typename comm_t::params comm_params(const pkf_args*, const unsigned char*, const table_offsets&,
                                             const call_info&) {
    return {};
  }
};

// What the inter-SM ops share: communication blocks running Comm, spinning on flags, with the
// table arrays of every rank's two buffers (table_buffers) and its flags.
template <class Epi, class Pro, class Comm>
struct inter_op {
  using epi = Epi;
  using pro = Pro;
  using comm_t = Comm;
  using globals = globals_t<Epi, Pro, typename Comm::params>;
  static constexpr bool kSpins = true, kStoreAdd = false;
  static constexpr bool kStart = false, kPtr0 = true, kPtr1 = true, kFlags = true;

  template <bool kWide>
  __device__ static void comm(const globals& g, int rank, int block, unsigned char* smem) {
    Comm::template run<kWide>(g, rank, block, smem);
  }
};

// ---- gemm-rs and gemm-ar, intra-SM: TMA store-add from the epilogue ---------------------------

// What both share: table arrays of every rank's output map (gemm-rs adds the owners' padded
// tile rows), and a fill that starts by writing those maps and the row partition.
template <class Config, kind K, class Epi, class Pro>
struct store_add_intra : intra_op<Epi, Pro> {
  using cfg = typename Config::gemm;
  using gemm_params = typename intra_op<Epi, Pro>::globals::gemm_params;
  static constexpr kind kKind = K;
  static constexpr bool kStoreAdd = true;
  static size_t maps(int world) { return static_cast<size_t>(world); }

  // Every rank's output map and the partition into the table; the ranks' GEMM parameters
  // there, to fill (nullptr: a tensor map could not be made).
  static gemm_params* output_tables(unsigned char* host, const unsigned char* dev, const table_offsets& t,
                                    const pkf_args* a) {
    if (!output_maps<cfg>(at<CUtensorMap>(host, t.maps), a, K)) return nullptr;
    table_partition(host, dev, t, a);
    return at<gemm_params>(host, t.params);
  }
};

// gemm-rs: into the owner of each tile. Rank r's GEMM runs over the owners' padded tile rows
// (owner_tiles): a tile of owner o reads rows lo(o) + ... of the rank's own A (owner_rows) and
// reduce-adds each sub-tile through the map of owner o's rows(o) x N output, which drops the
// padding rows (store_add_owners).
template <class Config>
struct gemm_rs_intra : store_add_intra<Config, kind::gemm_rs, store_add_owners, owner_rows> {
  using base = store_add_intra<Config, kind::gemm_rs, store_add_owners, owner_rows>;
  using cfg = typename base::cfg;
  static constexpr bool kStart = true;

  static int fill(unsigned char* host, const unsigned char* dev, const table_offsets& t, const pkf_args* a,
                  const call_info& ci) {
    typename base::gemm_params* P = base::output_tables(host, dev, t, a);
    if (P == nullptr) return pk::gemm::ERR_TENSOR_MAP;
    const owner_tiles tiles = table_owner_tiles<cfg>(host, dev, t, a);
    const int* start = at<int>(host, t.start);
    for (int r = 0; r < a->world; ++r) {
      const int rc = fill_owner_gemm<cfg>(P[r], a->a[r], a->M, a->b[r], a, start, r + 1, ci);
      if (rc != pk::gemm::OK) return rc;
      P[r].epi.out = at<CUtensorMap>(dev, t.maps);
      P[r].epi.tiles = tiles;
      P[r].pro.tiles = tiles;
    }
    return pk::gemm::OK;
  }
};

// gemm-ar: into every rank.
template <class Config>
struct gemm_ar_intra : store_add_intra<Config, kind::gemm_ar, store_add_all, pk::gemm::no_prologue> {
  using base = store_add_intra<Config, kind::gemm_ar, store_add_all, pk::gemm::no_prologue>;
  using cfg = typename base::cfg;
  static constexpr bool kStart = false;

  static int fill(unsigned char* host, const unsigned char* dev, const table_offsets& t, const pkf_args* a,
                  const call_info& ci) {
    typename base::gemm_params* P = base::output_tables(host, dev, t, a);
    if (P == nullptr) return pk::gemm::ERR_TENSOR_MAP;
    for (int r = 0; r < a->world; ++r) {
      const int rc = fill_gemm<cfg>(P[r], a->a[r], a->b[r], a, start_row_tile<cfg>(a, r, ci.staggered), ci);
      if (rc != pk::gemm::OK) return rc;
      P[r].epi.out = at<CUtensorMap>(dev, t.maps);
      P[r].epi.world = a->world;
      P[r].epi.rank = r;
    }
    return pk::gemm::OK;
  }
};

// ---- gemm-rs and gemm-ar, inter-SM: local store + flag, owners pull and reduce ----------------

// kReduce: 0 gemm-rs, 1 gemm-ar (two-shot), 2 gemm-ar in-network (multimem). Config::kCopyTma:
// the owners sum through TMA (the schedule's mechanism "tma"), else in registers.
template <class Config, int kReduce>
constexpr bool tma_pull = Config::kCopyTma && kReduce != 2;

template <class Config, int kReduce>
struct pull_op
    : inter_op<store_signal, pk::gemm::no_prologue, pull_reduce<kReduce, tma_pull<Config, kReduce>>> {
  using cfg = typename Config::gemm;
  using typename inter_op<store_signal, pk::gemm::no_prologue,
                          pull_reduce<kReduce, tma_pull<Config, kReduce>>>::globals;
  static constexpr bool kTma = tma_pull<Config, kReduce>;
  static_assert(!kTma || (cfg::SMEM_BYTES >= static_cast<int>(pull_stages::kSmemBytes) &&
                          cfg::BN <= pull_stages::kMaxCols && cfg::THREADS == pull_stages::kThreads),
                "the TMA pull stages its boxes in the GEMM's shared memory, 384 threads");
  static constexpr kind kKind = kReduce == 0 ? kind::gemm_rs : kind::gemm_ar;
  static constexpr bool kPartial = true, kGathered = false;
  static constexpr bool kMulticast = kReduce == 2;
  // table arrays: the partials' and the outputs' pointers, the flags; the TMA form also the
  // partials' and the outputs' tensor maps
  static size_t maps(int world) { return kTma ? 2 * static_cast<size_t>(world) : 0; }
  static int num_flags(const pkf_args* a) {
    return num_tiles_m<cfg>(a->M) * num_tiles_n<cfg>(a->N);
  }

  static reduce_params comm_params(const pkf_args* a, const unsigned char* dev, const table_offsets& t,
                                   const call_info& ci) {
    reduce_params c{};
    c.partial = at<const bf16*>(dev, t.ptr0);
    c.out = at<bf16*>(dev, t.ptr1);
    for (int r = 0; r < a->world && r < kNarrowRanks; ++r) {
      c.partial_inl[r] = static_cast<const bf16*>(a->partial[r]);
      c.out_inl[r] = static_cast<bf16*>(a->out[r]);
    }
    c.maps = kTma ? at<CUtensorMap>(dev, t.maps) : nullptr;
    c.partial_mc = static_cast<bf16*>(a->partial_mc);
    c.out_mc = static_cast<bf16*>(a->out_mc);
    c.flags = table_flags(a, dev, t, ci);
    c.rows = table_partition(dev, t, a);
    c.N = a->N;
    c.world = a->world;
    c.bm = cfg::BM;
    c.bn = cfg::BN;
    c.num_n = num_tiles_n<cfg>(a->N);
    c.seq = a->seq;
    return c;
  }

  static int fill(unsigned char* host, const unsigned char* dev, const table_offsets& t, const pkf_args* a,
                  const call_info& ci) {
    const int w = a->world;
    const partition rows = table_buffers(host, dev, t, a, a->partial, a->out);
    for (int r = 0; r < w; ++r)
      if (kTma && !(pull_map<cfg>(&at<CUtensorMap>(host, t.maps)[r], a->partial[r], a->M, a->N) &&
                    pull_map<cfg>(&at<CUtensorMap>(host, t.maps)[w + r], a->out[r],
                                  out_rows(kKind, r, a), a->N)))
        return pk::gemm::ERR_TENSOR_MAP;
    auto* P = at<typename globals::gemm_params>(host, t.params);
    for (int r = 0; r < w; ++r) {
      int rc = fill_gemm<cfg>(P[r], a->a[r], a->b[r], a, start_row_tile<cfg>(a, r + 1, ci.staggered), ci);
      if (rc != pk::gemm::OK) return rc;
      auto& e = P[r].epi;
      if (!swizzled_out_map(&e.partial, a->partial[r], a->M, a->N, cfg::WG_ROWS))
        return pk::gemm::ERR_TENSOR_MAP;
      e.flags = table_flags(a, dev, t, ci);
      e.rows = rows;
      e.num_n = num_tiles_n<cfg>(a->N);
    }
    return pk::gemm::OK;
  }
};

template <class Config>
using gemm_rs_inter = pull_op<Config, 0>;
template <class Config>
using gemm_ar_inter = pull_op<Config, 1>;
template <class Config>
using gemm_ar_in_network = pull_op<Config, 2>;

// ---- ag-gemm, inter-SM: gather A into a local copy, the GEMM waits for each row band ----------

template <class Config>
struct ag_gemm_inter : inter_op<store_local, wait_rows, gather_rows<Config::kCopyTma>> {
  using cfg = typename Config::gemm;
  using typename inter_op<store_local, wait_rows, gather_rows<Config::kCopyTma>>::globals;
  static constexpr kind kKind = kind::ag_gemm;
  static constexpr bool kPartial = false, kGathered = true;
  static constexpr bool kMulticast = false;
  // table arrays: the shards' and the gathered copies' pointers, the flags
  static size_t maps(int) { return 0; }
  static int num_flags(const pkf_args* a) { return num_tiles_m<cfg>(a->M); }

  static gather_params comm_params(const pkf_args* a, const unsigned char* dev, const table_offsets& t,
                                   const call_info& ci) {
    gather_params c{};
    c.shard = at<const bf16*>(dev, t.ptr0);
    c.gathered = at<bf16*>(dev, t.ptr1);
    c.flags = table_flags(a, dev, t, ci);
    c.rows = table_partition(dev, t, a);
    c.K = a->K;
    c.world = a->world;
    c.bm = cfg::BM;
    c.staggered = ci.staggered ? 1 : 0;
    return c;
  }

  static int fill(unsigned char* host, const unsigned char* dev, const table_offsets& t, const pkf_args* a,
                  const call_info& ci) {
    const int w = a->world;
    const partition rows = table_buffers(host, dev, t, a, a->a, a->gathered);
    const auto fl = table_flags(a, dev, t, ci);
    auto* P = at<typename globals::gemm_params>(host, t.params);
    for (int r = 0; r < w; ++r) {
      int rc = fill_gemm<cfg>(P[r], a->gathered[r], a->b[r], a, start_row_tile<cfg>(a, r, ci.staggered), ci);
      if (rc != pk::gemm::OK) return rc;
      if (!swizzled_out_map(&P[r].epi.c_map, a->out[r], a->M, a->N, cfg::WG_ROWS))
        return pk::gemm::ERR_TENSOR_MAP;
      wait_rows::params& wp = P[r].pro;
      wp.band_flags = a->flags[r];
      wp.spin = fl.spin;
      // The producer must give up well before its consumers' mbarrier waits trap.
      if (wp.spin.timeout_cycles > PK_GEMM_TIMEOUT_CYCLES / 2)
        wp.spin.timeout_cycles = PK_GEMM_TIMEOUT_CYCLES / 2;
      wp.rows = rows;
      wp.rank = r;
      wp.seq = at<unsigned int>(dev, t.seq);
    }
    return pk::gemm::OK;
  }
};

// ---- ag-gemm, intra-SM: the producer loads each A tile from the rank that owns its rows --------

// No gather and no communication blocks: rank r's GEMM runs over the shards' padded tile rows
// (owner_tiles) and its producer loads each tile's A boxes through the tensor map of the
// owning rank's shard (the table's maps of every shard: a->a[s], a buffer on this device for
// virtual ranks; with real ranks it would be the IPC-mapped peer pointer); each sub-tile goes
// out through the map of its shard's rows in rank r's output. Staggered order starts rank r at
// its own shard and walks the peers r + 1, r + 2, ... (the rotated raster); sequential starts
// every rank at shard 0.
template <class Config>
struct ag_gemm_intra : intra_op<store_shard_rows, load_peer_rows> {
  using cfg = typename Config::gemm;
  static constexpr kind kKind = kind::ag_gemm;
  static constexpr bool kStoreAdd = false, kStart = true;
  // table arrays: every shard's map of A, then rank r's map of shard s's rows of its output at
  // world + r * world + s; the shards' padded tile rows
  static size_t maps(int world) { return static_cast<size_t>(world) * (world + 1); }

  static int fill(unsigned char* host, const unsigned char* dev, const table_offsets& t, const pkf_args* a,
                  const call_info& ci) {
    const int w = a->world;
    table_partition(host, dev, t, a);
    const owner_tiles tiles = table_owner_tiles<cfg>(host, dev, t, a);
    const int* start = at<int>(host, t.start);
    auto* maps = at<CUtensorMap>(host, t.maps);
    const size_t row_bytes = static_cast<size_t>(a->N) * sizeof(bf16);
    for (int s = 0; s < w; ++s)
      if (!pk::gemm::make_swizzled_map(&maps[s], a->a[s], owned_rows(s, a), a->K, cfg::BM))
        return pk::gemm::ERR_TENSOR_MAP;
    for (int r = 0; r < w; ++r)
      for (int s = 0; s < w; ++s) {
        // 16-byte aligned: out[r] is, and N is a multiple of 8 (check_args)
        unsigned char* shard_out = static_cast<unsigned char*>(a->out[r]) + row_lo(s, a->M, w) * row_bytes;
        if (!swizzled_out_map(&maps[w + static_cast<size_t>(r) * w + s], shard_out, owned_rows(s, a), a->N,
                              cfg::WG_ROWS))
          return pk::gemm::ERR_TENSOR_MAP;
      }
    auto* P = at<typename globals::gemm_params>(host, t.params);
    for (int r = 0; r < w; ++r) {
      // p.a_map: the rank's own shard (unused by the producer, which takes pro.a)
      const int rc = fill_owner_gemm<cfg>(P[r], a->a[r], owned_rows(r, a), a->b[r], a, start, r, ci);
      if (rc != pk::gemm::OK) return rc;
      P[r].epi.out = at<CUtensorMap>(dev, t.maps) + w + static_cast<size_t>(r) * w;
      P[r].epi.tiles = tiles;
      P[r].pro.a = at<CUtensorMap>(dev, t.maps);
      P[r].pro.tiles = tiles;
    }
    return pk::gemm::OK;
  }
};

}  // namespace pkf
