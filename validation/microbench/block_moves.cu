// block_moves.cu -- throughput of the generated collectives' own data-movement routines by
// number of blocks: a copy that fans one source out to D destinations and a reduction that
// sums S sources into D destinations, through TMA or registers.
//
// What: the device functions every generated collective calls for its data movement
// (kernels/collectives/collective.cuh: pkc::tma_copy, tma_reduce, reg_copy, reg_reduce), with
// the generated kernels' launch constants (TMA: 256 threads, four 32 KiB stages; registers: 512 threads), run on B
// blocks over plain buffers of one GPU. Block b moves piece b of the payload (pkc::block_piece,
// as the collectives cut a rank's share among their blocks), except TMA copies, which deal the
// 32 KiB stages round-robin over the blocks (pkc::copy_range, what the collectives' TMA copies
// do with aligned buffers). These are primitives: one move of one
// shape, no synchronisation between blocks; the collectives built from them are judged
// against the model, never fitted to it.
//
// Sweep: mechanism {tma, register} x shape {copy 1->1, 1->2, 1->4, 1->8; reduce 2->1, 4->1,
// 8->1, 2->2, 4->4, 8->8} x blocks {1, 2, 4, 8, 16, 33, 66, 132, 264} at a payload of
// 64 MiB per destination (bf16; traffic (S + D) x payload, 192 MiB .. 1 GiB, far above the
// 60 MiB L2), and blocks {4, 16, 132} at 256 KiB (latency-bound). Shared reads: R in {2, 4,
// 8} groups of 132 / R or 64 / R blocks each move the same S in {1, R} sources into their own
// destination ("readers" = R, "blocks" = blocks per group), as the virtual ranks of a
// one-shot all-reduce (S = R) or a broadcast (S = 1) read the same buffers; also 4 and 64 KiB
// alone behind a write on the suite's blocks per group (docs/decisions/D19.md).
// Own buffers ("block_moves_own" records, measured only): G in {2, 4, 8} groups of 132 / G or
// 64 / G blocks, group g moving its own S in {1, 2, 4} sources into its own destination, as
// virtual ranks do (G x S <= 8).
// Crossed buffers ("block_moves_cross" records, measured only; the extra points on 64 blocks:
// parts of 512 B and 8 KiB, behind a kernel's write, registers 4 sources a round, "load_batch"
// = 4, as the generated two-shot): G in {2, 4, 8} groups of
// 132 / G or 64 / G blocks, group g summing part g of all G sources into part g of all G
// destinations, as the G virtual ranks of a two-shot all-reduce do ("bytes" = one part; G
// parts of 4 KiB and 64 KiB each launch timed alone behind a 256 MiB write, 64 MiB back to
// back).
// Crossed reads into one destination ("block_moves_cross" with "dests" = 1;
// docs/decisions/D6.md): G
// groups, group g summing part g of all G sources into its own destination (a direct
// reduce-scatter's ranks), parts of 4 KiB - 4 MiB alone behind a 256 MiB write.
// Keys: "bytes" = payload (bytes written to one destination), "traffic_bytes" = (S + D) x
// payload, "gbps" = payload GB/s.
// Check (before timing each shape, at 132 blocks): random bf16 sources; every destination
// is compared element by element with a reference computed on the device in the same order
// (fp32 sum of the sources in source order, rounded once to bf16), so a copy must be exact
// and a reduction bit-identical.
// Behind a write ("timing": "behind_write"): payloads of 4 KiB, 64 KiB, 256 KiB, 1 MiB and
// 4 MiB (the last two because the suite's TMA and register sums part at 1-16 MiB:
// docs/decisions/D25.md) of
// every shape on 4, 16, 33, 66, 132 and 264 blocks, each launch alone behind a 256 MiB write, events around it (as
// `pksim validate` times a collective; the other points are back-to-back launches); at 4 KiB
// also behind a kernel's write instead of cudaMemsetAsync ("flush": "kernel") and launched
// cooperatively ("launch": "cooperative"), as the validated collectives are.
// --stagger B starts buffer k of the sources at k x B and of the destinations at (8 + k) x B
// bytes into its allocation (default 0: every buffer at the start of its own allocation).
// --payload-mib N: N MiB per destination instead of 64.
// --shift BYTES (0..14, even): every source starts BYTES past its 16-byte boundary,
// the destinations on it, as a shard at an odd offset moved to the start of another buffer
// (the collectives' shifted moves: registers read words, TMA realigns in the stage; moves.cuh,
// docs/decisions/D58.md); only the first sweep (back to back, records carry "shift"; 0 for
// the aligned moves of the same sweep).
// --cross-parts KIB,...: only the crossed sums ("crossed_sums" records, D83): G in {2, 4, 8}
// groups of 132 / G, 64 / G, 32 / G blocks, TMA and registers, into one destination (as
// block_moves_cross "dests" = 1) and into every one (G), each part alone behind the write.
// Usage: block_moves [--quick] [--stagger B] [--payload-mib N] [--shift B] [--cross-parts KIB,...]
#include "moves_check.cuh"
#include "pk/host.cuh"


