// fused/entry.cuh: host side of a generated fused kernel: argument checks, the grid split,
// globals, the launch, requirements, and the C functions every fused library exports.
//
// The generated translation unit defines `config` and `op` (fused/ops.cuh), its kernel, and
//   extern "C" int pk_<op>_<overlap>(const pkf_args*, char* msg, size_t len)
// which calls pkf::check_args<op, config> and pkf::launch<op, config>; pkf_requirements calls
// pkf::requirements and pkf_table pkf::table (the device table's bytes: fused/abi.h). Status codes and the reporter are the collectives' (collectives/entry.cuh),
// and so is pkc_read_error, which turns the device error record into a message after the stream
// has finished.
//
// Grid: world x (gemm_blocks + comm_blocks) blocks of Cfg::THREADS threads with Cfg::SMEM_BYTES
// of dynamic shared memory (one block per SM); a one-rank launch (pkf_args::one_rank) has that
// rank's gemm_blocks + comm_blocks. gemm_blocks defaults to SMs / (ranks sharing the GPU) -
// comm_blocks, so that the whole grid is one wave. Ops whose blocks wait on each other (every
// inter-SM op: communication blocks wait for GEMM tiles, ag-gemm's GEMM waits for gathered rows)
// launch cooperatively (pk::launch_cooperative: co-residency guaranteed, or an error naming the
// co-resident limit); the intra-SM ops never wait on another block and launch plainly.
#pragma once

#include <cstdlib>
#include <memory>

#include "collectives/entry.cuh"
#include "fused/ops.cuh"

namespace pkf {

using pkc::reporter;

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline int device_sms(int& sms) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return static_cast<int>(e);
}

// The grid split of a call: GEMM and communication blocks per rank, and the tile order.
struct split {
  int gemm = 0, comm = 0;
  bool staggered = true;
};

template <class Op, class Config>
bool make_split(const pkf_args* a, split& s, reporter& rep) {
  if (a->tile_order < -1 || a->tile_order > 1)
    return rep.fail(PKC_BAD_ARGUMENT, "tile_order %d is not -1 (default), 0 (staggered) or 1 (sequential)",
                    a->tile_order), false;
  s.staggered = a->tile_order == -1 ? Config::kStaggered : a->tile_order == 0;
  if (Op::kSpins) {
    s.comm = a->comm_blocks > 0 ? a->comm_blocks : Config::kCommBlocks;
    if (s.comm < 1) return rep.fail(PKC_BAD_ARGUMENT, "inter-SM ops need comm_blocks >= 1"), false;
  } else if (a->comm_blocks > 0) {
    return rep.fail(PKC_BAD_ARGUMENT, "intra-SM ops have no communication blocks (comm_blocks = %d)",
                    a->comm_blocks), false;
  }
  if (a->gemm_blocks > 0) {
    s.gemm = a->gemm_blocks;
  } else {
    int sms = 0;
    if (const int e = device_sms(sms))
      return rep.fail(PKC_CUDA_ERROR, "cudaDeviceGetAttribute: %s",
                      cudaGetErrorString(static_cast<cudaError_t>(e))), false;
    const int sharing = a->one_rank ? 1 : a->world;    // ranks whose blocks share this GPU
    s.gemm = sms / sharing - s.comm;
    if (s.gemm < 1)
      return rep.fail(PKC_BAD_ARGUMENT, "%d SMs / %d ranks leave no GEMM block beside %d communication blocks",
                      sms, sharing, s.comm), false;
  }
  return true;
}

// ---- the device table -------------------------------------------------------------------------

// Its layout for a world (table_offsets, fused/ops.cuh): the header, the ranks' GEMM parameters
// (64-byte aligned: they hold tensor maps), the partition, then what the op needs.
template <class Op>
table_offsets table_plan(int world, int M) {
  using P = typename Op::globals::gemm_params;
  table_offsets t;
  size_t at = PKC_TABLE_HEADER_BYTES;
  auto place = [&](size_t bytes, size_t align) {
    at = (at + align - 1) / align * align;
    const size_t here = at;
    at += bytes;
    return here;
  };
  const size_t w = static_cast<size_t>(world);
  t.seq = place(sizeof(unsigned int), 16);
  t.params = place(w * sizeof(P), 64);
  t.lo = place((w + 1) * sizeof(int), 16);
  t.owner64 = place(static_cast<size_t>(partition::blocks(M)) * sizeof(int4), 16);
  if (Op::kStart) {
    t.start = place((w + 1) * sizeof(int), 16);
    t.owner_of = place(static_cast<size_t>(owner_tiles::tile_rows(M, world, Op::cfg::BM)) * sizeof(int), 16);
  }
  if (Op::maps(world)) t.maps = place(Op::maps(world) * sizeof(CUtensorMap), 64);
  if (Op::kPtr0) t.ptr0 = place(w * sizeof(void*), 16);
  if (Op::kPtr1) t.ptr1 = place(w * sizeof(void*), 16);
  if (Op::kFlags) t.flags = place(w * sizeof(void*), 16);
  t.bytes = (at + 63) / 64 * 64;
  return t;
}

