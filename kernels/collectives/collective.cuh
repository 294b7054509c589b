// collectives/collective.cuh: the skeleton every generated collective kernel specialises.
//
// A generated translation unit (pksim codegen) defines
//   * `config`: launch constants (mechanism, threads, blocks per rank, TMA stage size, peer order),
//   * `globals<T>`: the layouts (pk::pgl of every rank's input, output and scratch), the flag
//     counters, the problem size and the grid,
//   * the kernel, which calls pkc::run<config, algorithm>(g, smem), and
//   * the host entry point (collectives/entry.cuh does the checking and launching).
// This file holds what every algorithm shares:
//   * peers / flag_set: every rank's buffer of one kind, for any world: in the kernel parameter
//     up to PKC_INLINE_RANKS ranks, else in the caller's device peer table (abi.h);
//   * ctx: which rank and which of its blocks this block is (virtual ranks: rank = block / bpr);
//   * piece(): cutting a range into 16-byte-aligned pieces, one per rank or block;
//   * copy_to / reduce_to: move a span to up to PKC_SET_SLOTS destinations, or sum up to
//     PKC_SET_SLOTS sources into them (fp32 accumulation; a reduce op and an epilogue through
//     epilogue.cuh's policies), through the mechanism of the config: TMA (bulk loads into
//     shared memory, bulk stores out of it; the SM adds) or registers (16-byte ld.global.cg /
//     st), at any alignment (the element loops: moves.cuh); copy_list / reduce_list: the same
//     for a peer_list of any length (every rank's buffer in a rank's visiting order),
//     PKC_SET_SLOTS buffers at a time (a TMA sum takes at most PKC_TMA_MAX_SOURCES: the host
//     refuses more); reduce_from_ranks / reduce_ranks_to_ranks / copy_to_ranks: those moves
//     over every rank's buffer, narrow or wide;
//   * grid_barrier (dissemination: ceil(log2 world) rounds), ring_wait / ring_signal (block b
//     of a rank and of the next), pair_wait / pair_signal (a partner per phase): the
//     synchronisation between phases (phase_sync.cuh);
//   * run(): the phase loop with the entry/exit barriers of ranks in separate processes.
//
// An algorithm (collectives/<op>.cuh) is a struct with static members:
//   kSync (none, barrier, ring, pairs), in_count / out_count (elements per rank), scratch_bytes,
//   phases(world), sends(p, world) and signals_before(p, world) (ring), partner(rank, p, world)
//   (pairs: the rank whose data phase p reads), phase<C>(g, ctx, p, sm) (device), and the
//   copy-engine form: ce_phases, ce_scratch_bytes, kCeSync, ce_phase<C>(); p2p_flags(world)
//   (point-to-point counters per block), sources(world) (the most buffers one of its sums
//   reads: the host refuses TMA beyond PKC_TMA_MAX_SOURCES), world_ok(world) (e.g. a power of
//   two). It inherits their defaults (traits.cuh algorithm_defaults: one phase, no scratch, ...;
//   sm_only: no copy-engine form) and states what differs.
//
// Ordering (see pk/sync.cuh and pk/tma.cuh): every helper that writes through TMA ends with
// complete_writes() in the issuing thread (thread 0) and a __syncthreads_and, so the release in
// the following barrier / signal (also issued by thread 0) covers the block's writes, register
// and bulk alike. After every acquire (barrier, ring wait) thread 0 runs the async-proxy fence
// before it issues TMA loads of data a peer published.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "pk/pk.cuh"
#include "abi.h"

// TMA copies deal stage-sized chunks round-robin over a rank's blocks (copy_range); 0 gives
// every block one contiguous piece instead.
#ifndef PKC_INTERLEAVE
#define PKC_INTERLEAVE 1
#endif