// Whether each group of blocks writes only its own destination: groups that share their
// sources or read their own, or crossed reads into one destination (own == 4); otherwise
// every block writes all of them (crossed sums, one group). The kernel cuts its pointers by
// it; the host picks the kernel compiled knowing one destination by it.
PK_HD bool group_dest(int groups, int own) {
  const bool crossed = own == 2 || own == 3 || own == 4;
  return groups > 1 && (!crossed || own == 4);
}

// One kernel per (mechanism, copy or sum), as a generated collective compiles only the
// routines it calls, declared one block an SM as the generated kernels are (without it ptxas
// gave the TMA copy 32 B of stack and 100 B of spills, CUDA 13.0, before docs/decisions/D17.md). `one`:
// the move has one destination and the compiler knows it, as in the generated phases that
// pass pkc::one(...) (the one-shot, the reduce-scatter, the broadcast, the ring steps); the
// destinations' count is a run-time value otherwise, as in those that fill a set per peer
// (docs/decisions/D13.md).
template <class C, bool reduce, int QB = PKC_SET_SLOTS, bool one = false>
__global__ void __launch_bounds__(C::kThreads, 1) move_kernel(const __grid_constant__ pkc::ptrs<bf16> dst,
                                                   const __grid_constant__ pkc::cptrs<bf16> src,
                                                   size_t n, int groups, int own,
                                                   pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  // `groups` > 1: the blocks form that many groups, each doing the whole move from the same
  // sources into its own destination dst.p[group] (reads shared by the groups).
  const int per = static_cast<int>(gridDim.x) / groups;
  const int b = static_cast<int>(blockIdx.x) % per;
  const int grp = static_cast<int>(blockIdx.x) / per;
  // `own`: each group reads its own S = src.n / groups sources instead (as virtual ranks
  // reading their own buffers).
  const bool split = own == 1 && groups > 1;
  const int first = split ? grp * (src.n / groups) : 0;
  // `own` == 2 (crossed, as a two-shot all-reduce's ranks): group g sums part g (n elements at
  // g x n) of every source into part g of every destination.
  // own == 4: crossed reads into the group's own destination, from its start (a direct
  // reduce-scatter's ranks: rank g sums part g of every input into its output).
  const bool crossed = (own == 2 || own == 3 || own == 4) && groups > 1;
  const bool one_dest = own == 4 && groups > 1;
  const bool own_dest = group_dest(groups, own);
  const size_t at = crossed ? static_cast<size_t>(grp) * n : 0;
  const pkc::span s = pkc::block_piece(n, per, b, sizeof(bf16));  // as the collectives cut
  // Every pointer array is filled at compile-time indices, so it stays in registers: a
  // runtime index would put it on the stack, and a stack's first touch by every thread slows
  // a grid's start (2-5 us at one block per SM behind a 256 MiB write) in a way the
  // generated collectives, which keep their pointers in registers, do not show.
  pkc::ptrs<bf16> mine{}, d{};
  pkc::cptrs<bf16> q{};
#pragma unroll
  for (int k = 0; k < PKC_SET_SLOTS; ++k) {
    mine.p[k] = own_dest ? dst.p[grp] : dst.p[k];
    d.p[k] = mine.p[k] + (one_dest ? 0 : at) + s.lo;
    // own == 5: shared reads in the staggered order of the generated one-shot (group g
    // reads source g first, then g + 1, ...), by a subtraction as pkc::peer (a `%` costs
    // 0.3 us at 4 KiB: docs/decisions/D17.md); sums only: copies read one source
    int j = first + k < PKC_SET_SLOTS ? first + k : PKC_SET_SLOTS - 1;
    if constexpr (reduce) {
      if (own == 5 && groups > 1 && k < src.n) j = k < src.n - grp ? grp + k : grp + k - src.n;
    }
    q.p[k] = src.p[j] + at + s.lo;
  }
  mine.n = d.n = own_dest ? 1 : dst.n;
  q.n = split ? src.n / groups : src.n;
  if constexpr (one) {
    mine = pkc::one(mine.p[0]);
    d = pkc::one(d.p[0]);
  }
  if constexpr (C::kMech == pkc::mech::tma) {
    pkc::block_smem sm = stages<C>(smem_raw, bars);
    const pk::spin_ctx spin = pk::spin_ctx::make(err, 1ll << 31);
    if constexpr (reduce) pkc::tma_reduce<C>(d, q, s.size(), sm, spin, 0);
    else if (pkc::copy_is_shifted(d, q.p[0]))  // as pkc::copy_to: staged and realigned
      pkc::tma_copy_shifted<C>(d, q.p[0], s.size(), sm, spin, 0);
    else if (PKC_INTERLEAVE)  // as pkc::copy_range: 32 KiB chunks dealt round-robin over the blocks
      pkc::tma_copy<C>(mine, src.p[first], n, sm, spin, 0,
                       pkc::chunk_deal{static_cast<size_t>(b), static_cast<size_t>(per)});
    else
      pkc::tma_copy<C>(d, q.p[0], s.size(), sm, spin, 0);
  } else {
    if constexpr (reduce) pkc::reg_reduce<QB>(d, q, s.size(), pk::ldst::block_group());
    else pkc::reg_copy(d, q.p[0], s.size(), pk::ldst::block_group());
  }
}


