// fused/comm.cuh: the communication blocks of the inter-SM fused kernels.
//
// Provides (device side, namespace pkf; every routine is run by all threads of one block and
// returns in all of them)
//   * pull_reduce<kKind, kTma>: the communication blocks of owner o wait for the tiles that
//     carry o's rows (a counter per tile on o, fed by every rank's store_signal epilogue), and
//     sum the world partial tiles (fp32, sources in rank order) into o's output rows
//     (gemm-rs), or into the same rows of every rank's output (gemm-ar: the two shots of a
//     two-shot all-reduce in one pass). Units are (tile, owner) intersections, dealt
//     round-robin to the owner's blocks in the GEMM's own column-major order inside the
//     owner's row band, and taken in ARRIVAL order: thread 0 scans a window of the next 64
//     pending units and takes the first whose counter is complete. Two forms of a unit's sum:
//     registers (16-byte ld.global.cg loads, each thread keeping 8 to 16 in flight: 4 vectors
//     x 2 sources, 2 x 4, or 2 x 8; reduce_rect) and TMA (kTma, the schedule's mechanism
//     "tma": thread 0 loads each source's 32-row box of a chunk into shared-memory stages with
//     tensor copies completing on mbarriers, every thread sums its vectors of the stage into
//     fp32 registers, and warp 0 stores the chunk's sums from one of two output slots with
//     tensor stores; reduce_rect_tma);
//   * gather_rows<kTma>: the communication blocks of rank r copy every rank's shard of A into
//     r's gathered M x K buffer, one (shard, BM-row band) piece at a time, the rank's own shard
//     first when the order is staggered, and add 1 to the band's counter on r after each piece
//     (the ag-gemm prologue waits for it). Pieces move through pkc::copy's two mechanisms: TMA
//     (bulk loads into shared-memory stages, bulk stores out) or registers;
//   * pull_reduce_multimem (only with PK_ENABLE_MULTIMEM=1, compile-only here): the in-network
//     form of the all-reduce: the owner loads each vector of its rows through the partials'
//     multicast address with multimem.ld_reduce (the switch sums every rank's copy) and stores
//     the sum through the outputs' multicast address.
//
// Deadlines: every wait has spin_ctx::timeout_cycles; a wait that passes it records
// {rank, flag, expected, seen} in the error record and the block returns (the rest of its
// units stay undone; the host reports the record). Ordering: the counters are released by the
// producers after their writes completed (store_signal: complete_writes; gather: the TMA path
// ends with complete_writes in the issuing thread, then __syncthreads before the signal);
// thread 0's ld.acquire.sys followed by __syncthreads orders every thread's loads after it.
#pragma once

#include "collectives/collective.cuh"
#include "fused/fused.cuh"