namespace pkc {

enum class mech { tma, reg, copy_engine, multimem };
enum class sync_kind { none, barrier, ring, pairs, all };

PK_HD size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
PK_HD size_t round_up(size_t a, size_t m) { return ceil_div(a, m) * m; }
PK_HD size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// Elements per 16-byte vector.
template <typename T>
constexpr size_t kVec = 16 / sizeof(T);

struct span {
  size_t lo, hi;
  PK_HD size_t size() const { return hi - lo; }
};

// Piece k of [0, n) cut into `parts` pieces of equal length rounded up to `align` elements
// (so every piece starts 16-byte aligned when the range does); the last pieces may be short
// or empty.
PK_HD span piece(size_t n, int parts, int k, size_t align) {
  const size_t step = round_up(ceil_div(n, static_cast<size_t>(parts)), align);
  const size_t lo = min_size(n, step * static_cast<size_t>(k));
  return span{lo, min_size(n, lo + step)};
}

// A rank's blocks cut a range into pieces of whole 128-byte lines, and of whole 4 KiB once a
// piece holds 64 KiB or more (when the range starts on such a boundary, so does every piece).
// Pieces of whole 16-byte vectors start off the lines on 33, 66 or 132 blocks, and there a
// register copy of 256 MiB ran 8-10 % slower, a register sum 5-7 %, a TMA copy 2x; at 4 KiB
// a 33-block register copy ran 6 % faster than at 128 bytes (validation/experiments/
// piece_align.cu at commit 7cc519e, H200; docs/decisions/D23.md). Below 64 KiB a piece stays small, so
// that small ranges still spread over the blocks (4 KiB pieces put a 4 KiB TMA sum of 8
// sources on one block: 0.4-0.8 us slower). pksim_core.move_cuts.piece_blocks models the cut
// (docs/decisions/D23.md).
constexpr size_t kLineBytes = 128, kPieceBytes = 4096, kPagedPieceBytes = 64 * 1024;

// Block k's piece of [0, n) elements of `elem` bytes among `parts` blocks.
PK_HD span block_piece(size_t n, int parts, int k, size_t elem) {
  const size_t share = ceil_div(n, static_cast<size_t>(parts)) * elem;
  return piece(n, parts, k, (share >= kPagedPieceBytes ? kPieceBytes : kLineBytes) / elem);
}

// ---- every rank's buffers, for any world ------------------------------------------------------

// Rank r's buffer of one kind (input, output, scratch, flag counters) as this process addresses
// it, in one of two forms, one per kernel instance (sized below): narrow (world <=
// PKC_INLINE_RANKS), the pointers in the kernel parameter (`inl`: a uniform load, no memory
// traffic; indices past the world hold null and are never read); wide, the k-th array of the
// caller's device peer table (abi.h). Declared inside the kernel's __grid_constant__ globals,
// so that inl[] indexed at a run-time rank stays in the parameter space (no local copy).
template <typename T, bool Wide>
struct peers;

template <typename T>
struct peers<T, false> {
  static constexpr int max_ranks = PKC_INLINE_RANKS;
  T* inl[PKC_INLINE_RANKS];
  T* mc;             // multicast address of the set (multimem kernels), else nullptr
  int world;
  PK_HD T* operator[](int r) const { return inl[r]; }
};

template <typename T>
struct peers<T, true> {
  T* const* table;   // world entries in device memory (or, for the host's own use, host memory)
  T* mc;
  int world;
  PK_HD T* operator[](int r) const { return table[r]; }
};

// The start of the device peer table (abi.h): a hash of the arguments it was written for, so
// that a kernel never follows pointers of another call.
struct table_header {
  unsigned long long hash;
  int world;
  int reserved;
};
static_assert(sizeof(table_header) == PKC_TABLE_HEADER_BYTES, "abi.h PKC_TABLE_HEADER_BYTES");

// Every rank's flag counters and the spin context of every wait on them.
template <bool Wide>
struct flag_set {
  peers<unsigned int, Wide> ctr;
  int num_flags;
  pk::spin_ctx spin;
  PK_HD unsigned int* at(int r, int idx) const { return ctr[r] + idx; }
};

// A kernel is instantiated twice (collectives/entry.cuh launch picks by world): narrow, for
// worlds up to PKC_INLINE_RANKS, where every set of a move fits the compile-time slots and the
// pointers come from the kernel parameter, as the kernels were tuned; wide, for any world,
// where moves over every rank go through peer_list batches and pointers come from the peer
// table, checked first. With both in one kernel (a run-time test of the world) the narrow path
// of the fp32 two-shot by registers spilled: 128 registers and 32-72 B of stack (ptxas -v,
// sm_90a, CUDA 13.0; docs/decisions/D17.md says why a stack costs).
template <class C, bool Wide>
struct sized : C {
  static constexpr bool kWide = Wide;
};

// Which rank a block serves, which of that rank's blocks it is.
struct ctx {
  int rank;   // the rank this block works for
  int block;  // index among that rank's blocks
  int bpr;    // blocks per rank
  int world;
  PK_HD int next() const { return (rank + 1) % world; }
  PK_HD int prev() const { return (rank + world - 1) % world; }
};

template <class G>
PK_DEV ctx make_ctx(const G& g) {
  ctx c;
  c.bpr = g.blocks_per_rank;
  c.world = g.in.world;
  if (g.rank < 0) {  // virtual ranks: one launch serves every rank
    c.rank = static_cast<int>(blockIdx.x) / c.bpr;
    c.block = static_cast<int>(blockIdx.x) % c.bpr;
  } else {
    c.rank = g.rank;
    c.block = static_cast<int>(blockIdx.x);
  }
  return c;
}

// Block c.block's piece of [0, n) among its rank's blocks.
template <typename T>
PK_HD span block_piece(size_t n, const ctx& c) {
  return block_piece(n, c.bpr, c.block, sizeof(T));
}

// The k-th peer a rank visits (0 <= rank, k < world): staggered (rank, rank+1, ...) or
// sequential (0, 1, ...). A subtraction, not `%`: a modulo by a run-time world is a few
// dozen instructions a peer in every thread (0.3 us of the TMA two-shot's phase at w8:
// validation/experiments/two_shot_gap.cu at commit 7cc519e; docs/decisions/D17.md). For the slots fill_peers writes past the
// world (world <= k < PKC_MAX_RANKS) it stays below PKC_MAX_RANKS. k is tested against
// world - rank: with `rank + k >= world` (the same result) ptxas gave the fp32 two-shot by
// registers 56 B of stack (ptxas -v, sm_90a, CUDA 13.0).
template <class C>
PK_HD int peer(int rank, int k, int world) {
  if (!C::kStaggered) return k;
  return k < world - rank ? rank + k : rank + k - world;
}

// Up to PKC_SET_SLOTS destinations / sources. Every access uses a compile-time index (add()
// selects its slot, loops over the entries go through PKC_EACH), so the array stays in
// registers: a run-time index would put it on the thread's stack, and a grid whose threads
// have a stack starts slower the more blocks it has (docs/design/limits.md).
template <typename P>
struct ptr_set {
  P p[PKC_SET_SLOTS];
  int n;
  PK_HD void add(P x) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < PKC_SET_SLOTS; ++k)
      if (k == n) p[k] = x;
    ++n;
  }
  // p[k] = f(k) in every slot, each at its own compile-time index, and n = count: f must be
  // defined for every k < PKC_SET_SLOTS (an index in range), though only the first count
  // slots are read. No chain of selects on a run-time n as count add()s leave in the code
  // (0.35 us of the TMA two-shot's phase at w8), and no branch per slot as writing only the
  // slots k < count left (the register two-shot's phase at w8, peers in order, ran 0.35 us
  // over a crossed sum writing every slot): docs/decisions/D17.md.
  template <class F>
  PK_HD void fill(int count, F f) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < PKC_SET_SLOTS; ++k) p[k] = f(k);
    n = count;
  }
  // The list interface (peer_list): the k-th pointer; a copy of the set (first is 0: a set
  // holds at most PKC_SET_SLOTS); the common misalignment of the pointers (-1: mixed).
  PK_HD P at(int k) const { return p[k]; }
  template <typename Q>
  PK_HD void fill_set(ptr_set<Q>& s, int) const {
    s.fill(n, [&](int k) { return static_cast<Q>(p[k]); });
  }
  // f(p[k]) for every pointer of the set, each at its compile-time slot.
  template <class F>
  PK_HD void each(F f) const {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < PKC_SET_SLOTS; ++k)
      if (k < n) f(p[k]);
  }
  PK_HD int misalignment() const {
    const int a = static_cast<int>(reinterpret_cast<uintptr_t>(p[0]) & 15u);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < PKC_SET_SLOTS; ++k)
      if (k < n && static_cast<int>(reinterpret_cast<uintptr_t>(p[k]) & 15u) != a) return -1;
    return a;
  }
};
template <typename T>
using ptrs = ptr_set<T*>;
template <typename T>
using cptrs = ptr_set<const T*>;

