// launch_latency.cu -- kernel launch overhead.
//
// Kernel: tick_kernel, where thread 0 of block 0 does `*counter += 1` and all
// other threads do nothing (an "empty" kernel whose launches can be counted).
// Modes, for grids (1 x 32), (SMs x 128), (8 x SMs x 128):
//   gpu_back_to_back  async launches on one stream, CUDA events around batches
//                     of launches: GPU time per launch (launch throughput);
//   host_enqueue      host wall time of the same launch loop / launches (the
//                     CPU cost of one cudaLaunchKernel, queue not full);
//   launch_sync       host wall time of (launch; cudaStreamSynchronize), one
//                     sample per iteration: the round-trip latency;
//   graph_100         CUDA graph of 100 tick nodes, replayed back to back,
//                     events: time per replay; "time_per_node_s" = / 100;
//   graph_launch_sync host wall time of (cudaGraphLaunch; synchronize);
//   memcpy_enqueue    host wall time of one 4 KiB device-to-device cudaMemcpyAsync
//                     (queue not full), and
//   event_enqueue     of one cudaEventRecord + cudaStreamWaitEvent on another stream:
//                     the host calls a copy-engine collective makes per copy and
//                     per cross-stream dependency (not per grid: blocks = 0);
//   behind_write      GPU time between two events around one launch enqueued behind a
//                     256 MiB cudaMemsetAsync (the host is far ahead, as when a caller
//                     times a kernel after flushing the L2), for the launch shapes of the
//                     generated collectives ("shape": plain, smem_128k, param_4k,
//                     coop_smem_128k), "touch" (512 threads, each block copying 512 B),
//                     plain, param_4k and touch on 4 to 2 x SMs blocks, and none (the
//                     two events alone);
//   ce_burst          (records with "bench": "ce_burst") GPU time of K streams x N
//                     device-to-device cudaMemcpyAsync of B bytes each, forked from one
//                     stream by events and joined back, all enqueued behind a ~2 ms spin
//                     kernel so that the host has issued every copy before the first event
//                     fires: what the GPU spends per copy once the calls are queued, as in a
//                     copy-engine collective (K = 1, 2, 4, 8; N = 1, 2, 4, 8; B = 4 KiB,
//                     256 KiB and 2 MiB; every copy has its own source and destination);
//                     "order": "ring" (4 KiB): N rounds, in each stream k first waits for
//                     the event stream k - 1 recorded after its previous round, then copies
//                     (and with "kernels": 1 launches a one-block 512-thread kernel), then
//                     records its own event: the chain of a copy-engine ring's phases;
//                     "order": "all" (4 KiB): the same rounds, but stream k waits for the
//                     events of every other stream, as the phases of a copy-engine one-shot
//                     or two-shot all-reduce wait for all ranks (entry.cuh, kCeSync all).
// Check: the counter must equal the number of ticks enqueued (before timing
// on 10 launches, and after each mode, so every timed launch really ran).
// Usage: launch_latency [--quick]
#include <chrono>
#include "common.cuh"

__global__ void tick_kernel(unsigned* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter += 1;
}

// The launch shapes of the generated collectives (kernels/collectives/entry.cuh): TMA kernels
// with 256 threads and 4 x 32 KiB of dynamic shared memory, register kernels with 512
// threads, a kernel parameter block of a few KiB (every rank's pointers), and a cooperative
// launch where ranks spin on each other. Thread 0 of block 0 ticks, as tick_kernel.
struct big_param {
  unsigned char b[4096];
};
__global__ void tick_smem_kernel(unsigned* counter) {
  extern __shared__ unsigned char smem[];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    smem[0] = 1;
    *counter += smem[0];
  }
}
__global__ void tick_param_kernel(unsigned* counter, const __grid_constant__ big_param p) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter += 1u + (p.b[4095] & 0u);
}