namespace pkf {

// ---- pull-reduce (gemm-rs, gemm-ar) ------------------------------------------------------------

struct reduce_params {
  const bf16* const* partial;          // device table: every rank's M x N partial buffer
  bf16* const* out;                    // device table: gemm-rs rows(o) x N; gemm-ar M x N
  // the same up to 8 ranks, in the kernel parameter (the narrow instance's sums load their
  // pointers from there, as they were tuned: from the table the gemm-ar sum spilled 16 B)
  const bf16* partial_inl[8];
  bf16* out_inl[8];
  const CUtensorMap* maps;             // TMA form: every rank's partial, then every rank's
                                       // output (device table; boxes of 32 x bn, no swizzle)
  bf16* partial_mc;                    // in-network only: multicast addresses
  bf16* out_mc;
  pkc::flag_set<true> flags;           // counter t of rank o: see store_signal
  partition rows;
  int N, world, bm, bn, num_n;
  unsigned int seq;
};

// The units of owner `rank`: tiles (tm, tn) whose rows meet [lo, hi), column-major.
struct owner_units {
  int lo, hi, tm0, band_tiles, count;
  PK_DEV owner_units(const reduce_params& p, int rank) {
    lo = p.rows.begin(rank);
    hi = p.rows.end(rank);
    tm0 = lo / p.bm;
    band_tiles = (hi - 1) / p.bm - tm0 + 1;
    count = band_tiles * p.num_n;
  }
  PK_DEV int tile_m(int u) const { return tm0 + u % band_tiles; }
  PK_DEV int tile_n(int u) const { return u / band_tiles; }
};

// Thread 0: the next unit (index among this block's units) whose tile is complete, -1 when all
// are done, -2 after a timeout or another thread's failure. `base` / `done` are the block's
// progress: units below base are done; bit j of done marks unit base + j.
PK_DEV int next_ready(const reduce_params& p, const owner_units& ou, int rank, int block,
                      int blocks, int mine, int& base, unsigned long long& done) {
  const unsigned int need = 2u * static_cast<unsigned int>(p.world) * (p.seq + 1u);
  const long long start = clock64();
  for (unsigned int iter = 0;; ++iter) {
    if (base >= mine) return -1;
    const int window = min(64, mine - base);
    for (int j = 0; j < window; ++j) {
      if ((done >> j) & 1ull) continue;
      const int u = block + blocks * (base + j);
      const int t = ou.tile_m(u) * p.num_n + ou.tile_n(u);
      if (static_cast<int>(pk::ld_acquire_sys(p.flags.at(rank, t)) - need) >= 0) {
        const int picked = base + j;
        done |= 1ull << j;
        while (base < mine && (done & 1ull)) {
          done >>= 1;
          ++base;
        }
        return picked;
      }
    }
    if (clock64() - start > p.flags.spin.timeout_cycles) {
      const int u = block + blocks * base;
      const int t = ou.tile_m(u) * p.num_n + ou.tile_n(u);
      pk::record_error(p.flags.spin.err, pk::PK_ERR_FLAG_TIMEOUT, rank, -1, t, need,
                       pk::ld_acquire_sys(p.flags.at(rank, t)));
      return -2;
    }
    if ((iter & 15u) == 15u && pk::error_raised(p.flags.spin.err)) return -2;
    __nanosleep(100);
  }
}

// Rows [r0, r1) x columns [c0, c1) of the sum of every rank's partial, into the destinations.
// Each thread keeps U vectors of each of the (at most W) sources in flight. More than 8 loads
// of a 2- or 4-rank reduction (U = 8 x W = 2, U = 4 x W = 4, U = 3 x W = 4) spill registers in
// this kernel (ptxas, sm_90a, CUDA 13.0), so: U x W = 4 x 2, 2 x 4, 2 x 8.
template <bool kToAll, int U, int W>
PK_DEV void reduce_rect_body(const reduce_params& p, int rank, int lo, int r0, int r1, int c0,
                             int c1) {
  const int vpr = (c1 - c0) / 8;
  const int nvec = (r1 - r0) * vpr;

  for (int v0 = threadIdx.x; v0 < nvec; v0 += U * blockDim.x) {
    size_t off[U];
    bool live[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = v0 + u * blockDim.x;
      live[u] = v < nvec;
      const int row = r0 + (live[u] ? v / vpr : 0);
      const int col = c0 + (live[u] ? v % vpr : 0) * 8;
      off[u] = static_cast<size_t>(row) * p.N + col;
    }
    uint4 raw[U][W];
#pragma unroll
    for (int s = 0; s < W; ++s)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (s < p.world && live[u])
          raw[u][s] = __ldcg(reinterpret_cast<const uint4*>(p.partial_inl[s] + off[u]));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!live[u]) continue;
      float acc[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = 0.f;
#pragma unroll
      for (int s = 0; s < W; ++s)
        if (s < p.world) pkc::add_vec(acc, raw[u][s], bf16{});
      const uint4 sum = pkc::pack_vec(acc, bf16{});
      if constexpr (kToAll) {
        for (int k = 1; k <= p.world; ++k)
          *reinterpret_cast<uint4*>(p.out_inl[(rank + k) % p.world] + off[u]) = sum;
      } else {
        const size_t local = off[u] - static_cast<size_t>(lo) * p.N;
        *reinterpret_cast<uint4*>(p.out_inl[rank] + local) = sum;
      }
    }
  }
}