// s = every rank's buffer of layout l, plus offset, in the order rank c.rank visits them
// (peer<C>); n = world <= PKC_INLINE_RANKS (the pointers of the kernel parameter). The slots past
// the world hold the pointer of the rank peer<C> gives there (below PKC_INLINE_RANKS; null for a
// rank past the world; never read). Staggered, each
// slot reads the kernel argument's pointer array at a run-time rank: a uniform load, no
// branch. Rotating pointers read at compile-time slots instead (two barrel rotations and a
// merge) took more instructions and gave the bf16 two-shot by registers 64 B of stack
// (ptxas -v, sm_90a, CUDA 13.0).
template <class C, typename P, class L>
PK_HD void fill_peers(ptr_set<P>& s, const L& l, const ctx& c, size_t offset) {
  static_assert(L::max_ranks >= PKC_SET_SLOTS, "peer<C> gives ranks up to PKC_SET_SLOTS - 1");
  s.fill(c.world, [&](int k) { return l.inl[peer<C>(c.rank, k, c.world)] + offset; });
}

// Every rank's buffer of one kind, plus an offset, in the order a rank visits them (peer<C>),
// for any world: the list a move reads or writes when it has more buffers than a ptr_set's
// slots. at(k) reads the pointer where it lies (kernel parameter or peer table); fill_set()
// takes up to PKC_SET_SLOTS of them, from the first-th on, into compile-time slots. Every
// rank's buffer is 16-byte aligned (checked by the host), so the list's misalignment is the
// offset's. Narrow (Wide = false), the pointers are read from the kernel parameter at each use
// (a uniform load), so that a list holds none in registers (moves.cuh's shifted sums).
template <class C, typename T, bool Wide = true>
struct peer_list {
  const peers<T, Wide>* buf;
  size_t offset;   // elements
  int rank, n;     // n: the world
  PK_HD T* at(int k) const { return (*buf)[peer<C>(rank, k, n)] + offset; }
  template <typename Q>
  PK_HD void fill_set(ptr_set<Q>& s, int first) const {
    const int count = n - first < PKC_SET_SLOTS ? n - first : PKC_SET_SLOTS;
    s.fill(count, [&](int k) { return static_cast<Q>(at(first + k < n ? first + k : n - 1)); });
  }
  template <class F>
  PK_HD void each(F f) const {
    for (int k = 0; k < n; ++k) f(at(k));
  }
  PK_HD int misalignment() const { return static_cast<int>((offset * sizeof(T)) & 15u); }
};