// FNV-1a over everything the table is derived from (the kernel compares the table's copy).
inline unsigned long long table_hash(const pkf_args* a, const split& s) {
  unsigned long long h = 1469598103934665603ull;
  auto mix = [&](unsigned long long v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
  };
  auto ptr = [&](const void* p) { mix(static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p))); };
  mix(static_cast<unsigned long long>(a->world));
  mix(static_cast<unsigned long long>(a->M) << 32 | static_cast<unsigned>(a->N));
  mix(static_cast<unsigned long long>(a->K));
  mix(static_cast<unsigned long long>(s.gemm) << 32 | static_cast<unsigned>(s.comm));
  mix(static_cast<unsigned long long>(a->group_m) << 1 | (s.staggered ? 1u : 0u));
  mix(static_cast<unsigned long long>(a->num_flags));
  mix(static_cast<unsigned long long>(a->timeout_cycles));
  ptr(a->table);
  ptr(a->err);
  ptr(a->partial_mc);
  ptr(a->out_mc);
  for (int r = 0; r < a->world; ++r) {
    ptr(a->a[r]);
    ptr(a->b[r]);
    ptr(a->out[r]);
    ptr(a->partial ? a->partial[r] : nullptr);
    ptr(a->gathered ? a->gathered[r] : nullptr);
    ptr(a->flags ? a->flags[r] : nullptr);
  }
  return h;
}

inline call_info make_call(const pkf_args* a, const split& s) {
  return call_info{s.gemm, s.comm, a->group_m, s.staggered,
                   a->timeout_cycles > 0 ? a->timeout_cycles : PK_DEFAULT_TIMEOUT_CYCLES};
}

template <class Op, class Config>
bool check_args(const pkf_args* a, reporter& rep) {
  if (a == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "pkf_args is NULL"), false;
  if (a->abi_version != PKF_ABI_VERSION)
    return rep.fail(PKC_BAD_ARGUMENT, "pkf_args ABI version %d, this library implements %d",
                    a->abi_version, PKF_ABI_VERSION), false;
  if (a->world < 2 || a->world > PKF_MAX_RANKS)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d is outside 2..%d", a->world, PKF_MAX_RANKS), false;
  if (a->M < 1 || a->N < 1 || a->K < 1)
    return rep.fail(PKC_BAD_ARGUMENT, "M, N, K = %d, %d, %d: each must be at least 1", a->M, a->N,
                    a->K), false;
  if (a->M < a->world)
    return rep.fail(PKC_BAD_ARGUMENT, "M = %d is below the world (%d): some rank would own no rows",
                    a->M, a->world), false;
  if (a->one_rank != 0 && a->one_rank != 1)
    return rep.fail(PKC_BAD_ARGUMENT, "one_rank %d is not 0 (every rank) or 1 (rank `rank` only)",
                    a->one_rank), false;
  if (a->one_rank && (a->rank < 0 || a->rank >= a->world))
    return rep.fail(PKC_BAD_ARGUMENT, "rank %d is outside 0..%d", a->rank, a->world - 1), false;

  if (a->K % 8 != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "K = %d is not a multiple of 8 (TMA needs 16-byte row pitches)",
                    a->K), false;
  if (a->N % 8 != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "N = %d is not a multiple of 8 (TMA needs 16-byte row pitches)",
                    a->N), false;
  const char* names[5] = {"a", "b", "out", "partial", "gathered"};
  void* const* arrays[5] = {a->a, a->b, a->out, a->partial, a->gathered};
  const bool need[5] = {true, true, true, Op::kPartial, Op::kGathered};
  for (int i = 0; i < 5; ++i)
    if (need[i] && arrays[i] == nullptr)
      return rep.fail(PKC_BAD_ARGUMENT, "the %s array is NULL (a host array of world pointers)", names[i]), false;
  for (int r = 0; r < a->world; ++r) {
    const void* p[5] = {a->a[r], a->b[r], a->out[r], need[3] ? a->partial[r] : nullptr,
                        need[4] ? a->gathered[r] : nullptr};
    for (int i = 0; i < 5; ++i) {
      if (!need[i]) continue;
      if (p[i] == nullptr)
        return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s is NULL", r, names[i]), false;
      if (!aligned16(p[i]))
        return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s is not 16-byte aligned", r, names[i]), false;
    }
  }
  if (Op::kSpins) {
    if (a->flags == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "the flags array is NULL"), false;
    for (int r = 0; r < a->world; ++r)
      if (a->flags[r] == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "rank %d: flags are NULL", r), false;
    if (a->num_flags < Op::num_flags(a))
      return rep.fail(PKC_BAD_ARGUMENT, "%d flags per rank; this shape needs %d", a->num_flags,
                      Op::num_flags(a)), false;
    if (a->err == nullptr)
      return rep.fail(PKC_BAD_ARGUMENT, "err (the device error record) is NULL"), false;
  }
  if (a->group_m < 0) return rep.fail(PKC_BAD_ARGUMENT, "group_m %d is negative", a->group_m), false;
  if (a->zero_output != 0 && a->zero_output != 1)
    return rep.fail(PKC_BAD_ARGUMENT, "zero_output must be 0 or 1"), false;
  const size_t need_table = table_plan<Op>(a->world, a->M).bytes;
  if (a->table == nullptr || a->table_bytes < need_table || (reinterpret_cast<uintptr_t>(a->table) & 63u) != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "the device table (pkf_table, pkf_reqs.table_bytes) must be %llu bytes, "
                    "64-byte aligned; got %s of %llu bytes", static_cast<unsigned long long>(need_table),
                    a->table ? "one" : "none", a->table_bytes), false;
  split s;
  return make_split<Op, Config>(a, s, rep);
}

