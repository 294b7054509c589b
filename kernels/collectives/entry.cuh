// collectives/entry.cuh: host side of a generated collective: argument checks, globals, launch,
// copy-engine phase sequencing, requirements, and the C functions every library exports.
//
// The generated translation unit includes this file once and defines its own entry point,
//   extern "C" int pk_<op>_<algorithm>_<mechanism>(const pkc_args*, char* msg, size_t len),
// which calls pkc::check_args and then pkc::launch (SM mechanisms), pkc::run_copy_engine or
// pkc::refuse_multimem. Nothing here synchronises with the device except pkc_read_error, which
// the caller invokes after the stream has finished.
//
// Launch rules (ARCHITECTURE.md, "Running on the GPUs we have"):
//   * virtual ranks (rank < 0): one launch whose grid is world x blocks_per_rank; when blocks
//     spin on each other (device_sync and a barrier/ring algorithm) it is a cooperative launch,
//     which guarantees co-residency or fails with the co-resident limit in the message;
//   * ranks in separate processes (rank >= 0): blocks_per_rank blocks, entry and exit barriers,
//     cooperative launch as well;
//   * copy engines: virtual ranks get one stream each (pkc_args::rank_streams), forked from and
//     joined back into pkc_args::stream with events; between phases a rank's stream waits for
//     the events of the ranks it depends on (all of them, or the previous rank for rings).
//     Ranks in separate processes run a one-block barrier kernel between phases
//     (device_sync = 1) or leave the synchronisation to the caller (device_sync = 0).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <cudaTypedefs.h>

#include "collective.cuh"

namespace pkc {

struct reporter {
  char* msg;
  size_t len;
  int code = PKC_OK;
  reporter(char* m, size_t l) : msg(m), len(l) {
    if (msg && len) msg[0] = '\0';
  }
  int fail(int c, const char* fmt, ...) {
    if (msg && len) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(msg, len, fmt, ap);
      va_end(ap);
    }
    code = c;
    return c;
  }
};

inline size_t dtype_size(int dtype) {
  return dtype == PKC_BF16 ? 2 : dtype == PKC_FP32 ? 4 : 0;
}

// Optional members of the -v forms and send/recv (collectives/varsize.cuh): split_words(world)
// (64-bit words of split sizes and displacements the peer table holds after its pointers),
// num_splits(world) (entries of pkc_args::splits), fill_split_table, check_splits. Their
// globals (codegen's extended globals: `splits`, `alpha`, `bias`) are filled by make_globals.
template <class A, class = void>
struct has_splits : std::false_type {};
template <class A>
struct has_splits<A, std::void_t<decltype(A::split_words(2))>> : std::true_type {};
template <class Gl, class = void>
struct extended_globals : std::false_type {};
template <class Gl>
struct extended_globals<Gl, std::void_t<decltype(&Gl::alpha)>> : std::true_type {};
template <class C, class = void>
struct has_epilogue : std::false_type {};
template <class C>
struct has_epilogue<C, std::void_t<typename C::epilogue>> : std::true_type {};

// Where the split sizes start in the peer table (bytes), and how many bytes they take.
inline size_t split_offset(int world) {
  return PKC_TABLE_HEADER_BYTES + 4 * sizeof(void*) * static_cast<size_t>(world);
}
template <class A>
size_t split_bytes(int world) {
  if constexpr (has_splits<A>::value) return sizeof(unsigned long long) * A::split_words(world);
  else return 0;
}

