// A/B driver: block_moves' own kernels (the .cu included, its main renamed), timed one shape at
// a time with CUDA events around single launches, or block_moves' main ("bm" first argument).
//   one_sum bm [block_moves args]          block_moves itself
//   one_sum time REPS                      TMA sums S->D x blocks at 16 MiB, median us per point
//   one_sum prof S D BLOCKS                5 launches of one TMA sum (for ncu --launch-skip 3)
#define main block_moves_main
#include BM_SOURCE
#undef main
#include <algorithm>
#include <cstring>
int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "bm")) return block_moves_main(argc - 1, argv + 1);
  using tma_cfg = move_config<pkc::mech::tma>;
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tma_cfg::kSmemBytes));
  CHECK(cudaFuncSetAttribute(move_kernel<tma_cfg, true, PKC_SET_SLOTS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tma_cfg::kSmemBytes));
  const size_t big = 16 * MiB, n = big / sizeof(bf16);
  std::vector<bf16*> srcs(8), dsts(8);
  for (int k = 0; k < 8; ++k) {
    CHECK(cudaMalloc(&srcs[k], big)); CHECK(cudaMalloc(&dsts[k], big));
    fill_bf16_kernel<<<528, 512>>>(srcs[k], n, 100 + k);
  }
  pk::error_record* err = new_error_record();
  cudaStream_t st; CHECK(cudaStreamCreate(&st));
  auto bufs = [&](int S, int D) {
    std::pair<pkc::ptrs<bf16>, pkc::cptrs<bf16>> b{};
    for (int k = 0; k < D; ++k) b.first.add(dsts[k]);
    for (int k = 0; k < S; ++k) b.second.add(srcs[k]);
    return b;
  };
  if (argc > 4 && !strcmp(argv[1], "prof")) {
    auto b = bufs(atoi(argv[2]), atoi(argv[3]));
    for (int i = 0; i < 5; ++i) launch<tma_cfg>(b.first, b.second, n, 1, atoi(argv[4]), err, st);
    CHECK(cudaStreamSynchronize(st));
    return 0;
  }
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  const int shapes[][2] = {{2, 1}, {4, 1}, {8, 1}, {8, 8}};
  const int blocks[] = {1, 4, 16, 132};
  cudaEvent_t a, e; CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&e));
  for (auto& sh : shapes)
    for (int bl : blocks) {
      auto b = bufs(sh[0], sh[1]);
      std::vector<float> t;
      for (int i = 0; i < reps + 2; ++i) {
        CHECK(cudaEventRecord(a, st));
        launch<tma_cfg>(b.first, b.second, n, 1, bl, err, st);
        CHECK(cudaEventRecord(e, st));
        CHECK(cudaEventSynchronize(e));
        float ms; CHECK(cudaEventElapsedTime(&ms, a, e));
        if (i >= 2) t.push_back(ms * 1e3f);
      }
      std::sort(t.begin(), t.end());
      printf("{\"sources\": %d, \"dests\": %d, \"blocks\": %d, \"median_us\": %.3f, \"min_us\": %.3f}\n", sh[0], sh[1], bl, t[t.size() / 2], t[0]);
    }
  return exit_status(err, "one_sum");
}
