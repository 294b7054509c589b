// hbm_copy.cu -- device-memory copy bandwidth by size, showing the L2 edge.
//
// What: copy S bytes (64 KiB .. 4 GiB, powers of 2) from one device buffer to
// another with
//   engine "sm": copy_int4_kernel, grid = 2 x SM count blocks of 1024 threads,
//                grid-stride, 16-byte loads/stores;
//   engine "ce": cudaMemcpyAsync(device-to-device) -- the driver's D2D path
//                (copy engine; the driver chooses the mechanism).
// Each in two cache regimes:
//   l2 "hot":  the same src/dst pair every op (small S stays L2-resident);
//   l2 "cold": op k uses pair k mod slots, slots = 512 MiB / S, so 1 GiB of
//              other traffic passes between reuses (> 2x any H100/H200 L2).
// Keys: "bytes" = payload (S, bytes copied once), "traffic_bytes" = 2S (read +
// write); "gbps" = payload GB/s (1e9 B/s), "traffic_gbps" = 2S / time.
// Check (before timing, per engine and size): src is hash-random, dst is
// poisoned with 0xFF, one op runs, dst is compared with host-known values on
// the device (all words) and on the host (spot chunks).
// Usage: hbm_copy [--quick]
#include "common.cuh"

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("hbm_copy");
  const int sms = sm_count();
  const uint32_t seed = 0x1234;

  const CopyPair buffers = alloc_copy_pair(quick ? 1 * GiB : 4 * GiB, seed);
  const size_t max_s = buffers.bytes;
  uint32_t *src = buffers.src, *dst = buffers.dst;
  const size_t rot_pool = std::min<size_t>(512 * MiB, max_s);

  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  TimeCfg cfg;
  cfg.budget_s = quick ? 0.02 : 0.05;

  int failures = 0;
  for (size_t s = 64 * KiB; s <= max_s; s *= (quick ? 4 : 2)) {
    for (int engine = 0; engine < 2; ++engine) {
      const char* eng = engine == 0 ? "sm" : "ce";
      auto copy_slot = [&](size_t slot) {
        const char* from = (const char*)src + slot * s;
        char* to = (char*)dst + slot * s;
        if (engine == 0) {
          copy_int4_kernel<<<2 * sms, 1024, 0, st>>>((const int4*)from, (int4*)to, s / 16);
          CHECK_LAUNCH();
        } else {
          CHECK(cudaMemcpyAsync(to, from, s, cudaMemcpyDeviceToDevice, st));
        }
      };
      // ---- check: poison, one op on slot 0, verify.
      const std::string check = buffers.check(s, st, [&] { copy_slot(0); });

      for (int cold = 0; cold < 2; ++cold) {
        const size_t slots = cold ? std::max<size_t>(1, rot_pool / s) : 1;
        JsonObj params;
        params.str("engine", eng).str("l2", cold ? "cold" : "hot").integer("size_bytes", (long long)s)
            .integer("rotation_slots", (long long)slots);
        if (engine == 0) params.integer("blocks", 2 * sms).integer("threads", 1024);
        JsonObj o = copy_record("hbm_copy", params, s);
        if (emit_failed(o, check, failures)) continue;
        Timing t = time_op(st, [&](long long i) { copy_slot((size_t)(i % (long long)slots)); }, cfg);
        add_timing(o, t);
        o.num("gbps", s / t.med / 1e9).num("traffic_gbps", 2.0 * s / t.med / 1e9).str("check", "ok");
        emit(o);
      }
    }
  }
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return failures ? 2 : 0;
}