// What an algorithm needs under a config's mechanism.
template <class C, class A>
struct traits {
  static constexpr bool kCopyEngine = C::kMech == mech::copy_engine;
  static int phases(int world) { return kCopyEngine ? A::ce_phases(world) : A::phases(world); }
  static size_t scratch_bytes(size_t n, int world, size_t elem) {
    return kCopyEngine ? A::ce_scratch_bytes(n, world, elem) : A::scratch_bytes(n, world, elem);
  }
  static int blocks_per_rank(const pkc_args* a) {
    return a->blocks_per_rank > 0 ? a->blocks_per_rank : C::kBlocksPerRank;
  }
  // Flags per rank (abi.h): the barrier's, then the point-to-point counters. Ring: one per
  // block; pairs: one per phase (every block of the partner counts on it); others need none.
  static int num_flags(int bpr, int world) {
    if (A::kSync == sync_kind::pairs) return PKC_P2P_FLAG_BASE + A::phases(world);
    return PKC_P2P_FLAG_BASE + bpr * A::p2p_flags(world);
  }
  static size_t table_bytes(int world) {
    if (world <= PKC_INLINE_RANKS && !has_splits<A>::value) return 0;
    return split_offset(world) + split_bytes<A>(world);
  }
  // Whether a call spins on flags (needs flags, an error record and co-residency).
  static bool spins(const pkc_args* a) {
    if (!a->device_sync) return false;
    if (kCopyEngine) return a->rank >= 0;
    return a->rank >= 0 || A::kSync != sync_kind::none;
  }
  static unsigned barriers(const pkc_args* a) {
    if (kCopyEngine) return a->rank >= 0 && a->device_sync ? static_cast<unsigned>(phases(a->world) + 1) : 0u;
    return a->device_sync ? barriers_per_launch<A>(a->world, a->rank >= 0) : 0u;
  }
};

// ---- argument checks --------------------------------------------------------------------------

// The world this kernel can run: 2..PKC_MAX_RANKS, what the algorithm accepts (rhd: a power of
// two), and no TMA or copy-engine sum of more sources than they take.
template <class C, class A>
bool check_world(const pkc_args* a, reporter& rep) {
  if (a->world < 2 || a->world > PKC_MAX_RANKS)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d is outside 2..%d", a->world, PKC_MAX_RANKS), false;
  if (!A::world_ok(a->world))
    return rep.fail(PKC_BAD_ARGUMENT, "world %d: recursive halving / doubling needs a power of two", a->world),
           false;
  if ((C::kMech == mech::tma || C::kMech == mech::copy_engine) && A::sources(a->world) > PKC_TMA_MAX_SOURCES)
    return rep.fail(PKC_BAD_ARGUMENT, "world %d: a %s sum takes at most %d sources, this algorithm sums %d "
                    "(use registers)", a->world, C::kMech == mech::tma ? "TMA" : "copy-engine reduction kernel",
                    PKC_TMA_MAX_SOURCES, A::sources(a->world)), false;
  return true;
}

// FNV-1a over the pointers the peer table holds: the kernel compares the table's copy with its own.
inline unsigned long long table_hash(const pkc_args* a) {
  unsigned long long h = 1469598103934665603ull;
  auto mix = [&](const void* p) {
    unsigned long long v = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p));
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
  };
  mix(reinterpret_cast<const void*>(static_cast<uintptr_t>(a->world)));
  for (int r = 0; r < a->world; ++r) {
    mix(a->in[r]);
    mix(a->out[r]);
    mix(a->scratch ? a->scratch[r] : nullptr);
    mix(a->flags[r]);
  }
  for (unsigned long long i = 0; a->splits != nullptr && i < a->num_splits; ++i)
    mix(reinterpret_cast<const void*>(static_cast<uintptr_t>(a->splits[i])));
  return h;
}

// The peer table's bytes for these arguments (abi.h): header, then in, out, scratch and flags
// pointers, world each.
inline void write_table(const pkc_args* a, unsigned char* host) {
  const size_t w = static_cast<size_t>(a->world);
  table_header h{table_hash(a), a->world, 0};
  std::memcpy(host, &h, sizeof(h));
  void** p = reinterpret_cast<void**>(host + PKC_TABLE_HEADER_BYTES);
  for (size_t r = 0; r < w; ++r) {
    p[r] = a->in[r];
    p[w + r] = a->out[r];
    p[2 * w + r] = a->scratch ? a->scratch[r] : nullptr;
    p[3 * w + r] = a->flags[r];
  }
}