// Warp 0 of every block copies 512 bytes of a 4 KiB buffer (block b the (b mod 8)-th piece):
// a launch whose blocks each touch memory, as a generated collective's smallest move does.
__global__ void touch_kernel(unsigned* counter, const uint4* src, uint4* dst) {
  if (threadIdx.x < 32) {
    const int i = (blockIdx.x % 8) * 32 + threadIdx.x;
    dst[i] = src[i];
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(counter, 1u);  // kernels on several streams
}

// Spins until `cycles` clock cycles have passed: a GPU lead the host's calls queue behind.
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

using Clock = std::chrono::steady_clock;
static double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Ctx {
  cudaStream_t st;
  unsigned* counter;
  unsigned long long expected = 0;
  // Resets the counter, returns "ok" or a failure text for the ticks since.
  std::string verify_and_reset() {
    unsigned got = 0;
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost));
    CHECK(cudaMemsetAsync(counter, 0, sizeof got, st));  // on st: ordered before the next launches
    CHECK(cudaStreamSynchronize(st));
    std::string r = "ok";
    if (got != (unsigned)expected)
      r = "FAIL: counter " + std::to_string(got) + " != launches " + std::to_string(expected);
    expected = 0;
    return r;
  }
};

static void emit_point(const char* mode, int blocks, int threads, const std::vector<double>& v, int reps,
                       const std::string& check, double per_node_div = 0) {
  JsonObj params;
  params.str("mode", mode).integer("blocks", blocks).integer("threads", threads);
  JsonObj o;
  add_samples(o.str("bench", "launch_latency").obj("params", params), v, reps);
  if (per_node_div > 0) o.num("time_per_node_s", quantile(v, 0.5) / per_node_div);
  o.str("check", check);
  emit(o);
}