// More than 8 ranks (the kernel's wide instance): the sources 8 at a time into one fp32
// accumulator per vector (a vector of each source of a batch in flight, as the 8-rank body),
// then the stores. Beside the GEMM in one kernel it takes registers the narrow bodies do not
// have to spare: the GEMM kernels with it spilled 200-260 B (ptxas -v, sm_90a, CUDA 13.0),
// hence an instance of its own.
template <bool kToAll>
PK_DEV void reduce_rect_wide(const reduce_params& p, int rank, int lo, int r0, int r1, int c0,
                             int c1) {
  constexpr int W = 8;
  const int vpr = (c1 - c0) / 8;
  const int nvec = (r1 - r0) * vpr;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    const size_t off = static_cast<size_t>(r0 + v / vpr) * p.N + c0 + (v % vpr) * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = 0.f;
    for (int s0 = 0; s0 < p.world; s0 += W) {
      uint4 raw[W];
#pragma unroll
      for (int s = 0; s < W; ++s)
        if (s0 + s < p.world) raw[s] = __ldcg(reinterpret_cast<const uint4*>(p.partial[s0 + s] + off));
#pragma unroll
      for (int s = 0; s < W; ++s)
        if (s0 + s < p.world) pkc::add_vec(acc, raw[s], bf16{});
    }
    const uint4 sum = pkc::pack_vec(acc, bf16{});
    if constexpr (kToAll) {
      for (int k = 1, o = rank + 1; k <= p.world; ++k, ++o) {
        if (o == p.world) o = 0;
        *reinterpret_cast<uint4*>(p.out[o] + off) = sum;
      }
    } else {
      *reinterpret_cast<uint4*>(p.out[rank] + off - static_cast<size_t>(lo) * p.N) = sum;
    }
  }
}

template <bool kToAll, bool kWide>
PK_DEV void reduce_rect(const reduce_params& p, int rank, int lo, int r0, int r1, int c0, int c1) {
  if constexpr (kWide) {
    reduce_rect_wide<kToAll>(p, rank, lo, r0, r1, c0, c1);
  } else {
    if (p.world <= 2) reduce_rect_body<kToAll, 4, 2>(p, rank, lo, r0, r1, c0, c1);
    else if (p.world <= 4) reduce_rect_body<kToAll, 2, 4>(p, rank, lo, r0, r1, c0, c1);
    else reduce_rect_body<kToAll, 2, 8>(p, rank, lo, r0, r1, c0, c1);
  }
}

#if PK_ENABLE_MULTIMEM
// In-network form: the switch sums every rank's copy, the store reaches every rank.
PK_DEV void reduce_rect_multimem(const reduce_params& p, int r0, int r1, int c0, int c1) {
  const int vpr = (c1 - c0) / 8;
  const int nvec = (r1 - r0) * vpr;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    const size_t off = static_cast<size_t>(r0 + v / vpr) * p.N + c0 + (v % vpr) * 8;
    const auto* src = reinterpret_cast<const pk::multimem::bf16x8*>(p.partial_mc + off);
    auto* dst = reinterpret_cast<pk::multimem::bf16x8*>(p.out_mc + off);
    pk::multimem::st(dst, pk::multimem::ld_reduce_add(src));
  }
}
#endif

// ---- the TMA form of a unit's sum (docs/decisions/D54.md) -------------------------------------

// Shared-memory staging of the TMA pull (the dynamic shared memory of a communication block):
// kStages stages, each holding one box (kRows rows x bn columns, bn <= kMaxCols) of ONE
// source, then two output slots of a box each (a chunk's sums while their bulk stores read
// them). A thread sums at most kVecs 16-byte vectors of a box: 1024 vectors of a 32 x 256 box
// over the fused blocks' 384 threads.
struct pull_stages {
  static constexpr int kRows = 32;
  static constexpr int kMaxCols = 256;
  static constexpr int kStages = 4;
  static constexpr unsigned kStageBytes = kRows * kMaxCols * sizeof(bf16);   // 16 KiB
  static constexpr int kVecs = 3;
  static constexpr int kThreads = 384;           // pk::gemm::config::THREADS
  static constexpr unsigned kSmemBytes = (kStages + 2) * kStageBytes + 128;  // + alignment
  static_assert(kVecs * kThreads >= kRows * kMaxCols / 8, "a box's vectors per thread");
};