// The kernel instance for a world: narrow up to kNarrowRanks (fused/ops.cuh), wide beyond.
template <class Op, class Config>
int launch(void (*narrow)(const typename Op::globals), void (*wide)(const typename Op::globals),
           const pkf_args* a, reporter& rep) {
  void (*kernel)(const typename Op::globals) = a->world > kNarrowRanks ? wide : narrow;
  using Cfg = typename Op::cfg;
  if (Op::kMulticast && (a->partial_mc == nullptr || a->out_mc == nullptr))
    return rep.fail(PKC_UNSUPPORTED,
                    "in-network kernels need NVLink multicast addresses (partial_mc, out_mc); this "
                    "project never creates them, so these kernels are compile-only");
  split s;
  if (!make_split<Op, Config>(a, s, rep)) return rep.code;
  const call_info ci = make_call(a, s);
  const table_offsets t = table_plan<Op>(a->world, a->M);
  const unsigned char* dev = static_cast<const unsigned char*>(a->table);
  auto g = std::make_unique<typename Op::globals>();
  g->gemm = at<typename Op::globals::gemm_params>(dev, t.params);
  g->comm = Op::comm_params(a, dev, t, ci);
  g->world = a->world;
  g->first_rank = a->one_rank ? a->rank : 0;
  g->gemm_blocks = s.gemm;
  g->comm_blocks = s.comm;
  g->table = reinterpret_cast<const pkc::table_header*>(dev);
  if (a->world <= kNarrowRanks) {
    // the narrow instance: the ranks' GEMM parameters in the kernel parameter, written here
    // as pkf_table writes them (their arrays stay in the device table)
    unsigned char* tmp = static_cast<unsigned char*>(std::aligned_alloc(64, t.bytes));
    if (tmp == nullptr) return rep.fail(PKC_CUDA_ERROR, "cannot allocate %llu bytes", static_cast<unsigned long long>(t.bytes));
    const int rc = Op::fill(tmp, dev, t, a, ci);
    if (rc == pk::gemm::OK)
      std::memcpy(g->inl, tmp + t.params, static_cast<size_t>(a->world) * sizeof(g->inl[0]));
    std::free(tmp);
    if (rc != pk::gemm::OK) return rep.fail(PKC_BAD_ARGUMENT, "%s", pk::gemm::status_string(rc));
  }
  g->table_hash = table_hash(a, s);
  g->err = static_cast<pk::error_record*>(a->err);
  g->seq_slot = reinterpret_cast<unsigned int*>(static_cast<unsigned char*>(a->table) + t.seq);
  g->seq = a->seq;
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  const int ranks = a->one_rank ? 1 : a->world;        // ranks this launch runs
  const dim3 grid(static_cast<unsigned>(ranks * (s.gemm + s.comm)));
  try {
    if (Op::kStoreAdd && a->zero_output) {
      for (int r = g->first_rank; r < g->first_rank + ranks; ++r)
        PK_CUDA_CHECK(cudaMemsetAsync(a->out[r], 0,
                                      static_cast<size_t>(out_rows(Op::kKind, r, a)) * a->N * sizeof(bf16),
                                      stream));
    }
    if (Op::kSpins) {
      pk::launch_cooperative(kernel, grid, dim3(Cfg::THREADS), Cfg::SMEM_BYTES, stream, *g);
    } else {
      PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Cfg::SMEM_BYTES));
      kernel<<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(*g);
      PK_CUDA_CHECK(cudaGetLastError());
    }
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