struct Shape {
  const char* kind;
  int sources, dests;
};

template <class C>
void launch(const pkc::ptrs<bf16>& d, const pkc::cptrs<bf16>& s, size_t n, int reduce, int blocks,
            pk::error_record* err, cudaStream_t st, int groups = 1, int own = 0, bool coop = false) {
  // own == 3: crossed, the sources loaded 4 at a time (the generated two-shot's reduce_to<C, 4>);
  // one destination (the kernel's mine.n == 1) known to the compiler
  const bool one = group_dest(groups, own) || d.n == 1;
  auto* k = reduce ? (own == 3 ? move_kernel<C, true, 4>   // crossed: never one destination
                               : one ? move_kernel<C, true, PKC_SET_SLOTS, true> : move_kernel<C, true>)
                   : one ? move_kernel<C, false, PKC_SET_SLOTS, true> : move_kernel<C, false>;
  if (coop)  // as the generated collectives launch (pk::launch_cooperative)
    pk::launch_cooperative(k, dim3(blocks), dim3(C::kThreads), C::kSmemBytes, st, d, s, n, groups, own, err);
  else
    k<<<blocks, C::kThreads, C::kSmemBytes, st>>>(d, s, n, groups, own, err);
}

int main(int argc, char** argv) {
  bool quick = false;
  size_t stagger = 0;  // buffer k starts k x stagger bytes into its allocation
  size_t payload_mib = 0;  // 0: 64 MiB (16 with --quick)
  size_t shift = 0;        // sources start this many bytes past a 16-byte boundary
  bool sweep_only = false; // --shift given: the first sweep only
  std::vector<size_t> cross_parts;  // --cross-parts: the crossed sums alone, parts in bytes
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--stagger" && i + 1 < argc) stagger = std::stoull(argv[++i]);
    else if (a == "--payload-mib" && i + 1 < argc) payload_mib = std::stoull(argv[++i]);
    else if (a == "--shift" && i + 1 < argc) shift = std::stoull(argv[++i]), sweep_only = true;
    else if (a == "--cross-parts" && i + 1 < argc) {
      for (char* e = argv[++i]; *e;) {  // KiB, comma-separated; a bad list gives a part of 0
        cross_parts.push_back(std::strtoull(e, &e, 10) * KiB);
        if (*e && *e++ != ',') cross_parts.push_back(0), e += strlen(e);
      }
    } else {
      fprintf(stderr, "block_moves: unknown argument %s (usage: block_moves [--quick] [--stagger BYTES] [--payload-mib N] [--shift BYTES] [--cross-parts KIB,...])\n", a.c_str());
      return 2;
    }
  }
  if (shift >= 16 || shift % sizeof(bf16) != 0) {
    fprintf(stderr, "block_moves: --shift %zu is not a multiple of 2 below 16 bytes\n", shift);
    return 2;
  }
  if (std::find(cross_parts.begin(), cross_parts.end(), size_t{0}) != cross_parts.end())
    return fprintf(stderr, "block_moves: --cross-parts takes sizes in KiB above 0, comma-separated\n"), 2;
  if (stagger % 128 != 0) {
    fprintf(stderr, "block_moves: --stagger %zu is not a multiple of 128 bytes\n", stagger);
    return 2;
  }
  const int sms = sm_count();
  using tma_cfg = move_config<pkc::mech::tma>;
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tma_cfg::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tma_cfg::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, true, PKC_SET_SLOTS, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tma_cfg::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, false, PKC_SET_SLOTS, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tma_cfg::kSmemBytes));
  const Shape shapes[] = {{"copy", 1, 1}, {"copy", 1, 2}, {"copy", 1, 4}, {"copy", 1, 8},
                          {"reduce", 2, 1}, {"reduce", 4, 1}, {"reduce", 8, 1},
                          {"reduce", 2, 2}, {"reduce", 4, 4}, {"reduce", 8, 8}};
  size_t widest = 0;
  for (size_t part : cross_parts) widest = std::max(widest, 8 * part);
  const size_t big = payload_mib ? payload_mib * MiB : widest ? widest : (quick ? 16 : 64) * MiB;
  const size_t small = 256 * KiB;
  const size_t n_big = big / sizeof(bf16);
  std::vector<bf16*> srcs(8), dsts(8);
  for (int k = 0; k < 8; ++k) {
    CHECK(cudaMalloc(&srcs[k], big + 16 * stagger + 16));
    CHECK(cudaMalloc(&dsts[k], big + 16 * stagger));
    srcs[k] += (k * stagger + shift) / sizeof(bf16);
    dsts[k] += (8 + k) * stagger / sizeof(bf16);
    fill_bf16_kernel<<<sms * 4, 512>>>(srcs[k], n_big, 100 + k);
    CHECK_LAUNCH();
  }
  pk::error_record* err = new_error_record();
  unsigned long long* d_bad = nullptr;
  CHECK(cudaMalloc(&d_bad, sizeof(unsigned long long)));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  const int block_list[] = {1, 2, 4, 8, 16, 33, 66, 132, 264};
  const int small_blocks[] = {4, 16, 132};
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.02 : 0.06;

  auto run = [&](bool tma, const pkc::ptrs<bf16>& d, const pkc::cptrs<bf16>& s, size_t n,
                 int reduce, int blocks, int groups = 1, int own = 0, bool coop = false) {
    if (tma) launch<move_config<pkc::mech::tma>>(d, s, n, reduce, blocks, err, st, groups, own, coop);
    else launch<move_config<pkc::mech::reg>>(d, s, n, reduce, blocks, err, st, groups, own, coop);
    CHECK_LAUNCH();
  };
  // Compares the first n elements of destination k (k < dests) with the sum of
  // sources_of(k): "ok" or what was wrong.
  auto verify = [&](int dests, auto sources_of, size_t n) -> std::string {
    CHECK(cudaStreamSynchronize(st));
    unsigned long long bad = 0;
    for (int k = 0; k < dests; ++k) {
      CHECK(cudaMemset(d_bad, 0, sizeof(bad)));
      check_kernel<<<sms * 4, 512>>>(dsts[k], sources_of(k), n, d_bad);
      CHECK_LAUNCH();
      unsigned long long b = 0;
      CHECK(cudaMemcpy(&b, d_bad, sizeof(b), cudaMemcpyDeviceToHost));
      bad += b;
    }
    return bad == 0 ? std::string("ok") : "FAIL: " + std::to_string(bad) + " elements wrong";
  };
  // Runs `go` once on the whole payload into destinations 0..dests-1 (filled with 0xFF first)
  // and verifies it.
  auto check_move = [&](int dests, auto sources_of, auto go) -> std::string {
    for (int k = 0; k < dests; ++k) CHECK(cudaMemsetAsync(dsts[k], 0xFF, big, st));
    go();
    return verify(dests, sources_of, n_big);
  };
  // The buffers of one shape: destinations 0..D-1 (first), sources 0..S-1 (second).
  auto buffers = [&](const Shape& sh) {
    std::pair<pkc::ptrs<bf16>, pkc::cptrs<bf16>> b{};
    for (int k = 0; k < sh.dests; ++k) b.first.add(dsts[k]);
    for (int k = 0; k < sh.sources; ++k) b.second.add(srcs[k]);
    return b;
  };
  // A shape's record parameters.
  auto shape_params = [&](bool tma, const Shape& sh, int blocks) {
    JsonObj params;
    params.str("mechanism", tma ? "tma" : "register").str("kind", sh.kind);
    params.integer("sources", sh.sources).integer("dests", sh.dests).integer("blocks", blocks);
    return params;
  };
  // The launch constants every record carries after its shape.
  auto add_config = [&](JsonObj& params, bool tma) {
    if (stagger) params.integer("stagger", (long long)stagger);
    if (sweep_only) params.integer("shift", (long long)shift);
    params.integer("threads", tma ? 256 : 512).integer("stage_bytes", tma ? 32768 : 0).integer("stages", tma ? 4 : 0);
  };
  auto emit_point = [&](const char* bench, JsonObj& params, double bytes, double traffic_bytes,
                        double payload_bytes, const Timing& t, const std::string& check) {
    JsonObj j;
    j.str("bench", bench).obj("params", params);
    j.num("bytes", bytes).num("traffic_bytes", traffic_bytes);
    add_timing(j, t).num("gbps", payload_bytes / t.med / 1e9).str("check", check);
    emit(j);
  };

  for (int mi = 0; mi < 2 && cross_parts.empty(); ++mi) {
    const bool tma = mi == 0;
    for (const Shape& sh : shapes) {
      const auto buf = buffers(sh);
      const auto& d = buf.first;
      const auto& s = buf.second;
      const int reduce = sh.kind[0] == 'r';
      // Check once per shape, on the whole payload.
      const std::string check = check_move(sh.dests, [&](int) { return s; },
                                           [&] { run(tma, d, s, n_big, reduce, std::min(sms, 132)); });
      for (int pass = 0; pass < 2; ++pass) {
        const size_t bytes = pass == 0 ? big : small;
        const size_t n = bytes / sizeof(bf16);
        const int* list = pass == 0 ? block_list : small_blocks;
        const int count = pass == 0 ? 9 : 3;
        for (int bi = 0; bi < count; ++bi) {
          const int blocks = list[bi];
          if (quick && pass == 0 && blocks != 4 && blocks != 16 && blocks != 132 && !(sweep_only && blocks == 1))
            continue;
          Timing t = time_op(st, [&](long long) { run(tma, d, s, n, reduce, blocks); }, cfg);
          JsonObj params = shape_params(tma, sh, blocks);
          add_config(params, tma);
          emit_point("block_moves", params, (double)bytes, (double)bytes * (sh.sources + sh.dests),
                     (double)bytes, t, check);
        }
      }
    }
  }
  if (sweep_only) return exit_status(err, "block_moves");   // --shift: the first sweep only
  // Alone behind a write: the small payload on 4-264 blocks, each launch enqueued behind a
  // 256 MiB write and timed by events around it alone ("timing": "behind_write"), as
  // `pksim validate` times a collective: no previous grid to overlap the blocks' start.
  // "flush": the write is a cudaMemsetAsync ("memset", every shape and payload) or a kernel
  // ("kernel", as torch's zero_ before a validated collective); "launch": a plain launch or
  // a cooperative one ("cooperative", as the generated collectives launch; grids that fit
  // at once only). The three variants besides (memset, plain) time 4 KiB of two shapes.
  const size_t flush_bytes = 256ull << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  // `go` once to warm up, then 30 times (10 with --quick) alone behind the 256 MiB write (a
  // kernel's with `kernel_flush`, else cudaMemsetAsync), events around each launch.
  auto time_alone = [&](auto go, flush_kind kind) {
    go();
    const std::vector<double> v = times_behind(st, go, flush, flush_bytes, quick ? 10 : 30, kind);
    Timing t;
    t.med = quantile(v, 0.5);
    t.p10 = quantile(v, 0.1);
    t.p90 = quantile(v, 0.9);
    t.single = v.front();
    t.samples = (int)v.size();
    t.reps = 1;
    return t;
  };
  // --cross-parts: the crossed sums alone (own 4: into one destination, 2: into every one)
  for (int mi = 0; mi < 2 && !cross_parts.empty(); ++mi)
    for (int groups : {2, 4, 8}) {
      const auto buf = buffers(Shape{"reduce", groups, groups});
      auto parts_of = [&](int g, size_t n) {  // destination g of own 4: part g of every source
        pkc::cptrs<bf16> at{};
        for (int q = 0; q < groups; ++q) at.add(srcs[q] + g * n);
        return at; };
      for (int total : {132, 64, 32})
        for (size_t part : cross_parts)
          for (int own : {4, 2}) {
            if (part * groups > big) continue;
            const int per = total / groups, dests = own == 4 ? 1 : groups;
            const size_t n = part / sizeof(bf16);
            const Timing t = time_alone([&] { run(mi == 0, buf.first, buf.second, n, 1, per * groups,
                                                  groups, own); }, flush_kind::memset);
            const std::string check = own == 2 ? verify(groups, [&](int) { return buf.second; }, n * groups)
                                               : verify(groups, [&](int g) { return parts_of(g, n); }, n);
            JsonObj params;
            params.str("mechanism", mi == 0 ? "tma" : "register").str("kind", "reduce");
            params.integer("sources", groups).integer("dests", dests).integer("groups", groups)
                .integer("blocks", per).str("timing", "behind_write").str("flush", "memset");
            add_config(params, mi == 0);
            emit_point("crossed_sums", params, (double)part, (double)part * groups * (groups + dests),
                       (double)part * groups, t, check);
          }
    }
  if (!cross_parts.empty()) return exit_status(err, "block_moves");
  {
    const int fit[2] = {
        pk::max_coresident_blocks(move_kernel<move_config<pkc::mech::reg>, true>, 512, 0),
        pk::max_coresident_blocks(move_kernel<move_config<pkc::mech::tma>, true>, 256,
                                  move_config<pkc::mech::tma>::kSmemBytes)};
    for (int variant = 0; variant < 4; ++variant) {
      const bool kernel_flush = variant & 1, coop = variant & 2;
      for (size_t alone : {(size_t)4 * KiB, (size_t)64 * KiB, small, (size_t)1 * MiB, (size_t)4 * MiB}) {
        if ((variant && alone != 4 * KiB) || alone > big) continue;
        const size_t n = alone / sizeof(bf16);
        for (int mi = 0; mi < 2; ++mi) {
          const bool tma = mi == 0;
          for (const Shape& sh : shapes) {
            if (variant && !((sh.sources == 1 && sh.dests == 1) || (sh.sources == 8 && sh.dests == 8)))
              continue;
            const auto buf = buffers(sh);
            const auto& d = buf.first;
            const auto& s = buf.second;
            const int reduce = sh.kind[0] == 'r';
            for (int blocks : {4, 16, 33, 66, 132, 264}) {
              if (coop && blocks > fit[mi]) continue;
              const Timing t = time_alone([&] { run(tma, d, s, n, reduce, blocks, 1, 0, coop); },
                                          kernel_flush ? flush_kind::kernel : flush_kind::memset);
              JsonObj params = shape_params(tma, sh, blocks);
              params.str("timing", "behind_write").str("flush", kernel_flush ? "kernel" : "memset");
              params.str("launch", coop ? "cooperative" : "plain");
              add_config(params, tma);
              // Check what the last timed launch wrote: every destination's first n elements.
              const std::string check = verify(sh.dests, [&](int) { return s; }, n);
              emit_point("block_moves", params, (double)alone, (double)alone * (sh.sources + sh.dests),
                         (double)alone, t, check);
            }
          }
        }
      }
    }
  }
  // Behind a read ("flush": "read", measured only): 1 and 4 MiB of a copy and the sums into
  // one destination on 33 and 132 blocks, each launch alone behind a kernel reading the
  // 256 MiB: inputs as cold as behind the memset, but an L2 of clean lines. Against the
  // memset points, what writing back the flush's dirty lines costs a cold move (the model,
  // which has no such term, is 7-21 % fast at these sizes behind the memset;
  // docs/decisions/D26.md).
  for (size_t alone : {(size_t)1 * MiB, (size_t)4 * MiB}) {
    if (alone > big) continue;
    const size_t n = alone / sizeof(bf16);
    for (int mi = 0; mi < 2; ++mi) {
      const bool tma = mi == 0;
      for (const Shape& sh : shapes) {
        if (sh.dests != 1) continue;
        const auto buf = buffers(sh);
        const int reduce = sh.kind[0] == 'r';
        for (int blocks : {33, 132}) {
          const Timing t = time_alone([&] { run(tma, buf.first, buf.second, n, reduce, blocks); },
                                      flush_kind::read);
          JsonObj params = shape_params(tma, sh, blocks);
          params.str("timing", "behind_write").str("flush", "read").str("launch", "plain");
          add_config(params, tma);
          const std::string check = verify(sh.dests, [&](int) { return buf.second; }, n);
          emit_point("block_moves", params, (double)alone, (double)alone * (sh.sources + sh.dests),
                     (double)alone, t, check);
        }
      }
    }
  }
  // Shared reads: R groups of blocks each move the same S sources (a sum for S > 1, a copy
  // for S = 1) into their own destination, as R virtual ranks of a one-shot all-reduce
  // (S = R) or a broadcast (S = 1) do; R x B blocks in all, B = 132 / R and 64 / R.
  for (int mi = 0; mi < 2; ++mi) {
    const bool tma = mi == 0;
    for (int readers : {2, 4, 8}) {
      for (int sources : {1, readers}) {
        pkc::ptrs<bf16> d{};
        pkc::cptrs<bf16> s{};
        for (int k = 0; k < readers; ++k) d.add(dsts[k]);
        for (int k = 0; k < sources; ++k) s.add(srcs[k]);
        const int reduce = sources > 1;
        for (int total : {132, 64}) {
          const int per = total / readers;
          auto go = [&] { run(tma, d, s, n_big, reduce, per * readers, readers); };
          const std::string check = check_move(readers, [&](int) { return s; }, go);
          Timing t = time_op(st, [&](long long) { go(); }, cfg);
          JsonObj params;
          params.str("mechanism", tma ? "tma" : "register").str("kind", reduce ? "reduce" : "copy");
          params.integer("sources", sources).integer("dests", 1).integer("readers", readers)
              .integer("blocks", per);
          add_config(params, tma);
          emit_point("block_moves", params, (double)big, (double)big * (sources + readers),
                     (double)big, t, check);
        }
        // Alone behind a write: the one-shot's and the broadcast's cold small moves as the
        // suite runs them, 4 KiB, 64 KiB and 1 MiB per destination on the suite's blocks per
        // group (16 / 33 / 66 at R = 2, 8 / 16 / 33 at 4, 4 / 8 / 16 at 8;
        // docs/decisions/D19.md). The sums also in the generated one-shot's staggered order ("order":
        // "staggered", own == 5; measured only): its phase ran 0.3-0.6 us faster than these
        // shared reads at 4-64 KiB, not by the order (0-0.2 us slower staggered) but by its one
        // destination known at compile time (docs/decisions/D13.md)
        for (size_t alone : {(size_t)4 * KiB, (size_t)64 * KiB, (size_t)MiB}) {
          const size_t n = alone / sizeof(bf16);
          for (int per : {132 / readers / 4, 132 / readers / 2, 132 / readers})
            for (int order = 0; order < (reduce ? 2 : 1); ++order) {
              const Timing t = time_alone(
                  [&] { run(tma, d, s, n, reduce, per * readers, readers, order ? 5 : 0); },
                  flush_kind::memset);
              JsonObj params;
              params.str("mechanism", tma ? "tma" : "register").str("kind", reduce ? "reduce" : "copy");
              params.integer("sources", sources).integer("dests", 1).integer("readers", readers)
                  .integer("blocks", per);
              params.str("timing", "behind_write").str("flush", "memset").str("launch", "plain");
              if (order) params.str("order", "staggered");
              add_config(params, tma);
              const std::string check = verify(readers, [&](int) { return s; }, n);
              emit_point("block_moves", params, (double)alone, (double)alone * (sources + readers),
                         (double)alone, t, check);
            }
        }
      }
    }
  }
  // Own buffers: G groups of blocks, group g summing (S > 1) or copying (S = 1) its own S
  // sources into its own destination, as G virtual ranks do (G x S <= 8).
  const int own_shapes[][2] = {{1, 2}, {1, 4}, {1, 8}, {2, 2}, {2, 4}, {4, 2}};
  for (int mi = 0; mi < 2; ++mi) {
    const bool tma = mi == 0;
    for (const auto& sh : own_shapes) {
      const int sources = sh[0], groups = sh[1];
      pkc::ptrs<bf16> d{};
      pkc::cptrs<bf16> s{};
      for (int k = 0; k < groups; ++k) d.add(dsts[k]);
      for (int k = 0; k < groups * sources; ++k) s.add(srcs[k]);
      const int reduce = sources > 1;
      auto sources_of = [&](int g) {
        pkc::cptrs<bf16> sg{};
        for (int k = 0; k < sources; ++k) sg.add(srcs[g * sources + k]);
        return sg;
      };
      for (int total : {132, 64}) {
        const int per = total / groups;
        auto go = [&] { run(tma, d, s, n_big, reduce, per * groups, groups, 1); };
        const std::string check = check_move(groups, sources_of, go);
        Timing t = time_op(st, [&](long long) { go(); }, cfg);
        JsonObj params;
        params.str("mechanism", tma ? "tma" : "register").str("kind", reduce ? "reduce" : "copy");
        params.integer("sources", sources).integer("dests", 1).integer("groups", groups)
            .integer("blocks", per);
        add_config(params, tma);
        emit_point("block_moves_own", params, (double)big, (double)big * groups * (sources + 1),
                   (double)big * groups, t, check);
      }
    }
  }
  // The crossed moves below: G groups of G sources and G destinations (buffers), on 132 and
  // 64 blocks in all, by TMA and by registers.
  auto each_crossed = [&](auto body) {
    for (int mi = 0; mi < 2; ++mi) {
      const bool tma = mi == 0;
      for (int groups : {2, 4, 8}) {
        const auto buf = buffers(Shape{"reduce", groups, groups});  // G sources, G destinations
        for (int total : {132, 64}) body(tma, groups, buf.first, buf.second, total, total / groups);
      }
    }
  };
  // Crossed reads into one destination (own == 4; "dests" = 1): G groups, group g summing part
  // g of all G sources into its own destination, as a direct reduce-scatter's ranks do; parts
  // of 4 KiB - 4 MiB alone behind the memset (the suite's direct reduce-scatter by TMA at
  // 16 MiB w4 was 21 % over the model, by registers 11 %; docs/decisions/D6.md).
  each_crossed([&](bool tma, int groups, const auto& d, const auto& s, int total, int per) {
    for (size_t part : {(size_t)4 * KiB, (size_t)64 * KiB, (size_t)1 * MiB, (size_t)4 * MiB}) {
      if (part * groups > big || (quick && total != 64)) continue;
      const size_t n = part / sizeof(bf16);
      const Timing t = time_alone([&] { run(tma, d, s, n, 1, per * groups, groups, 4); }, flush_kind::memset);
      // destination g holds part g of the sum of all sources
      const std::string check = verify(groups, [&](int g) {
        pkc::cptrs<bf16> shifted{};
        for (int q = 0; q < groups; ++q) shifted.add(srcs[q] + g * n);
        return shifted;
      }, n);
      JsonObj params;
      params.str("mechanism", tma ? "tma" : "register").str("kind", "reduce");
      params.integer("sources", groups).integer("dests", 1).integer("groups", groups).integer("blocks", per);
      params.str("timing", "behind_write").str("flush", "memset");
      add_config(params, tma);
      emit_point("block_moves_cross", params, (double)part, (double)part * groups * (groups + 1),
                 (double)part * groups, t, check);
    }
  });
  // Crossed buffers: G groups, group g summing part g of all G sources into part g of all G
  // destinations (a two-shot all-reduce's pattern); every destination ends as the sum of all
  // sources. Parts of 4 KiB and 64 KiB alone behind a 256 MiB write, 64 MiB / G back to back.
  each_crossed([&](bool tma, int groups, const auto& d, const auto& s, int total, int per) {
    // the two-shot's own parts at 4 KiB and 64 KiB on 8 ranks (512 B, 8 KiB) too, behind
    // a kernel's write as well; registers also with 4 sources a round (own == 3); since run
    // 42 its parts at 1 MiB (1 MiB / G) as well
    for (size_t part : {(size_t)512, (size_t)4 * KiB, (size_t)8 * KiB, (size_t)64 * KiB,
                        (size_t)MiB / groups, big / groups})
      for (int own : {2, 3})
        for (int kernel_flush = 0; kernel_flush < 2; ++kernel_flush) {
          const bool alone = part < big / groups;
          const bool extra = part == 512 || part == 8 * KiB || own == 3 || kernel_flush;
          if ((own == 3 && tma) || (!alone && (own == 3 || kernel_flush)) ||
              (extra && (quick || total != 64)))
            continue;
          const size_t n = part / sizeof(bf16);
          auto go = [&] { run(tma, d, s, n, 1, per * groups, groups, own); };
          const Timing t = alone ? time_alone(go, kernel_flush == 1 ? flush_kind::kernel : flush_kind::memset)
                                 : time_op(st, [&](long long) { go(); }, cfg);
          // what the last launch wrote: every destination's G parts, the sum of all sources
          const std::string check = verify(groups, [&](int) { return s; }, n * groups);
          JsonObj params;
          params.str("mechanism", tma ? "tma" : "register").str("kind", "reduce");
          params.integer("sources", groups).integer("dests", groups).integer("groups", groups)
              .integer("blocks", per);
          if (alone) params.str("timing", "behind_write").str("flush", kernel_flush ? "kernel" : "memset");
          if (own == 3) params.integer("load_batch", 4);
          add_config(params, tma);
          emit_point("block_moves_cross", params, (double)part,
                     (double)part * groups * 2 * groups, (double)part * groups, t, check);
        }
  });
  CHECK(cudaFree(flush));
  return exit_status(err, "block_moves");
}
