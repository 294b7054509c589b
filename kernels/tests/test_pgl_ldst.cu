// test_pgl_ldst.cu: register-path peer transfers (pk/ldst.cuh) over a PGL, on virtual ranks.
//
// Cases, for world sizes 2, 4, 8:
//   ldst_copy[_off3]  all-gather: every rank copies its chunk into slot `rank` of every rank.
//                     Odd chunk sizes put the slots at every alignment mod 16, so the head /
//                     word / tail paths of ldst::copy are all exercised; _off3 also misaligns
//                     the source. Guard bytes after the last slot must stay untouched.
//   ldst_red_{f32,bf16}[_off1]  every rank atomically adds its vector into every rank's
//                     (zeroed) destination: the result is the sum over ranks, accumulated in
//                     the destination type in no fixed order, checked against an fp32
//                     reference at a tolerance that grows with the world size.
//   ldst_add_{f32,bf16}[_off1]  rank r adds its vector into rank r+1's destination
//                     (non-atomic, single writer): checked element-wise.
#include "test_util.cuh"

namespace {

constexpr unsigned kBlocksPerRank = 4;
constexpr unsigned kThreads = 256;

using pk::pgl;

__global__ void allgather_kernel(const __grid_constant__ pgl<unsigned char> dst,
                                 const __grid_constant__ pgl<unsigned char> src, size_t chunk,
                                 size_t src_offset, unsigned bpr) {
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const pk::ldst::group g = pk::ldst::rank_group(bpr);
  for (int k = 0; k < dst.world; ++k) {
    const int p = (rank + k) % dst.world;
    pk::ldst::copy(dst.ptr[p] + rank * chunk, src.ptr[rank] + src_offset, chunk, g);
  }
}

template <typename T>
__global__ void red_kernel(const __grid_constant__ pgl<T> dst, const __grid_constant__ pgl<T> src,
                           size_t n, size_t off, unsigned bpr) {
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const pk::ldst::group g = pk::ldst::rank_group(bpr);
  for (int k = 0; k < dst.world; ++k) {
    const int p = (rank + k) % dst.world;
    pk::ldst::red_into(dst.ptr[p] + off, src.ptr[rank] + off, n, g);
  }
}

template <typename T>
__global__ void add_kernel(const __grid_constant__ pgl<T> dst, const __grid_constant__ pgl<T> src,
                           size_t n, size_t off, unsigned bpr) {
  const int rank = static_cast<int>(blockIdx.x / bpr);
  const int next = (rank + 1) % dst.world;
  pk::ldst::add_into(dst.ptr[next] + off, src.ptr[rank] + off, n, pk::ldst::rank_group(bpr));
}

float to_f(float x) { return x; }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T from_f(float x);
template <> float from_f<float>(float x) { return x; }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <typename T> constexpr double unit_roundoff();
template <> constexpr double unit_roundoff<float>() { return pkt::kUnitRoundoffF32; }
template <> constexpr double unit_roundoff<__nv_bfloat16>() { return pkt::kUnitRoundoffBF16; }
template <typename T> const char* type_name();
template <> const char* type_name<float>() { return "f32"; }
template <> const char* type_name<__nv_bfloat16>() { return "bf16"; }

void case_copy(pkt::report& rep, int world, size_t chunk, size_t src_off, uint64_t seed) {
  const std::string name = src_off ? "ldst_copy_off" + std::to_string(src_off) : "ldst_copy";
  rep.run(name.c_str(), world, chunk, [&] {
    constexpr size_t kGuard = 64;
    const size_t dst_bytes = world * chunk + kGuard;
    auto dst = pk::alloc_virtual_pgl<unsigned char>(world, dst_bytes);
    auto src = pk::alloc_virtual_pgl<unsigned char>(world, chunk + src_off);
    pkt::defer cleanup([&] {
      pk::free_virtual_pgl(dst);
      pk::free_virtual_pgl(src);
    });
    const auto host = pkt::random_sources(src, dst, seed);
    pk::launch_cooperative(allgather_kernel, dim3(world * kBlocksPerRank), dim3(kThreads), 0,
                           nullptr, dst, src, chunk, src_off, kBlocksPerRank);
    pkt::finish_launch(nullptr);
    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], dst_bytes);
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < chunk; ++i) bad += d[r * chunk + i] != host[r][src_off + i];
      for (size_t i = world * chunk; i < dst_bytes; ++i) bad += d[i] != 0xCD;
    }
    rep.emit(name.c_str(), world, chunk, bad == 0, static_cast<double>(bad),
             bad ? std::to_string(bad) + " bytes differ" : "");
  });
}