// Buffer sizes and launch figures for these arguments (world, M, N, K and the block counts are
// read; pointers are not).
template <class Op, class Config>
int requirements(void (*narrow)(const typename Op::globals), void (*wide)(const typename Op::globals),
                 const pkf_args* a, pkf_reqs* out, reporter& rep) {
  using Cfg = typename Op::cfg;
  if (a == nullptr || out == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "NULL argument");
  if (a->world < 2 || a->world > PKF_MAX_RANKS || a->M < a->world || a->N < 1 || a->K < 1)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d, M %d, N %d, K %d: not a valid call", a->world, a->M,
                    a->N, a->K);
  split s;
  if (!make_split<Op, Config>(a, s, rep)) return rep.code;
  void (*kernel)(const typename Op::globals) = a->world > kNarrowRanks ? wide : narrow;
  std::memset(out, 0, sizeof(*out));
  const size_t m = static_cast<size_t>(a->M);
  out->partial_bytes = Op::kPartial ? m * a->N * sizeof(bf16) : 0;
  out->gathered_bytes = Op::kGathered ? m * a->K * sizeof(bf16) : 0;
  out->num_flags = Op::num_flags(a);
  out->gemm_blocks = s.gemm;
  out->comm_blocks = s.comm;
  out->threads = Cfg::THREADS;
  out->smem_bytes = Cfg::SMEM_BYTES;
  out->spins = Op::kSpins ? 1 : 0;
  out->table_bytes = table_plan<Op>(a->world, a->M).bytes;
  try {
    PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::SMEM_BYTES));
    out->max_coresident_blocks = pk::max_coresident_blocks(kernel, Cfg::THREADS, Cfg::SMEM_BYTES);
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

// The device table's bytes for these arguments (a->table: the device address they will live at)
// into `host`: the header, then the ranks' GEMM parameters with their tensor maps and the op's
// arrays (table_plan). Written in an aligned buffer of its own (tensor maps are 64-byte aligned).
template <class Op, class Config>
int table(const pkf_args* a, void* host, size_t bytes, reporter& rep) {
  if (a == nullptr || host == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "NULL argument");
  if (!check_args<Op, Config>(a, rep)) return rep.code;
  split s;
  if (!make_split<Op, Config>(a, s, rep)) return rep.code;
  const table_offsets t = table_plan<Op>(a->world, a->M);
  if (bytes < t.bytes)
    return rep.fail(PKC_BAD_ARGUMENT, "%llu bytes for the table, this call needs %llu",
                    static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(t.bytes));
  unsigned char* buf = static_cast<unsigned char*>(std::aligned_alloc(64, t.bytes));
  if (buf == nullptr) return rep.fail(PKC_CUDA_ERROR, "cannot allocate %llu bytes", static_cast<unsigned long long>(t.bytes));
  std::memset(buf, 0, t.bytes);
  const pkc::table_header h{table_hash(a, s), a->world, 0};
  std::memcpy(buf, &h, sizeof(h));
  const int rc = Op::fill(buf, static_cast<const unsigned char*>(a->table), t, a, make_call(a, s));
  if (rc == pk::gemm::OK) std::memcpy(host, buf, t.bytes);
  std::free(buf);
  if (rc != pk::gemm::OK) return rep.fail(PKC_BAD_ARGUMENT, "%s", pk::gemm::status_string(rc));
  return PKC_OK;
}

}  // namespace pkf

extern "C" int pkf_abi_version(void) { return PKF_ABI_VERSION; }
extern "C" size_t pkf_args_size(void) { return sizeof(pkf_args); }
extern "C" size_t pkf_reqs_size(void) { return sizeof(pkf_reqs); }