template <class C, typename T, bool Wide>
PK_HD peer_list<C, T, Wide> all_peers(const peers<T, Wide>& l, const ctx& c, size_t offset) {
  return peer_list<C, T, Wide>{&l, offset, c.rank, c.world};
}

// for (int d = 0; d < n; ++d) with d a compile-time constant after unrolling (n <= PKC_SET_SLOTS).
#define PKC_EACH(d, n) \
  _Pragma("unroll") for (int d = 0; d < PKC_SET_SLOTS; ++d) if (d < (n))

template <typename T>
PK_HD ptrs<T> one(T* x) {
  ptrs<T> d{};
  d.add(x);
  return d;
}

PK_HD bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- per-block shared-memory state (TMA) ---------------------------------------------------
struct block_smem {
  unsigned char* stage;  // kStages stages of kStageBytes, 128-byte aligned
  uint64_t* bar;         // one mbarrier per stage
  unsigned parity;       // bit s: parity of the next phase of bar[s]; identical in every thread
};

}  // namespace pkc

// ---- the element loops of every move (copies, sums; registers, TMA) ------------------------------
#include "moves.cuh"

namespace pkc {

#ifdef __CUDACC__

// ---- mechanism dispatch ---------------------------------------------------------------------------

template <class C, class G, typename T>
PK_DEV bool copy_to(const G& g, const ctx& c, const ptrs<T>& dst, const T* src, size_t n,
                    block_smem& sm) {
  if constexpr (C::kMech == mech::tma) {
    if (copy_is_shifted(dst, src)) return tma_copy_shifted<C>(dst, src, n, sm, g.flags.spin, c.rank);
    return tma_copy<C>(dst, src, n, sm, g.flags.spin, c.rank);
  } else {
    reg_copy(dst, src, n, pk::ldst::block_group());
    return true;
  }
}

// Block c.block's share of dst[d][0..n) = src[0..n) for every destination. TMA with every
// pointer 16-byte aligned deals the stage-sized chunks round-robin over the rank's blocks, so
// that at any moment the blocks stream neighbouring chunks; otherwise (and for registers) each
// block moves one contiguous piece. The share depends only on n, the alignment and the block,
// so a ring's block b forwards exactly what block b of the previous rank delivered.
template <class C, class G, typename T>
PK_DEV bool copy_range(const G& g, const ctx& c, const ptrs<T>& dst, const T* src, size_t n,
                       block_smem& sm) {
  if constexpr (C::kMech == mech::tma && PKC_INTERLEAVE) {
    bool aligned = aligned16(src);
    PKC_EACH(d, dst.n) aligned = aligned && aligned16(dst.p[d]);
    if (aligned)
      return tma_copy<C>(dst, src, n, sm, g.flags.spin, c.rank,
                         chunk_deal{static_cast<size_t>(c.block), static_cast<size_t>(c.bpr)});
  }
  const span s = block_piece<T>(n, c);
  ptrs<T> part{};
  part.fill(dst.n, [&](int d) { return dst.p[d] + s.lo; });
  return copy_to<C>(g, c, part, src + s.lo, s.size(), sm);
}

// dst[d] = R over src[q] (the plain sum by default; epilogue.cuh's policies for a reduce op
// and an epilogue), `base` the position of element 0 in the reduced buffer; S: the
// misalignments the caller can meet (moves.cuh may_shift).
template <class C, int QB = PKC_SET_SLOTS, may_shift S = may_shift::any, class G, typename T, class R = sum_policy>
PK_DEV bool reduce_to(const G& g, const ctx& c, const ptrs<T>& dst, const cptrs<T>& src, size_t n,
                      block_smem& sm, const R& r = R{}, size_t base = 0) {
  if constexpr (C::kMech == mech::tma) {
    return tma_reduce<C, S>(dst, src, n, sm, g.flags.spin, c.rank, r, base);
  } else {
    reg_reduce<QB, S>(dst, src, n, pk::ldst::block_group(), r, base);
    return true;
  }
}

// A move to (or from) a list of any length (the wide kernels' moves over every rank): a copy
// takes PKC_SET_SLOTS destinations at a time through copy_range, reading its source once a
// batch (ceil(D / 8) reads for D destinations); a sum runs in registers, PKC_SET_SLOTS sources
// at a time (reg_reduce_many). TMA sums stage at most PKC_TMA_MAX_SOURCES sources: the host
// refuses a wide TMA sum (check_args); a call that got here anyway stops with an error record.
// (The narrow kernels fill ptr_sets and call copy_range / reduce_to, as they were tuned.)
template <class C, class G, typename T, class D>
PK_DEV bool copy_list(const G& g, const ctx& c, const D& dst, const T* src, size_t n,
                      block_smem& sm) {
  for (int d0 = 0; d0 < dst.n; d0 += PKC_SET_SLOTS) {
    ptrs<T> b;
    dst.fill_set(b, d0);
    if (!copy_range<C>(g, c, b, src, n, sm)) return false;
  }
  return true;
}

template <class C, class G, class D, class S, class R = sum_policy>
PK_DEV bool reduce_list(const G& g, const ctx& c, const D& dst, const S& src, size_t n, block_smem&,
                        const R& r = R{}, size_t base = 0) {
  using T = typename G::value_type;
  if constexpr (C::kMech == mech::tma) {
    if (threadIdx.x == 0)
      pk::record_error(g.flags.spin.err, pk::PK_ERR_BAD_SHAPE, c.rank, -1, -1,
                       static_cast<unsigned>(src.n), PKC_TMA_MAX_SOURCES);
    return __syncthreads_and(0) != 0;
  } else {
    reg_reduce_many<T>(dst, src, n, pk::ldst::block_group(), r, base);
    return true;
  }
}

// ---- the moves over every rank that the algorithms share -----------------------------------------

// dst = the reduction (config C's policy) of every rank's input at element `at`, n elements,
// sources in the order rank c.rank visits them; `base`: the position of the first in the
// reduced buffer. Wide: the list of every rank; narrow: the set in the kernel parameter. The
// sources share one misalignment (every rank's buffer at one offset); S = may_shift::no: every
// move co-aligned (pieces of whole lines at offsets of whole lines).
template <class C, may_shift S = may_shift::common, class G, typename T>
PK_DEV bool reduce_from_ranks(const G& g, const ctx& c, T* dst, size_t at, size_t n, size_t base,
                              block_smem& sm) {
  if constexpr (C::kWide) {
    return reduce_list<C>(g, c, one(dst), all_peers<C>(g.in, c, at), n, sm, policy_of<C>::make(g), base);
  } else {
    cptrs<T> src{};
    fill_peers<C>(src, g.in, c, at);
    return reduce_to<C, PKC_SET_SLOTS, S>(g, c, one(dst), src, n, sm, policy_of<C>::make(g), base);
  }
}

// The same into every rank's output at `at` (a two-shot's sum and gather in one move; its
// pieces are whole lines, so every move is co-aligned).
template <class C, int QB = PKC_SET_SLOTS, class G>
PK_DEV bool reduce_ranks_to_ranks(const G& g, const ctx& c, size_t at, size_t n, size_t base, block_smem& sm) {
  using T = typename G::value_type;
  if constexpr (C::kWide) {
    return reduce_list<C>(g, c, all_peers<C>(g.out, c, at), all_peers<C>(g.in, c, at), n, sm,
                          policy_of<C>::make(g), base);
  } else {
    cptrs<T> src{};
    ptrs<T> dst{};
    fill_peers<C>(src, g.in, c, at);
    fill_peers<C>(dst, g.out, c, at);
    return reduce_to<C, QB, may_shift::no>(g, c, dst, src, n, sm, policy_of<C>::make(g), base);
  }
}

// Rank c.rank's `src` (n elements) into every rank's output at `at` (a fan-out: one read, a
// store per rank; wide, PKC_SET_SLOTS ranks a batch, each batch reading the source).
template <class C, class G, typename T>
PK_DEV bool copy_to_ranks(const G& g, const ctx& c, const T* src, size_t at, size_t n, block_smem& sm) {
  if constexpr (C::kWide) {
    return copy_list<C>(g, c, all_peers<C>(g.out, c, at), src, n, sm);
  } else {
    ptrs<T> dst{};
    fill_peers<C>(dst, g.out, c, at);
    return copy_range<C>(g, c, dst, src, n, sm);
  }
}

#endif  // __CUDACC__
}  // namespace pkc