// A block's TMA state across its units: identical in every thread.
struct pull_tma_state {
  unsigned char* smem;    // 128-byte aligned: the stages, then the output slots
  uint64_t* bar;          // one mbarrier per stage (one arrival: thread 0's)
  unsigned parity;        // bit s: parity of bar[s]'s next phase
  unsigned chunks;        // chunks stored so far: chunk c's sums go to output slot c % 2
  PK_DEV unsigned char* stage(int s) const { return smem + s * pull_stages::kStageBytes; }
  PK_DEV unsigned char* slot(unsigned c) const {
    return smem + (pull_stages::kStages + (c & 1u)) * pull_stages::kStageBytes;
  }
};

// Rows [r0, r1) x columns [c0, c1) of the sum of every rank's partial through TMA, into the
// destinations (as reduce_rect); the owner's rows are [lo, hi). Chunk j is the box of rows
// [32 j, 32 j + 32) from column c0 (p.maps: every rank's partial, then every rank's output, boxes
// of kRows x bn); item i = chunk j0 + i / world of source i % world (rank order, so the fp32
// sum is the register form's bit for bit) goes to stage i % kStages: thread 0 announces the
// box's bytes on the stage's mbarrier and loads it with one tensor copy. Every thread waits
// for the stage, adds its vectors of the unit's rows to its fp32 accumulators, and the block
// syncs before thread 0 refills the stage kStages items on. After a chunk's last source the
// threads write the sums into an output slot and warp 0 stores it, a destination a lane, with
// one tensor store (the owner's output map of gemm-rs holds its rows only, so the box's rows
// past the unit fall outside the map); a box that starts before the owner's first row, or
// (gemm-ar) ends in the next owner's rows, is stored row by row with bulk copies instead (at
// an owner boundary off a 32-row line). Every lane of warp 0 commits one bulk group a chunk,
// so wait_group_read<1> frees the slot two chunks on. Returns false (in every thread) after a
// timeout.
template <bool kToAll, bool kWide>
PK_DEV bool reduce_rect_tma(const reduce_params& p, int rank, int lo, int hi, int r0, int r1,
                            int c0, int c1, pull_tma_state& st) {
  using S = pull_stages;
  const int world = p.world, vpr = (c1 - c0) / 8, lane = threadIdx.x & 31;
  const unsigned pitch = p.bn * sizeof(bf16), box_bytes = S::kRows * pitch;
  const int j0 = r0 / S::kRows;
  const int items = ((r1 - 1) / S::kRows - j0 + 1) * world;
  const CUtensorMap* partial = p.maps;
  const CUtensorMap* out = p.maps + world;
  auto issue = [&](int i) {         // thread 0
    const int si = i % S::kStages;
    pk::tma::mbar_arrive_expect_tx(&st.bar[si], box_bytes);
    pk::tma::load_tile_async(st.stage(si), &partial[i % world], c0, (j0 + i / world) * S::kRows,
                             &st.bar[si]);
  };
  auto store = [&](int row, int a, int b, const unsigned char* slot) {   // warp 0
    const int dests = kToAll ? world : 1;
    // No box store at a negative row (gemm-rs stores there trapped on the H200: illegal
    // instruction), and none of a box that reaches another owner's rows inside the map.
    if (lo <= row && (!kToAll || row + S::kRows <= hi || hi == p.rows.end(world - 1))) {
      for (int k = 1 + lane; k <= dests; k += 32) {
        const int o = kToAll ? (rank + k) % world : rank;
        pk::tma::store_tile_async(&out[o], c0, kToAll ? row : row - lo, slot);
      }
    } else {                          // rows [a, b) only, a row a lane
      for (int k = 1; k <= dests; ++k) {
        const int o = kToAll ? (rank + k) % world : rank;
        bf16* base = (kWide ? p.out[o] : p.out_inl[o]) + c0 - (kToAll ? 0 : static_cast<size_t>(lo) * p.N);
        for (int r = a + lane; r < b; r += 32)
          pk::tma::store_async(base + static_cast<size_t>(r) * p.N, slot + (r - row) * pitch,
                               (c1 - c0) * sizeof(bf16));
      }
    }
    pk::tma::commit_group();
  };
  if (threadIdx.x == 0) {
    pk::tma::acquire_for_async_reads();   // after thread 0's acquire of the unit's counter
    for (int i = 0; i < items && i < S::kStages; ++i) issue(i);
  }
  float acc[S::kVecs][8];
  int ok = 1;
  for (int i = 0; i < items; ++i) {
    const int s = i % world, si = i % S::kStages;
    const int row = (j0 + i / world) * S::kRows;
    const int a = max(r0, row), b = min(r1, row + S::kRows), nvec = (b - a) * vpr;
    const unsigned first = (a - row) * pitch;   // the unit's first row in the box
    if (s == 0)
#pragma unroll
      for (int u = 0; u < S::kVecs; ++u)
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[u][k] = 0.f;
    if (!pk::tma::mbar_wait(&st.bar[si], (st.parity >> si) & 1u, p.flags.spin, rank)) ok = 0;
    st.parity ^= 1u << si;
    const uint32_t in = pk::tma::smem_u32(st.stage(si)) + first;
#pragma unroll
    for (int u = 0; u < S::kVecs; ++u) {
      const int v = threadIdx.x + u * blockDim.x;
      if (v < nvec) pkc::add_vec(acc[u], pk::tma::lds128(in + (v / vpr) * pitch + (v % vpr) * 16u), bf16{});
    }
    const bool last = s == world - 1;
    if (last && threadIdx.x < 32) pk::tma::wait_group_read<1>();   // the slot's stores 2 chunks ago
    if (!__syncthreads_and(ok)) return false;                        // everyone is done with the stage
    if (threadIdx.x == 0 && i + S::kStages < items) issue(i + S::kStages);
    if (last) {
      const unsigned char* slot = st.slot(st.chunks++);
      const uint32_t sums = pk::tma::smem_u32(slot) + first;
#pragma unroll
      for (int u = 0; u < S::kVecs; ++u) {
        const int v = threadIdx.x + u * blockDim.x;
        if (v < nvec) pk::tma::sts128(sums + (v / vpr) * pitch + (v % vpr) * 16u, pkc::pack_vec(acc[u], bf16{}));
      }
      pk::tma::fence_shared_to_async();
      __syncthreads();
      if (threadIdx.x < 32) store(row, a, b, slot);
    }
  }
  return true;
}

