// epilogue_moves.cu -- what a reduce op and a fused epilogue add to the generated collectives'
// sums: the collectives' sum routines with a reduce op and an epilogue (kernels/collectives/
// moves.cuh pkc::reg_reduce, pkc::tma_reduce with epilogue.cuh's pkc::ep_policy) beside the
// plain sum (the same routines with the plain policy)
// on the same buffers, by number of blocks.
//
// What: a sum of S sources into D destinations of one GPU, as block_moves.cu runs it (the
// generated kernels' launch constants: TMA 256 threads and four 32 KiB stages, registers 512
// threads; block b moves piece b of the payload, pkc::block_piece), through
//   "sum"             the plain routines (what the model's gpu.transfer.*_move_* figures measure),
//   "min"             op_min, no epilogue (the epilogue routines with an op alone),
//   "avg"             op_avg: the sum scaled by 1/S (the scale alone),
//   "min-bias"        op_min + a bias vector (ep_bias),
//   "max-scale-bias"  op_max x alpha + a bias vector (ep_scale_bias),
// the bias a row of 1024 entries (bias[i % 1024], as the comm suite's timed bias epilogues; a
// 2 or 4 KiB row that stays in L1 / L2). These are primitives: one move, no synchronisation
// between blocks; the collectives with an epilogue (the comm suite) judge the model fitted
// from them, never fit it (docs/decisions/D56.md).
// Sweep: mechanism {tma, register} x variant x shape {reduce 2->1, 4->1, 8->1, 2->2, 4->4,
// 8->8} x blocks {4, 16, 33, 66, 132} at 64 MiB per destination (traffic (S + D) x payload,
// 192 MiB .. 1 GiB, far above the 60 MiB L2), bf16, back-to-back launches; fp32 for the
// shapes 2->1 and 8->1 on 16 and 132 blocks (the register path reads its bias per element,
// TMA by 16-byte vectors: fp32 halves the register path's bias reads per byte).
// Keys: "bytes" = payload (bytes written to one destination), "traffic_bytes" = (S + D) x
// payload, "gbps" = payload GB/s; params: mechanism, variant, dtype, sources, dests, blocks,
// bias (entries, 0 without), threads, stage_bytes, stages.
// Check (before timing each shape and variant, at 132 blocks): random sources; every
// destination compared with a device reference computed in the same order (fp32, the op over
// the sources in source order, x scale, + bias, rounded once): within one unit in the last
// place of the largest term in the output type (the kernels may fuse the scale and the bias into
// one FMA, which rounds once where the reference rounds twice; a check against the result's own
// unit failed every fp32 max-scale-bias point: docs/decisions/D56.md).
// Usage: epilogue_moves [--quick] [--payload-mib N]
#include "moves_check.cuh"
#include "collectives/epilogue.cuh"
#include "pk/host.cuh"

constexpr unsigned kBiasCount = 1024;
constexpr float kAlpha = 0.37f;

enum class variant { sum, min, avg, min_bias, max_scale_bias };
const char* variant_name(variant v) {
  switch (v) {
    case variant::sum: return "sum";
    case variant::min: return "min";
    case variant::avg: return "avg";
    case variant::min_bias: return "min-bias";
    default: return "max-scale-bias";
  }
}

// One kernel per (mechanism, variant, type), one block an SM (as the generated kernels).
template <class C, class Op, class Ep, bool plain, typename T>
__global__ void __launch_bounds__(C::kThreads, 1) ep_kernel(const __grid_constant__ pkc::ptrs<T> dst,
                                                            const __grid_constant__ pkc::cptrs<T> src,
                                                            size_t n, pkc::ep_args e, pk::error_record* err) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const int blocks = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const pkc::span s = pkc::block_piece(n, blocks, b, sizeof(T));
  pkc::ptrs<T> d{};
  pkc::cptrs<T> q{};
#pragma unroll
  for (int k = 0; k < PKC_SET_SLOTS; ++k) {
    d.p[k] = dst.p[k] + s.lo;
    q.p[k] = src.p[k] + s.lo;
  }
  d.n = dst.n;
  q.n = src.n;
  if constexpr (C::kMech == pkc::mech::tma) {
    pkc::block_smem sm = stages<C>(smem_raw, bars);
    const pk::spin_ctx spin = pk::spin_ctx::make(err, 1ll << 31);
    if constexpr (plain) pkc::tma_reduce<C>(d, q, s.size(), sm, spin, 0);
    else pkc::tma_reduce<C>(d, q, s.size(), sm, spin, 0, pkc::ep_policy<Op, Ep>{e}, s.lo);
  } else {
    if constexpr (plain) pkc::reg_reduce(d, q, s.size(), pk::ldst::block_group());
    else pkc::reg_reduce(d, q, s.size(), pk::ldst::block_group(), pkc::ep_policy<Op, Ep>{e}, s.lo);
  }
}