template <class C, class A>
bool check_args(const pkc_args* a, reporter& rep) {
  using tr = traits<C, A>;
  if (a == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "pkc_args is NULL"), false;
  if (a->abi_version != PKC_ABI_VERSION)
    return rep.fail(PKC_BAD_ARGUMENT, "pkc_args ABI version %d, this library implements %d",
                    a->abi_version, PKC_ABI_VERSION), false;
  if (!check_world<C, A>(a, rep)) return false;
  if (a->rank < -1 || a->rank >= a->world)
    return rep.fail(PKC_BAD_ARGUMENT, "rank %d is neither -1 (virtual ranks) nor a rank of world %d",
                    a->rank, a->world), false;
  const size_t elem = dtype_size(a->dtype);
  if (elem == 0)
    return rep.fail(PKC_BAD_ARGUMENT, "dtype %d is neither fp32 (%d) nor bf16 (%d)", a->dtype,
                    PKC_FP32, PKC_BF16), false;
  if (a->count == 0) return rep.fail(PKC_BAD_ARGUMENT, "count must be positive"), false;
  if (a->count > (1ull << 40) / elem)
    return rep.fail(PKC_BAD_ARGUMENT, "count %llu is above the 1 TiB this library accepts", a->count), false;
  const int bpr = tr::blocks_per_rank(a);
  if (bpr < 1 || bpr > PKC_MAX_BLOCKS_PER_RANK)
    return rep.fail(PKC_BAD_ARGUMENT, "blocks_per_rank %d is outside 1..%d", bpr, PKC_MAX_BLOCKS_PER_RANK), false;
  const int phases = tr::phases(a->world);
  {
    // device_sync = 0: one call runs [phase_begin, phase_end) with no waiting (the caller meets
    // the ranks between calls); = 1: the range with device waits between its phases (a whole
    // call, or consecutive ranges made with the same seq, abi.h). An empty range [p, p)
    // launches the kernel with no phase: its launch and start alone.
    const int end = a->phase_end < 0 ? phases : a->phase_end;
    if (a->phase_begin < 0 || a->phase_begin > end || end > phases)
      return rep.fail(PKC_BAD_ARGUMENT, "phase range [%d, %d) is not inside [0, %d)", a->phase_begin, end,
                      phases), false;
  }
  for (int r = 0; r < a->world; ++r) {
    if (a->in[r] == nullptr || a->out[r] == nullptr)
      return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s buffer is NULL", r, a->in[r] ? "output" : "input"), false;
    if (!aligned16(a->in[r]) || !aligned16(a->out[r]))
      return rep.fail(PKC_BAD_ARGUMENT, "rank %d: %s buffer is not 16-byte aligned", r,
                      aligned16(a->in[r]) ? "output" : "input"), false;
  }
  const size_t need = tr::scratch_bytes(a->count, a->world, elem);
  if (need != 0) {
    if (a->scratch_bytes < need)
      return rep.fail(PKC_BAD_ARGUMENT, "scratch of %llu bytes per rank is below the %llu bytes this algorithm needs",
                      a->scratch_bytes, static_cast<unsigned long long>(need)), false;
    if (a->scratch == nullptr)
      return rep.fail(PKC_BAD_ARGUMENT, "the scratch array is NULL; this algorithm needs %llu bytes per rank",
                      static_cast<unsigned long long>(need)), false;
    for (int r = 0; r < a->world; ++r)
      if (a->scratch[r] == nullptr || !aligned16(a->scratch[r]))
        return rep.fail(PKC_BAD_ARGUMENT, "rank %d: scratch buffer is NULL or not 16-byte aligned", r), false;
  }
  if (tr::spins(a)) {
    for (int r = 0; r < a->world; ++r)
      if (a->flags[r] == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "rank %d: flags are NULL", r), false;
    if (a->num_flags < tr::num_flags(bpr, a->world))
      return rep.fail(PKC_BAD_ARGUMENT, "%d flags per rank, %d blocks per rank at world %d need %d", a->num_flags,
                      bpr, a->world, tr::num_flags(bpr, a->world)), false;
  }
  const size_t tb = tr::table_bytes(a->world);
  if (tb != 0) {
    if (a->table == nullptr || a->table_bytes < tb || !aligned16(a->table))
      return has_splits<A>::value
                 ? (rep.fail(PKC_BAD_ARGUMENT, "a collective with split sizes needs a device peer table of %llu "
                             "bytes at every world (pkc_table; pkc_reqs.table_bytes), got %s of %llu bytes",
                             static_cast<unsigned long long>(tb), a->table ? "one" : "none", a->table_bytes), false)
                 : (rep.fail(PKC_BAD_ARGUMENT, "world %d > %d needs a device peer table of %llu bytes (pkc_table; "
                             "pkc_reqs.table_bytes), got %s of %llu bytes", a->world, PKC_INLINE_RANKS,
                             static_cast<unsigned long long>(tb), a->table ? "one" : "none", a->table_bytes), false);
  }
  if (a->err == nullptr && C::kMech != mech::copy_engine)
    return rep.fail(PKC_BAD_ARGUMENT, "err (the device error record) is NULL"), false;
  if (a->root < 0 || a->root >= a->world)
    return rep.fail(PKC_BAD_ARGUMENT, "root %d is not a rank of world %d", a->root, a->world), false;
  if constexpr (has_splits<A>::value) {
    if (a->splits == nullptr || a->num_splits != A::num_splits(a->world))
      return rep.fail(PKC_BAD_ARGUMENT, "this collective takes %llu split sizes (splits, num_splits) at world %d, got %llu%s",
                      static_cast<unsigned long long>(A::num_splits(a->world)), a->world, a->num_splits,
                      a->splits ? "" : " (splits is NULL)"), false;
    if (const int st = A::check_splits(a->splits, a->world, a->count, rep.msg, rep.len)) return rep.code = st, false;
  }
  if constexpr (has_epilogue<C>::value) {
    if (C::epilogue::kBias && (a->bias == nullptr || a->bias_count == 0 || a->bias_count >= (1ull << 32)))
      return rep.fail(PKC_BAD_ARGUMENT, "this epilogue adds a bias: bias must be a device array of 1 to 2^32 - 1 "
                      "elements (bias_count %llu)", a->bias_count), false;
  }
  if (C::kMech == mech::multimem && (a->count * elem) % 16 != 0)
    return rep.fail(PKC_BAD_ARGUMENT, "multimem kernels move 16-byte vectors: %llu bytes per rank is not a multiple of 16",
                    static_cast<unsigned long long>(a->count * elem)), false;
  return true;
}