// atomic == true: every rank reduces into every rank; false: rank r adds into rank r+1 only.
template <typename T>
void case_accumulate(pkt::report& rep, bool atomic, int world, size_t n, size_t off, uint64_t seed) {
  std::string name = std::string(atomic ? "ldst_red_" : "ldst_add_") + type_name<T>();
  if (off) name += "_off" + std::to_string(off);
  rep.run(name.c_str(), world, n * sizeof(T), [&] {
    const size_t len = n + off;
    auto dst = pk::alloc_virtual_pgl<T>(world, len);
    auto src = pk::alloc_virtual_pgl<T>(world, len);
    pkt::defer cleanup([&] {
      pk::free_virtual_pgl(dst);
      pk::free_virtual_pgl(src);
    });
    pkt::rng g(seed);
    std::vector<std::vector<T>> hsrc(world), hdst0(world);
    for (int r = 0; r < world; ++r) {
      hsrc[r].resize(len);
      hdst0[r].assign(len, from_f<T>(0.f));
      for (auto& x : hsrc[r]) x = from_f<T>(g.uniform());
      if (!atomic)
        for (size_t i = off; i < len; ++i) hdst0[r][i] = from_f<T>(g.uniform());
      pkt::upload(src.ptr[r], hsrc[r]);
      pkt::upload(dst.ptr[r], hdst0[r]);
    }
    if (atomic)
      pk::launch_cooperative(red_kernel<T>, dim3(world * kBlocksPerRank), dim3(kThreads), 0,
                             nullptr, dst, src, n, off, kBlocksPerRank);
    else
      pk::launch_cooperative(add_kernel<T>, dim3(world * kBlocksPerRank), dim3(kThreads), 0,
                             nullptr, dst, src, n, off, kBlocksPerRank);
    pkt::finish_launch(nullptr);

    double max_err = 0;
    size_t bad = 0;
    for (int p = 0; p < world; ++p) {
      const auto d = pkt::download(dst.ptr[p], len);
      for (size_t i = 0; i < off; ++i) bad += to_f(d[i]) != 0.f;  // before the span: untouched
      const int prev = (p - 1 + world) % world;
      for (size_t i = off; i < len; ++i) {
        double ref = to_f(hdst0[p][i]), sum_abs = std::fabs(ref);
        const int terms = atomic ? world : 2;
        for (int r = 0; r < world; ++r) {
          if (!atomic && r != prev) continue;
          ref += to_f(hsrc[r][i]);
          sum_abs += std::fabs(to_f(hsrc[r][i]));
        }
        const double err = std::fabs(static_cast<double>(to_f(d[i])) - ref);
        max_err = std::max(max_err, err);
        bad += !(err <= pkt::sum_tolerance(terms, unit_roundoff<T>(), sum_abs));
      }
    }
    rep.emit(name.c_str(), world, n * sizeof(T), bad == 0, max_err,
             bad ? std::to_string(bad) + " elements out of tolerance" : "");
  });
}

}  // namespace

int main() {
  pkt::init();
  pkt::report rep;
  const size_t chunks[] = {1, 13, 16, 4099, 65536 + 7, (1u << 20) + 5};
  const size_t counts[] = {1, 7, 1000, 65536 + 3, (1u << 20) + 1};
  uint64_t seed = 1;
  for (int world : pkt::kWorlds) {
    for (size_t c : chunks)
      for (size_t off : {size_t(0), size_t(3)}) case_copy(rep, world, c, off, seed++);
    for (size_t n : counts)
      for (size_t off : {size_t(0), size_t(1)}) {
        case_accumulate<float>(rep, true, world, n, off, seed++);
        case_accumulate<__nv_bfloat16>(rep, true, world, n, off, seed++);
        case_accumulate<float>(rep, false, world, n, off, seed++);
        case_accumulate<__nv_bfloat16>(rep, false, world, n, off, seed++);
      }
  }
  return rep.exit_code();
}
