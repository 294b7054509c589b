// fused/ops.cuh: the fused operations, one struct per (op, overlap), and their globals.
//
// A generated translation unit defines `config` (the GEMM tile config, the default number of
// communication blocks per rank, the default tile order, the copy mechanism) and picks one op:
//
//   op                 GEMM epilogue      GEMM prologue  communication blocks     spins
//   gemm_rs_intra      store_add_owners   -              none                     no
//   gemm_rs_inter      store_signal       -              pull_reduce<0>           yes
//   gemm_ar_intra      store_add_all      -              none                     no
//   gemm_ar_inter      store_signal       -              pull_reduce<1>           yes
//   gemm_ar_in_network store_signal       -              pull_reduce<2> (multimem) yes
//   ag_gemm_inter      store_epilogue     wait_rows      gather_rows<tma|reg>     yes
//   ag_gemm_intra      store_shard_rows   load_peer_rows none                     no
//
// Each op has `globals` (the kernel's __grid_constant__ parameter: one pk::gemm::params per
// rank, the communication parameters, the grid split), `comm` (device) and `fill` (host: the
// tensor maps and pointers of one call). Static traits tell the host side (fused/entry.cuh)
// which buffers a call needs.
#pragma once

#include <type_traits>

#include "fused/comm.cuh"
#include "gemm/gemm_host.cuh"