// ---- globals --------------------------------------------------------------------------------------

// Every rank's buffer of one kind: its pointers in the kernel parameter (narrow), or the k-th
// array of the device peer table (wide). `host`: for the host's own use (the copy engines'
// phases read g.in[r] on the host), the caller's host array in place of the table.
template <typename T, bool Wide>
inline peers<T, Wide> make_peers(void* const* bufs, int world, const void* table, int k, void* mc,
                                 bool host = false) {
  peers<T, Wide> l{};
  l.world = world;
  l.mc = static_cast<T*>(mc);
  if constexpr (!Wide) {
    for (int r = 0; r < world && r < PKC_INLINE_RANKS; ++r) l.inl[r] = bufs ? static_cast<T*>(bufs[r]) : nullptr;
  } else if (host) {
    l.table = reinterpret_cast<T* const*>(bufs);
  } else {
    l.table = reinterpret_cast<T* const*>(static_cast<const unsigned char*>(table) + PKC_TABLE_HEADER_BYTES +
                                          static_cast<size_t>(k) * world * sizeof(void*));
  }
  return l;
}

// The kernel's globals for a call (Gl: the generated globals<T, kWide> of the call's world).
template <class Gl, class C, class A>
inline Gl make_globals(const pkc_args* a) {
  using T = typename Gl::value_type;
  using tr = traits<C, A>;
  constexpr bool W = Gl::wide;
  const int w = a->world;
  const size_t n = a->count;
  // Copy engines: the host sequences the copies from the buffers' pointers (host arrays); only
  // the barrier kernel of ranks in separate processes reads the flags on the device.
  const bool host = C::kMech == mech::copy_engine;
  Gl g{};
  g.in = make_peers<T, W>(a->in, w, a->table, 0, a->in_mc, host);
  g.out = make_peers<T, W>(a->out, w, a->table, 1, a->out_mc, host);
  g.scratch = make_peers<T, W>(a->scratch, w, a->table, 2, nullptr, host);
  g.flags.ctr = make_peers<unsigned int, W>(reinterpret_cast<void* const*>(a->flags), w, a->table, 3, nullptr);
  g.flags.num_flags = a->num_flags;
  g.flags.spin = pk::spin_ctx::make(static_cast<pk::error_record*>(a->err),
                                    a->timeout_cycles > 0 ? a->timeout_cycles : PK_DEFAULT_TIMEOUT_CYCLES);
  g.table = W && !host ? static_cast<const table_header*>(a->table) : nullptr;
  g.table_hash = W ? table_hash(a) : 0;
  g.count = n;
  g.rank = a->rank;
  g.blocks_per_rank = tr::blocks_per_rank(a);
  g.seq = a->seq;
  g.phase_begin = a->phase_begin;
  g.phase_end = a->phase_end < 0 ? tr::phases(w) : a->phase_end;
  g.device_sync = a->device_sync;
  g.root = a->root;
  if constexpr (extended_globals<Gl>::value) {
    // the -v forms and send/recv read their splits from the table at every world (varsize.cuh)
    if constexpr (has_splits<A>::value) {
      g.table = host ? nullptr : static_cast<const table_header*>(a->table);
      g.table_hash = table_hash(a);
      g.splits = host ? nullptr : reinterpret_cast<const unsigned long long*>(
                                      static_cast<const unsigned char*>(a->table) + split_offset(w));
    }
    g.host_splits = a->splits;
    g.alpha = static_cast<float>(a->alpha);
    g.bias = static_cast<const T*>(a->bias);
    g.bias_count = a->bias_count;
  }
  return g;
}