// kind: 0 = reduce into the owner's rows (gemm-rs), 1 = into every rank (gemm-ar),
// 2 = in-network (gemm-ar through multicast addresses). kTma: the TMA form of the sums
// (kinds 0 and 1; the block's dynamic shared memory holds pull_stages::kSmemBytes).
template <int kKind, bool kTma = false>
struct pull_reduce {
  using params = reduce_params;
  static_assert(!kTma || kKind != 2, "the in-network form sums in the switch");
  template <bool kWide, class G>
  __device__ static void run(const G& g, int rank, int block, unsigned char* smem_raw) {
    const reduce_params& p = g.comm;
    const owner_units ou(p, rank);
    const int blocks = g.comm_blocks;
    const int mine = block < ou.count ? (ou.count - block + blocks - 1) / blocks : 0;
    __shared__ int picked;
    __shared__ uint64_t bars[pull_stages::kStages];
    pull_tma_state st{pk::tma::align_smem<128>(smem_raw), bars, 0u, 0u};
    if constexpr (kTma) {
      if (threadIdx.x == 0) {
        for (int s = 0; s < pull_stages::kStages; ++s) pk::tma::mbar_init(&bars[s], 1);
        pk::tma::mbar_init_fence();
      }
      // the tensor maps, written by the host into the device table: thread 0 loads through
      // the partials' maps, warp 0 stores through the outputs'
      if (threadIdx.x < 32)
        for (int m = 0; m < 2 * p.world; ++m) acquire_map(&p.maps[m]);
      __syncthreads();
    }
    int base = 0;
    unsigned long long done = 0;
    for (;;) {
      if (threadIdx.x == 0) picked = next_ready(p, ou, rank, block, blocks, mine, base, done);
      __syncthreads();
      const int i = picked;
      if (i < 0) break;  // every thread read `picked` before anyone can write it again
      const int u = block + blocks * i;
      const int tm = ou.tile_m(u), tn = ou.tile_n(u);
      const int r0 = max(tm * p.bm, ou.lo), r1 = min((tm + 1) * p.bm, ou.hi);
      const int c0 = tn * p.bn, c1 = min(p.N, c0 + p.bn);
      if constexpr (kKind == 2) {
#if PK_ENABLE_MULTIMEM
        reduce_rect_multimem(p, r0, r1, c0, c1);
#endif
      } else if constexpr (kTma) {
        if (!reduce_rect_tma<kKind == 1, kWide>(p, rank, ou.lo, ou.hi, r0, r1, c0, c1, st)) break;
      } else {
        reduce_rect<kKind == 1, kWide>(p, rank, ou.lo, r0, r1, c0, c1);
      }
      __syncthreads();
    }
    // The bulk stores must have read the output slots (and written) before the block exits.
    if (kTma && threadIdx.x < 32) pk::tma::complete_writes();
  }
};