template <typename T>
__global__ void fill_kernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pkc::from_f32<T>((hash_u32(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

// Elements of `out` further than one unit in the last place of T from the reference.
template <typename T>
__global__ void ep_check_kernel(const T* out, pkc::cptrs<T> src, size_t n, int v, float scale, const T* bias,
                                unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const bool is_min = v == (int)variant::min || v == (int)variant::min_bias;
    const bool is_max = v == (int)variant::max_scale_bias;
    float a = is_min ? INFINITY : is_max ? -INFINITY : 0.f;
    for (int q = 0; q < src.n; ++q) {
      const float x = pkc::to_f32(src.p[q][i]);
      a = is_min ? fminf(a, x) : is_max ? fmaxf(a, x) : a + x;
    }
    if (v == (int)variant::avg || v == (int)variant::max_scale_bias) a *= scale;
    float mag = fabsf(a);
    if (v == (int)variant::min_bias || v == (int)variant::max_scale_bias) {
      const float b = pkc::to_f32(bias[i % kBiasCount]);
      mag = fmaxf(mag, fabsf(b));
      a += b;
    }
    const float want = pkc::to_f32(pkc::from_f32<T>(a));
    const float got = pkc::to_f32(out[i]);
    // one unit in the last place of the largest term: where the scale and the bias cancel, a
    // fused multiply-add rounds once where the reference rounds twice
    const float ulp = fmaxf(fmaxf(fabsf(want), mag), 1e-3f) * (sizeof(T) == 2 ? 0.0078125f : 2.4e-7f);
    local += !(fabsf(got - want) <= ulp);
  }
  if (local) atomicAdd(bad, local);
}

struct Shape {
  int sources, dests;
};

template <typename T>
struct Bench {
  size_t big;
  std::vector<T*> srcs, dsts;
  T* bias = nullptr;
  pk::error_record* err = nullptr;
  cudaStream_t st{};
  unsigned long long* d_bad = nullptr;
  int sms = 0;

  explicit Bench(size_t bytes) : big(bytes), srcs(8), dsts(8) {
    sms = sm_count();
    const size_t n = big / sizeof(T);
    for (int k = 0; k < 8; ++k) {
      CHECK(cudaMalloc(&srcs[k], big));
      CHECK(cudaMalloc(&dsts[k], big));
      fill_kernel<T><<<sms * 4, 512>>>(srcs[k], n, 100 + k);
      CHECK_LAUNCH();
    }
    CHECK(cudaMalloc(&bias, kBiasCount * sizeof(T)));
    fill_kernel<T><<<8, 128>>>(bias, kBiasCount, 7);
    CHECK_LAUNCH();
    err = new_error_record();
    CHECK(cudaMalloc(&d_bad, sizeof(unsigned long long)));
    CHECK(cudaStreamCreate(&st));
  }

  template <class C, class Op, class Ep, bool plain>
  void launch_one(const pkc::ptrs<T>& d, const pkc::cptrs<T>& s, size_t n, const pkc::ep_args& e, int blocks) {
    auto* k = ep_kernel<C, Op, Ep, plain, T>;
    static bool attr = false;
    if (!attr && C::kSmemBytes > 0) {
      CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::kSmemBytes));
      attr = true;
    }
    k<<<blocks, C::kThreads, C::kSmemBytes, st>>>(d, s, n, e, err);
  }

  template <class C>
  void launch(variant v, const pkc::ptrs<T>& d, const pkc::cptrs<T>& s, size_t n, const pkc::ep_args& e,
              int blocks) {
    switch (v) {
      case variant::sum: launch_one<C, pkc::op_sum, pkc::ep_none, true>(d, s, n, e, blocks); break;
      case variant::min: launch_one<C, pkc::op_min, pkc::ep_none, false>(d, s, n, e, blocks); break;
      case variant::avg: launch_one<C, pkc::op_avg, pkc::ep_none, false>(d, s, n, e, blocks); break;
      case variant::min_bias: launch_one<C, pkc::op_min, pkc::ep_bias, false>(d, s, n, e, blocks); break;
      default: launch_one<C, pkc::op_max, pkc::ep_scale_bias, false>(d, s, n, e, blocks); break;
    }
    CHECK_LAUNCH();
  }

  void run(bool tma, variant v, const Shape& sh, size_t n, int blocks) {
    pkc::ptrs<T> d{};
    pkc::cptrs<T> s{};
    for (int k = 0; k < sh.dests; ++k) d.add(dsts[k]);
    for (int k = 0; k < sh.sources; ++k) s.add(srcs[k]);
    // as make_ep: 1/world rounded once for avg (the world is the sources here), alpha x it
    float scale = 1.f;
    if (v == variant::avg) scale = 1.f / static_cast<float>(sh.sources);
    if (v == variant::max_scale_bias) scale = kAlpha;
    const pkc::ep_args e{scale, bias, kBiasCount};
    if (tma) launch<move_config<pkc::mech::tma>>(v, d, s, n, e, blocks);
    else launch<move_config<pkc::mech::reg>>(v, d, s, n, e, blocks);
  }

  std::string check(bool tma, variant v, const Shape& sh) {
    const size_t n = big / sizeof(T);
    for (int k = 0; k < sh.dests; ++k) CHECK(cudaMemsetAsync(dsts[k], 0xFF, big, st));
    run(tma, v, sh, n, std::min(sms, 132));
    CHECK(cudaStreamSynchronize(st));
    pkc::cptrs<T> s{};
    for (int k = 0; k < sh.sources; ++k) s.add(srcs[k]);
    const float scale = v == variant::avg ? 1.f / static_cast<float>(sh.sources) : kAlpha;
    return run_check(err, [&](unsigned long long* bad) {
      for (int k = 0; k < sh.dests; ++k)
        ep_check_kernel<T><<<sms * 4, 512>>>(dsts[k], s, n, (int)v, scale, bias, bad);
    });
  }
};