// ---- SM mechanisms (tma, register) ------------------------------------------------------------------

// The kernel instance for a world: narrow up to PKC_INLINE_RANKS, wide beyond (collective.cuh sized).
template <class C, class A, class Gl>
int launch_one(void (*kernel)(const Gl), const pkc_args* a, reporter& rep) {
  const Gl g = make_globals<Gl, C, A>(a);
  const int ranks_here = a->rank < 0 ? a->world : 1;
  const dim3 grid(static_cast<unsigned>(ranks_here * g.blocks_per_rank));
  const dim3 block(C::kThreads);
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  try {
    if (traits<C, A>::spins(a)) {
      pk::launch_cooperative(kernel, grid, block, C::kSmemBytes, stream, g);
    } else {
      if (C::kSmemBytes > 48 * 1024)
        PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(C::kSmemBytes)));
      kernel<<<grid, block, C::kSmemBytes, stream>>>(g);
      PK_CUDA_CHECK(cudaGetLastError());
    }
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

inline bool wide_world(int world) { return world > PKC_INLINE_RANKS; }

template <class C, class A, class Gn, class Gw>
int launch(void (*narrow)(const Gn), void (*wide)(const Gw), const pkc_args* a, reporter& rep) {
  if (wide_world(a->world)) return launch_one<C, A>(wide, a, rep);
  return launch_one<C, A>(narrow, a, rep);
}
template <class C, class A>
int refuse_multimem(const pkc_args* a, reporter& rep) {
  // The emulated build (-DPKC_EMULATE_MULTIMEM=1, collectives/in_network.cuh) loads and stores
  // every rank's buffer instead: it needs no multicast address.
  if (C::kEmulateMultimem) return PKC_OK;
  if (a->in_mc == nullptr || a->out_mc == nullptr)
    return rep.fail(PKC_UNSUPPORTED,
                    "multimem kernels need NVLink multicast addresses (in_mc, out_mc); this project never "
                    "creates them, so these kernels are compile-only");
  return PKC_OK;
}

// ---- copy engines --------------------------------------------------------------------------------

struct ce_events {
  cudaEvent_t main = nullptr;
  std::vector<cudaEvent_t> rank;
  void ensure(int world) {
    if (!main) PK_CUDA_CHECK(cudaEventCreateWithFlags(&main, cudaEventDisableTiming));
    while (static_cast<int>(rank.size()) < world) {
      cudaEvent_t e = nullptr;
      PK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      rank.push_back(e);
    }
  }
};