// ---- gather (ag-gemm) ------------------------------------------------------------------------------

struct gather_params {
  const bf16* const* shard;          // device table: rank s's rows [lo(s), lo(s + 1)) of A
  bf16* const* gathered;             // device table: every rank's M x K copy of A
  pkc::flag_set<true> flags;         // counter b of rank r: pieces of band b copied to r
  partition rows;
  int K, world, bm;
  int staggered;                     // 1: own shard first (and the GEMM starts there too)
};

// Shared-memory staging of the TMA copies: pkc::tma_copy's stage layout.
struct copy_stages {
  static constexpr int kStages = 4;
  static constexpr unsigned kStageBytes = 32 * 1024;
};

template <bool kTma>
struct gather_rows {
  using params = gather_params;
  template <bool, class G>
  __device__ static void run(const G& g, int rank, int block, unsigned char* smem_raw) {
    const gather_params& p = g.comm;
    const int blocks = g.comm_blocks;
    __shared__ uint64_t bars[copy_stages::kStages];
    pkc::block_smem sm{pk::tma::align_smem<128>(smem_raw), bars, 0u};
    if constexpr (kTma) {
      if (threadIdx.x == 0) {
        for (int s = 0; s < copy_stages::kStages; ++s) pk::tma::mbar_init(&bars[s], 1);
        pk::tma::mbar_init_fence();
      }
      __syncthreads();
    }
    int u = 0;  // running index of (shard, band) pieces over the shards in visiting order
    for (int k = 0; k < p.world; ++k) {
      const int s = p.staggered ? (rank + k) % p.world : k;
      const int lo = p.rows.begin(s), hi = p.rows.end(s);
      for (int b = lo / p.bm; b <= (hi - 1) / p.bm; ++b, ++u) {
        if (u % blocks != block) continue;
        const int r0 = max(lo, b * p.bm), r1 = min(hi, (b + 1) * p.bm);
        const bf16* src = p.shard[s] + static_cast<size_t>(r0 - lo) * p.K;
        bf16* dst = p.gathered[rank] + static_cast<size_t>(r0) * p.K;
        const size_t n = static_cast<size_t>(r1 - r0) * p.K;
        if constexpr (kTma) {
          if (!pkc::tma_copy<copy_stages>(pkc::one(dst), src, n, sm, p.flags.spin, rank)) return;
        } else {
          pkc::reg_copy(pkc::one(dst), src, n, pk::ldst::block_group());
          __syncthreads();
        }
        if (threadIdx.x == 0) pk::red_release_sys(p.flags.at(rank, b), 1u);
      }
    }
  }
};

}  // namespace pkf