template <typename T>
void sweep(Bench<T>& b, const char* dtype, const std::vector<Shape>& shapes, const std::vector<int>& blocks,
           bool quick) {
  const variant variants[] = {variant::sum, variant::min, variant::avg, variant::min_bias, variant::max_scale_bias};
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.02 : 0.04;
  const size_t n = b.big / sizeof(T);
  for (int mi = 0; mi < 2; ++mi) {
    const bool tma = mi == 0;
    for (const Shape& sh : shapes) {
      for (variant v : variants) {
        const std::string check = b.check(tma, v, sh);
        for (int blk : blocks) {
          Timing t = time_op(b.st, [&](long long) { b.run(tma, v, sh, n, blk); }, cfg);
          JsonObj params;
          params.str("mechanism", tma ? "tma" : "register").str("variant", variant_name(v)).str("dtype", dtype);
          params.integer("sources", sh.sources).integer("dests", sh.dests).integer("blocks", blk);
          params.integer("bias", (v == variant::min_bias || v == variant::max_scale_bias) ? kBiasCount : 0);
          params.integer("threads", tma ? 256 : 512).integer("stage_bytes", tma ? 32768 : 0).integer("stages", tma ? 4 : 0);
          JsonObj j;
          j.str("bench", "epilogue_moves").obj("params", params);
          j.num("bytes", (double)b.big).num("traffic_bytes", (double)b.big * (sh.sources + sh.dests));
          add_timing(j, t).num("gbps", (double)b.big / t.med / 1e9).str("check", check);
          emit(j);
        }
      }
    }
  }
}

int main(int argc, char** argv) {
  bool quick = false;
  size_t payload_mib = 0;  // 0: 64 MiB (16 with --quick)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--payload-mib" && i + 1 < argc) payload_mib = std::stoull(argv[++i]);
    else {
      fprintf(stderr, "epilogue_moves: unknown argument %s (usage: epilogue_moves [--quick] [--payload-mib N])\n",
              a.c_str());
      return 2;
    }
  }
  emit_device_record("epilogue_moves");
  const size_t big = (payload_mib ? payload_mib : quick ? 16 : 64) * MiB;
  int status = 0;
  {
    Bench<bf16> b(big);
    sweep(b, "bf16", {{2, 1}, {4, 1}, {8, 1}, {2, 2}, {4, 4}, {8, 8}},
          quick ? std::vector<int>{16, 132} : std::vector<int>{4, 16, 33, 66, 132}, quick);
    status |= exit_status(b.err, "epilogue_moves");
  }
  {
    Bench<float> b(big);
    sweep(b, "fp32", {{2, 1}, {8, 1}}, {16, 132}, quick);
    status |= exit_status(b.err, "epilogue_moves");
  }
  return status;
}
