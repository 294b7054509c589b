// sm_copy.cu -- register (ld/st through the SM) copy bandwidth by number of SMs.
//
// What: copy_int4_kernel (grid-stride, 16-byte loads/stores, 4 loads in
// flight per thread) with a swept number of blocks:
//   threads=1024: blocks 1,2,4,8,16,32,48,66,96,132,264 (1 block per SM up to
//                 the SM count, 2 per SM at 2 x SM count);
//   threads=256:  blocks 1..132 (same list without 264).
// The list is clipped to the device (SM count and 2 x SM count always added).
// Size: S = clamp(blocks x 64 MiB, 512 MiB, 4 GiB): always >> L2 (HBM-bound),
// 4 GiB from 64 blocks on, smaller for a few blocks so one op stays < ~20 ms.
// Consecutive ops reuse the same buffers; at >= 512 MiB per buffer only the
// last ~L2-size of dst can be cached, and that is not what the next op reads.
// Keys: "bytes" = payload S, "traffic_bytes" = 2S (read + write), "gbps" =
// payload GB/s (1e9 B/s), "gbps_per_block" = gbps / blocks.
// Check: src hash-random, dst poisoned with 0xFF, one op, full device compare
// plus host spot check, before timing each point.
// Usage: sm_copy [--quick]
#include "common.cuh"

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("sm_copy");
  const int sms = sm_count();
  const uint32_t seed = 0x5eed;

  const CopyPair buffers = alloc_copy_pair(4 * GiB, seed);
  const size_t max_s = buffers.bytes;
  uint32_t *src = buffers.src, *dst = buffers.dst;
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.02 : 0.06;
  cfg.min_samples = quick ? 3 : 5;

  std::vector<int> base = {1, 2, 4, 8, 16, 32, 48, 66, 96, 132, 264};
  if (quick) base = {1, 4, 16, 66, 132, 264};
  int failures = 0;
  for (int threads : {1024, 256}) {
    std::vector<int> blocks;
    const int limit = threads == 1024 ? 2 * sms : sms;
    for (int b : base)
      if (b <= limit && b != 264 && b != 132) blocks.push_back(b);
    blocks.push_back(sms);
    if (threads == 1024) blocks.push_back(2 * sms);
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());

    for (int nb : blocks) {
      const size_t s = std::min(max_s, std::max<size_t>(512 * MiB, (size_t)nb * 64 * MiB));
      auto op = [&](long long) {
        copy_int4_kernel<<<nb, threads, 0, st>>>((const int4*)src, (int4*)dst, s / 16);
        CHECK_LAUNCH();
      };
      const std::string check = buffers.check(s, st, [&] { op(0); });

      JsonObj params;
      params.integer("blocks", nb).integer("threads", threads).integer("size_bytes", (long long)s)
          .integer("sm_count", sms);
      JsonObj o = copy_record("sm_copy", params, s);
      if (emit_failed(o, check, failures)) continue;
      Timing t = time_op(st, op, cfg);
      add_timing(o, t);
      const double gbps = s / t.med / 1e9;
      o.num("gbps", gbps).num("traffic_gbps", 2 * gbps).num("gbps_per_block", gbps / nb).str("check", "ok");
      emit(o);
    }
  }
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return failures ? 2 : 0;
}