int main(int argc, char** argv) {
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("launch_latency");
  const int sms = sm_count();
  Ctx c;
  CHECK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&c.counter, sizeof(unsigned)));
  CHECK(cudaMemset(c.counter, 0, sizeof(unsigned)));
  CHECK(cudaDeviceSynchronize());
  const int n_sync = quick ? 300 : 2000, batch = 256, n_batches = quick ? 10 : 30, graph_nodes = 100;
  int failures = 0;

  const int grids[3][2] = {{1, 32}, {sms, 128}, {8 * sms, 128}};
  for (const auto& g : grids) {
    const int blocks = g[0], threads = g[1];
    auto launch = [&]() { tick_kernel<<<blocks, threads, 0, c.st>>>(c.counter); };
    // ---- check before timing
    for (int i = 0; i < 10; ++i) launch();
    CHECK_LAUNCH();
    c.expected += 10;
    std::string check = c.verify_and_reset();
    if (check != "ok") {
      ++failures;
      emit_point("gpu_back_to_back", blocks, threads, {}, 0, check);
      continue;
    }
    // ---- gpu_back_to_back (events, batched) and host_enqueue (wall clock)
    std::vector<double> host_per_launch;
    TimeCfg cfg;
    cfg.target_sample_s = 1e-3;
    cfg.budget_s = quick ? 0.02 : 0.06;
    Timing t = time_op(c.st, [&](long long) { launch(); ++c.expected; }, cfg);
    CHECK_LAUNCH();
    check = c.verify_and_reset();
    {
      JsonObj params;
      params.str("mode", "gpu_back_to_back").integer("blocks", blocks).integer("threads", threads);
      JsonObj o;
      o.str("bench", "launch_latency").obj("params", params);
      add_timing(o, t).str("check", check);
      emit(o);
    }
    failures += check != "ok";
    for (int b = 0; b < n_batches; ++b) {
      CHECK(cudaStreamSynchronize(c.st));
      auto t0 = Clock::now();
      for (int i = 0; i < batch; ++i) launch();
      auto t1 = Clock::now();
      CHECK_LAUNCH();
      c.expected += batch;
      host_per_launch.push_back(secs(t0, t1) / batch);
    }
    check = c.verify_and_reset();
    failures += check != "ok";
    emit_point("host_enqueue", blocks, threads, host_per_launch, batch, check);

    // ---- launch_sync
    std::vector<double> ls;
    for (int i = 0; i < n_sync; ++i) {
      auto t0 = Clock::now();
      launch();
      CHECK(cudaStreamSynchronize(c.st));
      ls.push_back(secs(t0, Clock::now()));
    }
    CHECK_LAUNCH();
    c.expected += n_sync;
    check = c.verify_and_reset();
    failures += check != "ok";
    emit_point("launch_sync", blocks, threads, ls, 1, check);

    // ---- graph of 100 nodes
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(c.st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < graph_nodes; ++i) launch();
    CHECK(cudaStreamEndCapture(c.st, &graph));
    CHECK_LAUNCH();
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, c.st));
    c.expected += graph_nodes;
    check = c.verify_and_reset();  // check before timing the graph
    if (check == "ok") {
      TimeCfg gcfg;
      gcfg.target_sample_s = 2e-3;
      gcfg.budget_s = quick ? 0.02 : 0.06;
      Timing gt = time_op(c.st, [&](long long) { CHECK(cudaGraphLaunch(exec, c.st)); c.expected += graph_nodes; },
                          gcfg);
      check = c.verify_and_reset();
      JsonObj params;
      params.str("mode", "graph_100").integer("blocks", blocks).integer("threads", threads)
          .integer("nodes", graph_nodes);
      JsonObj o;
      o.str("bench", "launch_latency").obj("params", params);
      add_timing(o, gt).num("time_per_node_s", gt.med / graph_nodes).str("check", check);
      emit(o);
      failures += check != "ok";

      std::vector<double> gs;
      for (int i = 0; i < n_sync / 4; ++i) {
        auto t0 = Clock::now();
        CHECK(cudaGraphLaunch(exec, c.st));
        CHECK(cudaStreamSynchronize(c.st));
        gs.push_back(secs(t0, Clock::now()));
      }
      c.expected += (unsigned long long)graph_nodes * (n_sync / 4);
      check = c.verify_and_reset();
      failures += check != "ok";
      emit_point("graph_launch_sync", blocks, threads, gs, 1, check, graph_nodes);
    } else {
      ++failures;
      emit_point("graph_100", blocks, threads, {}, 0, check);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  // ---- host cost of the calls a copy-engine collective makes per copy: a 4 KiB
  // device-to-device cudaMemcpyAsync, and an event record + a wait on it by another stream
  {
    cudaStream_t other;
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    unsigned char *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, 4096));
    CHECK(cudaMalloc(&b, 4096));
    CHECK(cudaMemset(a, 0x5A, 4096));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::vector<double> copy_s, event_s;
    for (int rep = 0; rep < n_batches; ++rep) {
      CHECK(cudaDeviceSynchronize());
      auto t0 = Clock::now();
      for (int i = 0; i < batch / 4; ++i) CHECK(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, c.st));
      auto t1 = Clock::now();
      copy_s.push_back(secs(t0, t1) / (batch / 4));
      CHECK(cudaDeviceSynchronize());
      t0 = Clock::now();
      for (int i = 0; i < batch / 4; ++i) {
        CHECK(cudaEventRecord(ev, c.st));
        CHECK(cudaStreamWaitEvent(other, ev, 0));
      }
      t1 = Clock::now();
      event_s.push_back(secs(t0, t1) / (batch / 4));
    }
    CHECK(cudaDeviceSynchronize());
    unsigned char got[4096];
    CHECK(cudaMemcpy(got, b, 4096, cudaMemcpyDeviceToHost));
    std::string check = "ok";
    for (int i = 0; i < 4096; ++i)
      if (got[i] != 0x5A) { check = "FAIL: the copied bytes differ"; break; }
    failures += check != "ok";
    emit_point("memcpy_enqueue", 0, 0, copy_s, batch / 4, check);
    emit_point("event_enqueue", 0, 0, event_s, batch / 4, check);
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaStreamDestroy(other));
  }
  // ---- behind_write: one launch behind a 256 MiB write, events around the launch alone
  {
    const size_t flush_bytes = 256ull << 20;
    const int smem = 4 * 32 * 1024 + 128;
    CHECK(cudaFuncSetAttribute(tick_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    void* flush = nullptr;
    CHECK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    big_param bp{};
    uint4 *tsrc = nullptr, *tdst = nullptr;
    CHECK(cudaMalloc(&tsrc, 4096));
    CHECK(cudaMalloc(&tdst, 4096));
    CHECK(cudaMemset(tsrc, 1, 4096));
    struct Shape { const char* name; int blocks, threads; };
    // plain, param_4k and touch on 4 to 2 x SMs blocks (the grid's start as blocks are added);
    // the 128 KiB shared-memory shapes fit one block per SM.
    std::vector<Shape> shapes = {{"none", 0, 0}, {"smem_128k", sms, 256}, {"coop_smem_128k", sms, 256}};
    for (int blocks : {4, sms / 4, sms / 2, sms, 2 * sms}) {
      shapes.push_back({"plain", blocks, 256});
      shapes.push_back({"param_4k", blocks, 512});
      shapes.push_back({"touch", blocks, 512});
    }
    const int reps = quick ? 20 : 100;
    for (const Shape& sh : shapes) {
      const std::string name = sh.name;
      auto launch = [&]() {
        if (name == "plain") tick_kernel<<<sh.blocks, sh.threads, 0, c.st>>>(c.counter);
        else if (name == "smem_128k") tick_smem_kernel<<<sh.blocks, sh.threads, smem, c.st>>>(c.counter);
        else if (name == "param_4k") tick_param_kernel<<<sh.blocks, sh.threads, 0, c.st>>>(c.counter, bp);
        else if (name == "touch") touch_kernel<<<sh.blocks, sh.threads, 0, c.st>>>(c.counter, tsrc, tdst);
        else if (name == "coop_smem_128k") {
          void* args[] = {&c.counter};
          CHECK(cudaLaunchCooperativeKernel((const void*)tick_smem_kernel, dim3(sh.blocks), dim3(sh.threads),
                                            args, smem, c.st));
        } else return;
        ++c.expected;
      };
      launch();  // warm-up (module, shared-memory configuration)
      std::vector<double> v;
      for (int i = 0; i < reps; ++i) {
        CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, c.st));
        CHECK(cudaEventRecord(e0, c.st));
        launch();
        CHECK(cudaEventRecord(e1, c.st));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms * 1e-3);
      }
      CHECK_LAUNCH();
      const std::string check = c.verify_and_reset();
      failures += check != "ok";
      JsonObj params;
      params.str("mode", "behind_write").str("shape", sh.name).integer("blocks", sh.blocks)
          .integer("threads", sh.threads);
      JsonObj o;
      add_samples(o.str("bench", "launch_latency").obj("params", params), v).str("check", check);
      emit(o);
    }
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaFree(flush));
    CHECK(cudaFree(tsrc));
    CHECK(cudaFree(tdst));
  }
  // ---- ce_burst: K streams x N copies queued behind a spin, GPU time from fork to join
  {
    const int max_k = 8, max_n = 8;
    const size_t max_b = 2 * 1024 * 1024;
    unsigned char *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, (size_t)max_k * max_n * max_b));
    CHECK(cudaMalloc(&dst, (size_t)max_k * max_n * max_b));
    CHECK(cudaMemset(src, 0x3C, (size_t)max_k * max_n * max_b));
    std::vector<cudaStream_t> streams(max_k);
    std::vector<cudaEvent_t> done(max_k), round_ev((size_t)max_k * max_n);
    for (int k = 0; k < max_k; ++k) {
      CHECK(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking));
      CHECK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    }
    for (auto& e : round_ev) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    uint4 *ksrc = nullptr, *kdst = nullptr;  // the ring rounds' one-block kernel's buffers
    CHECK(cudaMalloc(&ksrc, 4096));
    CHECK(cudaMalloc(&kdst, 4096));
    CHECK(cudaMemset(ksrc, 1, 4096));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const int reps = quick ? 10 : 30;
    // variant 0: the fork (every size); 1: ring rounds of copies; 2: ring rounds of a copy
    // and a kernel; 3: rounds in which every stream waits for all the others (4 KiB)
    for (int variant = 0; variant < 4; ++variant)
    for (size_t bytes : {(size_t)4096, (size_t)256 * 1024, max_b}) {
      if (variant && bytes != 4096) continue;
      const bool ring = variant > 0, kernels = variant == 2, all = variant == 3;
      for (int k : {1, 2, 4, 8}) {
        for (int n : {1, 2, 4, 8}) {
          auto burst = [&]() {
            CHECK(cudaEventRecord(e0, c.st));
            for (int s = 0; s < k; ++s) CHECK(cudaStreamWaitEvent(streams[s], e0, 0));
            if (ring) {
              for (int i = 0; i < n; ++i)
                for (int s = 0; s < k; ++s) {
                  for (int q = 1; i > 0 && q < k && (all || q == 1); ++q)  // q = 1: the previous stream
                    CHECK(cudaStreamWaitEvent(streams[s], round_ev[(size_t)((s + k - q) % k) * max_n + i - 1], 0));
                  const size_t at = ((size_t)s * max_n + i) * max_b;
                  CHECK(cudaMemcpyAsync(dst + at, src + at, bytes, cudaMemcpyDeviceToDevice, streams[s]));
                  if (kernels) {
                    touch_kernel<<<1, 512, 0, streams[s]>>>(c.counter, ksrc, kdst);
                    ++c.expected;
                  }
                  CHECK(cudaEventRecord(round_ev[(size_t)s * max_n + i], streams[s]));
                }
            } else {
              for (int s = 0; s < k; ++s)
                for (int i = 0; i < n; ++i) {
                  const size_t at = ((size_t)s * max_n + i) * max_b;
                  CHECK(cudaMemcpyAsync(dst + at, src + at, bytes, cudaMemcpyDeviceToDevice, streams[s]));
                }
            }
            for (int s = 0; s < k; ++s) {
              CHECK(cudaEventRecord(done[s], streams[s]));
              CHECK(cudaStreamWaitEvent(c.st, done[s], 0));
            }
            CHECK(cudaEventRecord(e1, c.st));
          };
          burst();  // warm-up
          CHECK(cudaStreamSynchronize(c.st));
          std::vector<double> v;
          for (int r = 0; r < reps; ++r) {
            CHECK(cudaMemsetAsync(dst, 0, (size_t)max_k * max_n * max_b, c.st));
            spin_kernel<<<1, 1, 0, c.st>>>(4000000);  // about 2 ms at 1.98 GHz
            CHECK_LAUNCH();
            burst();
            CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            v.push_back(ms * 1e-3);
          }
          // Check: every copied byte arrived (the last burst), nothing else was written.
          std::vector<unsigned char> got((size_t)max_k * max_n * max_b);
          CHECK(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
          std::string check = "ok";
          for (int s = 0; s < max_k && check == "ok"; ++s)
            for (int i = 0; i < max_n && check == "ok"; ++i)
              for (size_t j = 0; j < max_b; j += 512) {
                const bool copied = s < k && i < n && j < bytes;
                if (got[((size_t)s * max_n + i) * max_b + j] != (copied ? 0x3C : 0)) {
                  check = "FAIL: copy " + std::to_string(s) + "/" + std::to_string(i) + " byte " + std::to_string(j);
                  break;
                }
              }
          if (kernels) {
            const std::string ticks = c.verify_and_reset();
            if (check == "ok") check = ticks;
          }
          failures += check != "ok";
          JsonObj params;
          params.str("mode", "ce_burst").integer("streams", k).integer("copies_per_stream", n)
              .integer("copy_bytes", (long long)bytes);
          if (ring) params.str("order", all ? "all" : "ring").integer("kernels", kernels ? 1 : 0);
          JsonObj o;
          o.str("bench", "ce_burst").obj("params", params).num("bytes", (double)bytes * k * n);
          add_samples(o, v).str("check", check);
          emit(o);
        }
      }
    }
    for (int k = 0; k < max_k; ++k) {
      CHECK(cudaStreamDestroy(streams[k]));
      CHECK(cudaEventDestroy(done[k]));
    }
    for (auto& e : round_ev) CHECK(cudaEventDestroy(e));
    CHECK(cudaFree(ksrc));
    CHECK(cudaFree(kdst));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
  }
  CHECK(cudaFree(c.counter));
  CHECK(cudaStreamDestroy(c.st));
  return failures ? 2 : 0;
}