// ---- synchronisation between phases (grid barrier, ring and pair flags): phase_sync.cuh -------
#include "phase_sync.cuh"

namespace pkc {
#ifdef __CUDACC__

// ---- the kernel body: init, phases, synchronisation ---------------------------------------------

template <class C, class A, class G>
PK_DEV void run(const G& g, unsigned char* smem_raw) {
  __shared__ uint64_t bars[C::kStages];
  const ctx c = make_ctx(g);
  block_smem sm{pk::tma::align_smem<128>(smem_raw), bars, 0u};
  if constexpr (C::kMech == mech::tma) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < C::kStages; ++s) pk::tma::mbar_init(&bars[s], 1);
      pk::tma::mbar_init_fence();
    }
    __syncthreads();
  }
  if constexpr (C::kWide) {
    if (!table_current(g, c)) return;
  }
  // A call runs phases [phase_begin, phase_end) (all of them unless the caller splits it). A
  // device-synchronised call split into consecutive ranges (made with the same seq: the
  // hierarchical schedules' NVLink parts around NCCL's scale-out step) waits on the same
  // counters as one call: barrier i of a whole call keeps its index, the entry barrier belongs
  // to the range that starts at 0, the exit barrier to the one that ends at the last phase.
  const int phases = A::phases(c.world);
  const bool edges = g.device_sync && g.rank >= 0;
  const unsigned nb = barriers_per_launch<A>(c.world, edges);
  const int begin = g.phase_begin;
  const int end = g.phase_end;
  if (edges && begin == 0 && !grid_barrier<C>(g, c, 0, nb)) return;
  for (int p = begin; p < end; ++p) {
    if (g.device_sync && p > 0) {
      if constexpr (A::kSync == sync_kind::barrier) {
        if (!grid_barrier<C>(g, c, (edges ? 1u : 0u) + static_cast<unsigned>(p - 1), nb)) return;
      } else if constexpr (A::kSync == sync_kind::ring) {
        if (!ring_wait<C>(g, c, A::signals_before(p, c.world), A::signals_per_launch(c.world))) return;
      } else if constexpr (A::kSync == sync_kind::pairs) {
        if (!pair_wait<C>(g, c, p, A::partner(c.rank, p, c.world))) return;
      }
    }
    if (!A::template phase<C>(g, c, p, sm)) return;
    if constexpr (A::kSync == sync_kind::ring) {
      if (g.device_sync && A::sends(p, c.world)) ring_signal(g, c);
    } else if constexpr (A::kSync == sync_kind::pairs) {
      if (g.device_sync && p + 1 < phases) pair_signal(g, c, p + 1, A::partner(c.rank, p + 1, c.world));
    }
  }
  if (edges && end == phases) grid_barrier<C>(g, c, nb - 1, nb);
}