template <class C, class A, class Gl>
int run_copy_engine_one(const pkc_args* a, reporter& rep) {
  static ce_events ev;  // one set per library; calls are not made concurrently from several threads
  try {
    const Gl g = make_globals<Gl, C, A>(a);
    const int w = a->world;
    cudaStream_t main = static_cast<cudaStream_t>(a->stream);
    const int begin = a->phase_begin;
    const int end = g.phase_end;
    if (a->rank < 0) {
      ev.ensure(w);
      std::vector<cudaStream_t> s(static_cast<size_t>(w), main);
      for (int r = 0; r < w; ++r)
        if (a->rank_streams && a->rank_streams[r]) s[r] = static_cast<cudaStream_t>(a->rank_streams[r]);
      PK_CUDA_CHECK(cudaEventRecord(ev.main, main));
      for (int r = 0; r < w; ++r) PK_CUDA_CHECK(cudaStreamWaitEvent(s[r], ev.main, 0));
      for (int p = begin; p < end; ++p) {
        if (p > begin) {
          for (int r = 0; r < w; ++r) {
            if (A::kCeSync == sync_kind::ring) {
              PK_CUDA_CHECK(cudaStreamWaitEvent(s[r], ev.rank[(r + w - 1) % w], 0));
            } else {
              for (int q = 0; q < w; ++q)
                if (q != r) PK_CUDA_CHECK(cudaStreamWaitEvent(s[r], ev.rank[q], 0));
            }
          }
        }
        for (int r = 0; r < w; ++r) {
          A::template ce_phase<C>(g, r, p, ce_ctx{s[r], g.blocks_per_rank});
          PK_CUDA_CHECK(cudaEventRecord(ev.rank[r], s[r]));
        }
      }
      for (int r = 0; r < w; ++r) PK_CUDA_CHECK(cudaStreamWaitEvent(main, ev.rank[r], 0));
      return PKC_OK;
    }
    const int r = a->rank;
    const ce_ctx x{main, g.blocks_per_rank};
    const unsigned nb = traits<C, A>::barriers(a);
    // barrier i (before phase i, and phases: after the last) keeps its index in a split call
    auto barrier = [&](unsigned i) {
      ce_barrier_kernel<<<1, 32, 0, main>>>(g.flags, r, w, g.seq * nb + i + 1);
      PK_CUDA_CHECK(cudaGetLastError());
    };
    for (int p = begin; p < end; ++p) {
      if (a->device_sync) barrier(static_cast<unsigned>(p));
      A::template ce_phase<C>(g, r, p, x);
    }
    if (a->device_sync && end == A::ce_phases(w)) barrier(static_cast<unsigned>(end));
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

// Copy engines for a world: Gn / Gw the narrow and wide globals (the host reads their pointers).
template <class C, class A, class Gn, class Gw>
int run_copy_engine(const pkc_args* a, reporter& rep) {
  if (wide_world(a->world)) return run_copy_engine_one<C, A, Gw>(a, rep);
  return run_copy_engine_one<C, A, Gn>(a, rep);
}

// ---- requirements ------------------------------------------------------------------------------------

// Sizes and launch figures of a call with these arguments (world, rank, count, dtype,
// blocks_per_rank, device_sync are read; pointers are not). `kernel` may be nullptr (copy engines).
template <class C, class A, class Gl>
int requirements_one(void (*kernel)(const Gl), const pkc_args* a, pkc_reqs* out, reporter& rep) {
  using tr = traits<C, A>;
  if (a == nullptr || out == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "NULL argument");
  if (!check_world<C, A>(a, rep)) return rep.code;
  const size_t elem = dtype_size(a->dtype);
  if (elem == 0) return rep.fail(PKC_BAD_ARGUMENT, "dtype %d is neither fp32 nor bf16", a->dtype);
  std::memset(out, 0, sizeof(*out));
  const int w = a->world;
  out->in_count = A::in_count(a->count, w);
  out->out_count = A::out_count(a->count, w);
  out->scratch_bytes = tr::scratch_bytes(a->count, w, elem);
  out->blocks_per_rank = tr::blocks_per_rank(a);
  out->num_flags = tr::num_flags(out->blocks_per_rank, w);
  out->table_bytes = tr::table_bytes(w);
  out->spins = tr::spins(a) ? 1 : 0;
  out->phases = tr::phases(w);
  out->threads = C::kThreads;
  out->smem_bytes = C::kSmemBytes;
  out->barriers_per_launch = static_cast<int>(tr::barriers(a));
  if (kernel != nullptr) {
    try {
      if (C::kSmemBytes > 48 * 1024)
        PK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(C::kSmemBytes)));
      out->max_coresident_blocks = pk::max_coresident_blocks(kernel, C::kThreads, C::kSmemBytes);
    } catch (const std::exception& e) {
      return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
    }
  }
  return PKC_OK;
}

template <class C, class A, class Gn, class Gw>
int requirements(void (*narrow)(const Gn), void (*wide)(const Gw), const pkc_args* a, pkc_reqs* out,
                 reporter& rep) {
  if (a != nullptr && wide_world(a->world)) return requirements_one<C, A>(wide, a, out, rep);
  return requirements_one<C, A>(narrow, a, out, rep);
}

