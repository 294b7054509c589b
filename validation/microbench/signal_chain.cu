// signal_chain.cu -- the hand-off between two phases of a generated collective, as a
// primitive: a peer copy, then a flag, then the next copy.
//
// What: G groups ("ranks") of B blocks on one GPU, as the virtual ranks of a generated
// collective. In step s, block b of group g copies its piece (pkc::block_piece of `bytes`)
// of what group g holds after step s - 1 into group g + 1's buffer, through registers or TMA
// (pkc::reg_copy / pkc::tma_copy, the collectives' own routines and launch constants). Between
// steps the blocks synchronise as the generated kernels do (kernels/collectives/collective.cuh):
//   "ring":    block b signals block b of group g + 1 (__syncthreads, red.release.sys) and
//              waits for block b of group g - 1 (ld.acquire.sys spin), as ring_signal /
//              ring_wait;
//   "barrier": every block of every group meets (pk::barrier, fence + relaxed reds on every
//              group, a wait per group), as grid_barrier between a two-shot's phases.
// The last step signals nobody, as a generated kernel's last phase. One cooperative launch of
// S steps, timed alone behind a 256 MiB write (as `pksim validate` times a collective), median
// of the calls; S in {1, 2, 4, 8}: the slope over S is the price of a hand-off plus a move of
// data the previous step left in L2, the intercept a launch and a first move from HBM.
// Counters only grow (epochs across calls), so no call zeroes anything inside its timing.
// Check (every configuration, after its timed calls): after S steps group g holds group
// g - S's input, bit for bit.
// Keys: "bytes" = what one group moves per step; "steps" = S.
// Usage: signal_chain [--quick]
#include "moves_check.cuh"
#include "pk/host.cuh"

constexpr int kRingBase = 16;  // counters [0, 8): the barrier's; [16, 16 + B): the ring's

// Buffer of group g: slots 0..S of n elements each; slot 0 is its input, slot s + 1 what
// arrived in step s.
template <class C>
__global__ void __launch_bounds__(C::kThreads) chain_kernel(const __grid_constant__ pk::flags<8> f,
                                                    const __grid_constant__ pkc::ptrs<bf16> buf,
                                                    size_t n, int steps, int barrier_sync,
                                                    unsigned calls_before) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bars[C::kStages];
  const int groups = buf.n;
  const int per = static_cast<int>(gridDim.x) / groups;
  const int g = static_cast<int>(blockIdx.x) / per, b = static_cast<int>(blockIdx.x) % per;
  const int next = (g + 1) % groups;
  pkc::block_smem sm{};
  if constexpr (C::kMech == pkc::mech::tma) sm = stages<C>(smem_raw, bars);
  const pkc::span piece = pkc::block_piece(n, per, b, sizeof(bf16));
  const unsigned handoffs = static_cast<unsigned>(steps - 1);
  for (int s = 0; s < steps; ++s) {
    if (s > 0) {
      const unsigned epoch = calls_before * handoffs + static_cast<unsigned>(s);
      bool ok;
      if (barrier_sync) {
        ok = pk::barrier(f, g, 0, epoch, static_cast<unsigned>(per));
      } else {
        int mine = 1;
        if (threadIdx.x == 0)
          mine = pk::wait(f, g, kRingBase + b, epoch, (g + groups - 1) % groups) ? 1 : 0;
        ok = __syncthreads_and(mine) != 0;
      }
      if (!ok) return;
      if constexpr (C::kMech == pkc::mech::tma) {
        if (threadIdx.x == 0) pk::tma::acquire_for_async_reads();
      }
    }
    const bf16* src = buf.p[g] + static_cast<size_t>(s) * n + piece.lo;
    bf16* dst = buf.p[next] + static_cast<size_t>(s + 1) * n + piece.lo;
    if constexpr (C::kMech == pkc::mech::tma) {
      if (!pkc::tma_copy<C>(pkc::one(dst), src, piece.size(), sm, f.spin, g)) return;
    } else {
      pkc::reg_copy(pkc::one(dst), src, piece.size(), pk::ldst::block_group());
    }
    if (s + 1 < steps && !barrier_sync) {
      __syncthreads();  // every thread's writes before the leader's release
      if (threadIdx.x == 0) pk::signal(f, next, kRingBase + b, 1u);
    }
  }
}