namespace pkf {

enum class kind { gemm_rs, gemm_ar, ag_gemm };

template <class Epi, class Pro, class Comm>
struct globals_t {
  pk::gemm::params<Epi, Pro, rotated_raster> gemm[PKF_MAX_RANKS];
  Comm comm;
  int world, gemm_blocks, comm_blocks;
};

struct no_comm {
  struct params {};
  template <class G>
  __device__ static void run(const G&, int, int, unsigned char*) {}
};

// What fill() needs besides the arguments.
struct call_info {
  int gemm_blocks, comm_blocks, group_m;
  bool staggered;
  long long timeout_cycles;
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

template <class Cfg, class G>
inline int fill_gemm(G& g, int r, const void* A, const pkf_args* a, int m_shift,
                     const call_info& ci) {
  auto& p = g.gemm[r];
  const int rc = pk::gemm::fill_operands<Cfg>(p, A, a->b[r], a->M, a->N, a->K);
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

inline pk::flags<PKF_MAX_RANKS> make_flags(const pkf_args* a, int rank, const call_info& ci) {
  return pk::make_flags<PKF_MAX_RANKS>(a->flags, a->world, rank, a->num_flags,
                                       static_cast<pk::error_record*>(a->err), ci.timeout_cycles);
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

// ---- gemm-rs and gemm-ar, intra-SM: TMA store-add from the epilogue --------------------------

template <class Config, kind K>
struct store_add_op {
  using cfg = typename Config::gemm;
  using epi = std::conditional_t<K == kind::gemm_rs, store_add_owners, store_add_all>;
  using pro = pk::gemm::no_prologue;
  using comm_t = no_comm;
  using globals = globals_t<epi, pro, typename comm_t::params>;
  static constexpr kind kKind = K;
  static constexpr bool kSpins = false, kStoreAdd = true, kPartial = false, kGathered = false;
  static constexpr bool kMulticast = false;
  static int num_flags(const pkf_args*) { return 0; }

  __device__ static void comm(const globals&, int, int, unsigned char*) {}

  static int fill(globals& g, const pkf_args* a, const call_info& ci) {
    for (int r = 0; r < a->world; ++r) {
      const int shift = K == kind::gemm_rs ? start_row_tile<cfg>(a, r + 1, ci.staggered)
                                           : start_row_tile<cfg>(a, r, ci.staggered);
      int rc = fill_gemm<cfg>(g, r, a->a[r], a, shift, ci);
      if (rc != pk::gemm::OK) return rc;
      auto& e = g.gemm[r].epi;
      for (int o = 0; o < a->world; ++o)
        if (!swizzled_out_map(&e.out[o], a->out[o], out_rows(K, o, a), a->N, cfg::WG_ROWS))
          return pk::gemm::ERR_TENSOR_MAP;
      if constexpr (K == kind::gemm_rs) {
        e.rows = partition::make(a->M, a->world);
        for (int o = 0; o < a->world; ++o) e.ptr[o] = static_cast<bf16*>(a->out[o]);
        e.n = a->N;
      } else {
        e.world = a->world;
        e.rank = r;
      }
    }
    return pk::gemm::OK;
  }
};

template <class Config>
using gemm_rs_intra = store_add_op<Config, kind::gemm_rs>;
template <class Config>
using gemm_ar_intra = store_add_op<Config, kind::gemm_ar>;

// ---- gemm-rs and gemm-ar, inter-SM: local store + flag, owners pull and reduce ----------------

// kReduce: 0 gemm-rs, 1 gemm-ar (two-shot), 2 gemm-ar in-network (multimem).
template <class Config, int kReduce>
struct pull_op {
  using cfg = typename Config::gemm;
  using epi = store_signal;
  using pro = pk::gemm::no_prologue;
  using comm_t = pull_reduce<kReduce>;
  using globals = globals_t<epi, pro, reduce_params>;
  static constexpr kind kKind = kReduce == 0 ? kind::gemm_rs : kind::gemm_ar;
  static constexpr bool kSpins = true, kStoreAdd = false, kPartial = true, kGathered = false;
  static constexpr bool kMulticast = kReduce == 2;
  static int num_flags(const pkf_args* a) {
    return num_tiles_m<cfg>(a->M) * num_tiles_n<cfg>(a->N);
  }

  __device__ static void comm(const globals& g, int rank, int block, unsigned char* smem) {
    comm_t::run(g, rank, block, smem);
  }

  static int fill(globals& g, const pkf_args* a, const call_info& ci) {
    for (int r = 0; r < a->world; ++r) {
      int rc = fill_gemm<cfg>(g, r, a->a[r], a, start_row_tile<cfg>(a, r + 1, ci.staggered), ci);
      if (rc != pk::gemm::OK) return rc;
      auto& e = g.gemm[r].epi;
      if (!swizzled_out_map(&e.partial, a->partial[r], a->M, a->N, cfg::WG_ROWS))
        return pk::gemm::ERR_TENSOR_MAP;
      e.flags = make_flags(a, r, ci);
      e.rows = partition::make(a->M, a->world);
      e.num_n = num_tiles_n<cfg>(a->N);
    }
    reduce_params& c = g.comm;
    for (int r = 0; r < a->world; ++r) {
      c.partial[r] = static_cast<const bf16*>(a->partial[r]);
      c.out[r] = static_cast<bf16*>(a->out[r]);
    }
    c.partial_mc = static_cast<bf16*>(a->partial_mc);
    c.out_mc = static_cast<bf16*>(a->out_mc);
    c.flags = make_flags(a, 0, ci);
    c.rows = partition::make(a->M, a->world);
    c.N = a->N;
    c.world = a->world;
    c.bm = cfg::BM;
    c.bn = cfg::BN;
    c.num_n = num_tiles_n<cfg>(a->N);
    c.seq = a->seq;
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
struct ag_gemm_inter {
  using cfg = typename Config::gemm;
  using epi = pk::gemm::store_epilogue;
  using pro = wait_rows;
  using comm_t = gather_rows<Config::kCopyTma>;
  using globals = globals_t<epi, pro, gather_params>;
  static constexpr kind kKind = kind::ag_gemm;
  static constexpr bool kSpins = true, kStoreAdd = false, kPartial = false, kGathered = true;
  static constexpr bool kMulticast = false;
  static int num_flags(const pkf_args* a) { return num_tiles_m<cfg>(a->M); }

  __device__ static void comm(const globals& g, int rank, int block, unsigned char* smem) {
    comm_t::run(g, rank, block, smem);
  }

  static int fill(globals& g, const pkf_args* a, const call_info& ci) {
    const auto fl = make_flags(a, 0, ci);
    for (int r = 0; r < a->world; ++r) {
      int rc = fill_gemm<cfg>(g, r, a->gathered[r], a, start_row_tile<cfg>(a, r, ci.staggered), ci);
      if (rc != pk::gemm::OK) return rc;
      if (!swizzled_out_map(&g.gemm[r].epi.c_map, a->out[r], a->M, a->N, cfg::WG_ROWS))
        return pk::gemm::ERR_TENSOR_MAP;
      wait_rows::params& w = g.gemm[r].pro;
      w.band_flags = a->flags[r];
      w.spin = fl.spin;
      // The producer must give up well before its consumers' mbarrier waits trap.
      if (w.spin.timeout_cycles > PK_GEMM_TIMEOUT_CYCLES / 2)
        w.spin.timeout_cycles = PK_GEMM_TIMEOUT_CYCLES / 2;
      w.rows = partition::make(a->M, a->world);
      w.rank = r;
      w.seq = a->seq;
    }
    gather_params& c = g.comm;
    for (int r = 0; r < a->world; ++r) {
      c.shard[r] = static_cast<const bf16*>(a->a[r]);
      c.gathered[r] = static_cast<bf16*>(a->gathered[r]);
    }
    c.flags = fl;
    c.rows = partition::make(a->M, a->world);
    c.K = a->K;
    c.world = a->world;
    c.bm = cfg::BM;
    c.staggered = ci.staggered ? 1 : 0;
    return pk::gemm::OK;
  }
};

// ---- ag-gemm, intra-SM: the producer loads each A tile from the rank that owns its rows --------

// No gather and no communication blocks: rank r's GEMM runs over the shards' padded tile rows
// (shard_tiles) and its producer loads each tile's A boxes through the tensor map of the
// owning rank's shard, built from that rank's pointer (a->a[s]: a buffer on this device for
// virtual ranks; with real ranks it would be the IPC-mapped peer pointer). Staggered order
// starts rank r at its own shard and walks the peers r + 1, r + 2, ... (the rotated raster);
// sequential starts every rank at shard 0.
template <class Config>
struct ag_gemm_intra {
  using cfg = typename Config::gemm;
  using epi = store_shard_rows;
  using pro = load_peer_rows;
  using comm_t = no_comm;
  using globals = globals_t<epi, pro, typename comm_t::params>;
  static constexpr kind kKind = kind::ag_gemm;
  static constexpr bool kSpins = false, kStoreAdd = false, kPartial = false, kGathered = false;
  static constexpr bool kMulticast = false;
  static int num_flags(const pkf_args*) { return 0; }

  __device__ static void comm(const globals&, int, int, unsigned char*) {}

  static int fill(globals& g, const pkf_args* a, const call_info& ci) {
    const shard_tiles tiles = shard_tiles::make(a->M, a->world, cfg::BM);
    const int virtual_m = tiles.start[a->world];
    for (int r = 0; r < a->world; ++r) {
      auto& p = g.gemm[r];
      // A and B as the plain GEMM has them (p.a_map: the rank's own shard, unused by the
      // producer, which takes pro.a), then the virtual M of the padded shards.
      int rc = pk::gemm::fill_operands<cfg>(p, a->a[r], a->b[r], owned_rows(r, a), a->N, a->K);
      if (rc != pk::gemm::OK) return rc;
      p.M = virtual_m;
      p.sched.base = pk::gemm::make_raster(virtual_m, a->N, cfg::BM, cfg::BN, ci.group_m);
      p.sched.m_shift = ci.staggered ? tiles.start[r] / cfg::BM : 0;
      p.first_block = 0;
      p.num_blocks = ci.gemm_blocks;
      for (int s = 0; s < a->world; ++s) {
        const int lo = row_lo(s, a->M, a->world);
        if (!pk::gemm::make_swizzled_map(&p.pro.a[s], a->a[s], owned_rows(s, a), a->K, cfg::BM))
          return pk::gemm::ERR_TENSOR_MAP;
        bf16* rows = static_cast<bf16*>(a->out[r]) + static_cast<size_t>(lo) * a->N;
        if (!swizzled_out_map(&p.epi.out[s], rows, owned_rows(s, a), a->N, cfg::WG_ROWS))
          return pk::gemm::ERR_TENSOR_MAP;
        p.epi.rows[s] = owned_rows(s, a);
      }
      p.pro.tiles = tiles;
      p.epi.tiles = tiles;
    }
    return pk::gemm::OK;
  }
};

}  // namespace pkf