// The peer table's bytes for these arguments into `host` (pkc_table).
template <class C, class A>
int table(const pkc_args* a, void* host, size_t bytes, reporter& rep) {
  using tr = traits<C, A>;
  if (a == nullptr || host == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "NULL argument");
  if (!check_world<C, A>(a, rep)) return rep.code;
  if (a->in == nullptr || a->out == nullptr || a->flags == nullptr)
    return rep.fail(PKC_BAD_ARGUMENT, "the in, out and flags arrays must be given (host arrays of world pointers)");
  const size_t need = tr::table_bytes(a->world);
  if (bytes < need)
    return rep.fail(PKC_BAD_ARGUMENT, "%llu bytes for the table, world %d needs %llu",
                    static_cast<unsigned long long>(bytes), a->world, static_cast<unsigned long long>(need));
  if (need != 0) write_table(a, static_cast<unsigned char*>(host));
  if constexpr (has_splits<A>::value) {
    if (a->splits == nullptr || a->num_splits != A::num_splits(a->world))
      return rep.fail(PKC_BAD_ARGUMENT, "the table holds %llu split sizes at world %d; splits / num_splits give %llu",
                      static_cast<unsigned long long>(A::num_splits(a->world)), a->world, a->num_splits);
    A::fill_split_table(a->splits, a->world, reinterpret_cast<unsigned long long*>(
                                                  static_cast<unsigned char*>(host) + split_offset(a->world)));
  }
  return PKC_OK;
}

}  // namespace pkc

// ---- C functions every generated library exports --------------------------------------------------

extern "C" int pkc_abi_version(void) { return PKC_ABI_VERSION; }
extern "C" size_t pkc_args_size(void) { return sizeof(pkc_args); }
extern "C" size_t pkc_reqs_size(void) { return sizeof(pkc_reqs); }

// After the stream of a call has finished: PKC_OK, or PKC_DEVICE_TIMEOUT with the record
// described ("rank 3 timed out waiting on flag 9 from peer 2: expected 5, saw 4").
extern "C" int pkc_read_error(const void* err, char* msg, size_t len) {
  pkc::reporter rep(msg, len);
  if (err == nullptr) return rep.fail(PKC_BAD_ARGUMENT, "err is NULL");
  try {
    const pk::error_record r = pk::read_error_record(static_cast<const pk::error_record*>(err));
    if (r.code != pk::PK_OK) return rep.fail(PKC_DEVICE_TIMEOUT, "%s", pk::describe(r).c_str());
  } catch (const std::exception& e) {
    return rep.fail(PKC_CUDA_ERROR, "%s", e.what());
  }
  return PKC_OK;
}

// CUDA IPC of a pointer anywhere inside an allocation: the handle names the allocation's base,
// `offset` the pointer's distance from it (the opener adds it back). A process cannot open its
// own handles; use the local pointer there.
extern "C" int pkc_ipc_handle(const void* ptr, void* handle64, unsigned long long* offset, char* msg, size_t len) {
  pkc::reporter rep(msg, len);
  static PFN_cuMemGetAddressRange_v3020 range = nullptr;
  if (range == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || fn == nullptr)
      return rep.fail(PKC_CUDA_ERROR, "the driver does not export cuMemGetAddressRange");
    range = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return rep.fail(PKC_CUDA_ERROR, "cuMemGetAddressRange failed for %p (not device memory?)", ptr);
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (e != cudaSuccess)
    return rep.fail(PKC_CUDA_ERROR, "cudaIpcGetMemHandle failed: %s", cudaGetErrorString(e));
  std::memcpy(handle64, &h, sizeof(h));
  *offset = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(base));
  return PKC_OK;
}

extern "C" int pkc_ipc_open(const void* handle64, void** base, char* msg, size_t len) {
  pkc::reporter rep(msg, len);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle64, sizeof(h));
  const cudaError_t e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) return rep.fail(PKC_CUDA_ERROR, "cudaIpcOpenMemHandle failed: %s", cudaGetErrorString(e));
  return PKC_OK;
}

extern "C" int pkc_ipc_close(void* base) { return cudaIpcCloseMemHandle(base) == cudaSuccess ? PKC_OK : PKC_CUDA_ERROR; }