// Counts elements of slot `steps` of group g that differ from group g - steps's input.
__global__ void chain_check_kernel(pkc::ptrs<bf16> buf, size_t n, int steps, unsigned long long* bad) {
  const int groups = buf.n;
  unsigned long long local = 0;
  for (int g = 0; g < groups; ++g) {
    const unsigned short* got = reinterpret_cast<const unsigned short*>(buf.p[g] + static_cast<size_t>(steps) * n);
    const int from = ((g - steps) % groups + groups) % groups;
    const unsigned short* want = reinterpret_cast<const unsigned short*>(buf.p[from]);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
      local += got[i] != want[i];
  }
  if (local) atomicAdd(bad, local);
}

template <class C>
void launch_chain(const pk::flags<8>& f, const pkc::ptrs<bf16>& buf, size_t n, int steps, int barrier_sync,
                  unsigned calls, int blocks, cudaStream_t st) {
  pk::launch_cooperative(chain_kernel<C>, dim3(blocks), dim3(C::kThreads), C::kSmemBytes, st, f, buf, n, steps,
                         barrier_sync, calls);
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // before any CUDA call
  const bool quick = has_flag(argc, argv, "--quick");
  emit_device_record("signal_chain");
  using tma_cfg = move_config<pkc::mech::tma>;
  using reg_cfg = move_config<pkc::mech::reg>;
  CHECK(cudaFuncSetAttribute(chain_kernel<tma_cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tma_cfg::kSmemBytes));
  const int sms = sm_count();
  const size_t flush_bytes = 256 * MiB;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  const int max_steps = 8;
  const size_t max_bytes = quick ? 64 * KiB : MiB;
  std::vector<bf16*> bufs(8);
  for (int g = 0; g < 8; ++g) {
    CHECK(cudaMalloc(&bufs[g], (max_steps + 1) * max_bytes));
    fill_bf16_kernel<<<sms * 4, 512>>>(bufs[g], max_bytes / sizeof(bf16), 300 + g);
    CHECK_LAUNCH();
  }
  pk::error_record* err = new_error_record();
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int reps = quick ? 7 : 25;
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{512, 64 * KiB}
                                          : std::vector<size_t>{512, 4 * KiB, 64 * KiB, MiB};
  const std::vector<int> step_list = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4, 8};
  int failures = 0;
  for (int tma = 0; tma < 2; ++tma)
    for (int barrier_sync = 0; barrier_sync < 2; ++barrier_sync)
      for (int groups : {2, 4, 8})
        for (int per : {4, 16})
          for (size_t bytes : sizes)
            for (int steps : step_list) {
              // Fresh counters for every configuration: calls count epochs from 0.
              pk::flags<8> f = pk::alloc_virtual_flags<8>(groups, kRingBase + per, err, 1ll << 31);
              pkc::ptrs<bf16> buf{};
              for (int g = 0; g < groups; ++g) buf.add(bufs[g]);
              const size_t n = bytes / sizeof(bf16);
              unsigned calls = 0;
              auto go = [&] {
                if (tma) launch_chain<tma_cfg>(f, buf, n, steps, barrier_sync, calls, groups * per, st);
                else launch_chain<reg_cfg>(f, buf, n, steps, barrier_sync, calls, groups * per, st);
                ++calls;
              };
              for (int w = 0; w < 3; ++w) go();
              const std::vector<double> times = times_behind_write(st, go, flush, flush_bytes, reps);
              CHECK(cudaStreamSynchronize(st));
              const std::string check = run_check(err, [&](unsigned long long* bad) {
                chain_check_kernel<<<sms, 512>>>(buf, n, steps, bad);
              });
              pk::free_virtual_flags(f);
              JsonObj params;
              params.str("mechanism", tma ? "tma" : "register").str("sync", barrier_sync ? "barrier" : "ring")
                  .integer("groups", groups).integer("blocks", per).integer("steps", steps)
                  .integer("threads", tma ? tma_cfg::kThreads : reg_cfg::kThreads).str("timing", "behind_write")
                  .str("launch", "cooperative");
              JsonObj o;
              o.str("bench", "signal_chain").obj("params", params).num("bytes", (double)bytes);
              if (check == "ok") add_samples(o, times);
              else ++failures;
              o.str("check", check);
              emit(o);
            }
  for (bf16* p : bufs) CHECK(cudaFree(p));
  CHECK(cudaFree(flush));
  return failures ? 1 : 0;
}
