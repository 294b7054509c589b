// pk/pgl.cuh: the parallel global layout (PGL) and the flag layout used for signalling.
//
// Provides
//   * pk::pgl<T, MAX_RANKS>: one identically sized buffer per rank, addressed as
//     ptr[r] (rank r's copy as seen from this process: a local allocation, a CUDA-IPC mapping
//     of a peer's allocation, or, for virtual ranks, another allocation on the same GPU),
//     plus this process's rank, the world size, the element count per rank and an optional
//     multicast address (only used by pk/multimem.cuh). It is a plain aggregate passed to
//     kernels by value; nothing in it is owned.
//   * pk::flags<MAX_RANKS>: a PGL of 32-bit counters (num_flags per rank) together with the
//     spin context (error record + deadline) every wait on them uses. Counters only ever
//     grow: a producer adds, a consumer waits for "value >= expected" where `expected` is an
//     epoch count the consumer tracks itself. Nothing is reset between rounds, so there is no
//     reset that could race with a fast peer already signalling the next round.
//
// Virtual ranks: when several ranks share one GPU and one launch, the kernel receives one
// pgl and derives its rank per block (rank = blockIdx.x / blocks_per_rank); the device
// primitives therefore take the calling rank as an argument rather than reading pgl::rank
// (which a multi-process launcher fills in and a kernel may pass along). MAX_RANKS only
// bounds the pointer array; the world size is a run-time value.
//
// Declare PGL / flag kernel parameters `const __grid_constant__`: ptr[] is indexed with
// run-time ranks, and without __grid_constant__ the compiler copies the whole parameter into
// local memory to make it indexable.
#pragma once

#include "common.cuh"

namespace pk {

template <typename T, int MAX_RANKS = 8>
struct pgl {
  static_assert(MAX_RANKS >= 1, "a PGL needs at least one rank");
  static constexpr int max_ranks = MAX_RANKS;
  using value_type = T;

  T* ptr[MAX_RANKS];  // ptr[r]: rank r's buffer, addressable from this process
  T* mc;              // multicast address of the whole set, or nullptr (see multimem.cuh)
  size_t count;       // elements per rank (identical on every rank)
  int rank;           // the rank these accessors call "local"
  int world;          // number of valid entries in ptr

  PK_HD T* local() const { return ptr[rank]; }
  PK_HD T* peer(int r) const { return ptr[r]; }
  PK_HD T* operator[](int r) const { return ptr[r]; }
  // The rank `k` steps after this one (ring order); k may be negative.
  PK_HD int ring(int k) const { return ((rank + k) % world + world) % world; }
  PK_HD size_t bytes() const { return count * sizeof(T); }
  PK_HD pgl with_rank(int r) const {
    pgl c = *this;
    c.rank = r;
    return c;
  }
};

// Host-side factory: `ptrs[r]` for r < world must already be addressable from this
// process (cudaMalloc'd, or opened with cudaIpcOpenMemHandle).
template <typename T, int MAX_RANKS = 8>
inline pgl<T, MAX_RANKS> make_pgl(T* const* ptrs, int world, int rank, size_t count,
                                   T* mc = nullptr) {
  pgl<T, MAX_RANKS> g{};
  for (int r = 0; r < MAX_RANKS; ++r) g.ptr[r] = (r < world) ? ptrs[r] : nullptr;
  g.mc = mc;
  g.count = count;
  g.rank = rank;
  g.world = world;
  return g;
}

// Counters for signal / wait / barrier. Rank r's counters are ctr.ptr[r][0 .. num_flags).
// A barrier over `world` ranks occupies `world` consecutive counters starting at a base
// index: counter base + s on rank r counts the arrivals of rank s at r.
template <int MAX_RANKS = 8>
struct flags {
  pgl<unsigned int, MAX_RANKS> ctr;
  int num_flags;
  spin_ctx spin;

  PK_HD int rank() const { return ctr.rank; }
  PK_HD int world() const { return ctr.world; }
  PK_HD unsigned int* at(int r, int idx) const { return ctr.ptr[r] + idx; }
  PK_HD flags with_rank(int r) const {
    flags c = *this;
    c.ctr.rank = r;
    return c;
  }
};

template <int MAX_RANKS = 8>
inline flags<MAX_RANKS> make_flags(unsigned int* const* ctrs, int world, int rank, int num_flags,
                                   error_record* err,
                                   long long timeout_cycles = PK_DEFAULT_TIMEOUT_CYCLES) {
  flags<MAX_RANKS> f{};
  f.ctr = make_pgl<unsigned int, MAX_RANKS>(ctrs, world, rank, static_cast<size_t>(num_flags));
  f.num_flags = num_flags;
  f.spin = spin_ctx::make(err, timeout_cycles);
  return f;
}

}  // namespace pk