// ---- copy engines: the local reduction kernel and the cross-rank barrier -------------------------

// dst = sum of sources on one rank, no waiting: the arithmetic of copy-engine reductions
// (512 threads, as the register mechanism's blocks).
constexpr int kCeReduceThreads = 512;
template <typename T>
__global__ void __launch_bounds__(kCeReduceThreads) ce_reduce_kernel(const __grid_constant__ ptrs<T> dst,
                                                        const __grid_constant__ cptrs<T> src, size_t n) {
  const pk::ldst::group g{static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                          static_cast<size_t>(gridDim.x) * blockDim.x};
  reg_reduce(dst, src, n, g);
}

// One block per rank: the barrier between copy-engine phases of ranks in separate processes.
template <bool Wide>
__global__ void ce_barrier_kernel(const __grid_constant__ flag_set<Wide> f, int rank, int world, unsigned epoch) {
  pk::dissemination_barrier(f, rank, world, 0, 1, 0, epoch);
}

#endif  // __CUDACC__

// ---- copy engines: host-side helpers for the algorithms' ce_phase ---------------------------------

// What a copy-engine phase may use on the host: the stream of the rank it runs for and the
// number of blocks of its reduction kernels.
struct ce_ctx {
  cudaStream_t stream;
  int blocks;
};

inline void ce_copy_elems(void* dst, const void* src, size_t bytes, const ce_ctx& x) {
  pk::ce_copy(dst, src, bytes, x.stream);
}

template <typename T>
inline void ce_reduce(const ptrs<T>& dst, const cptrs<T>& src, size_t n, const ce_ctx& x) {
  if (n == 0) return;
  const size_t want = ceil_div(n, kCeReduceThreads * kVec<T> * 4);
  const int blocks = static_cast<int>(want < static_cast<size_t>(x.blocks) ? (want ? want : 1) : x.blocks);
  ce_reduce_kernel<T><<<blocks, kCeReduceThreads, 0, x.stream>>>(dst, src, n);
  PK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace pkc

#include "traits.cuh"
