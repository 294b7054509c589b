// Host check of the intra-SM fused kernels' tile layout (kernels/fused/fused.cuh owner_tiles,
// partition): for each (M, world, BM) it walks the tiles and sub-tiles the GEMM deals
// (pk::gemm: tile rows of BM, two consumers of BM/2 rows) over the virtual M' and applies the
// device functions the epilogues and prologues call (owner_tiles::locate, rows, lo), then
// checks that every output row of every owner is stored exactly once, from the A row that
// produces it, that no tile holds two owners' rows and that M' stays within the bound the
// table is sized for. Prints one line per failure and a summary; exit status 1 on a failure.
// Built and run by tests/kernels/test_fused_tiling.py (nvcc, no GPU needed).
#include <cstdio>
#include <vector>

#include "fused/fused.cuh"

namespace {

int check(int M, int world, int bm) {
  std::vector<int> lo(world + 1), start(world + 1), of(pkf::owner_tiles::tile_rows(M, world, bm));
  std::vector<int4> blk(pkf::partition::blocks(M));
  pkf::partition::make(lo.data(), blk.data(), lo.data(), blk.data(), M, world);
  const pkf::owner_tiles t =
      pkf::owner_tiles::make(start.data(), of.data(), start.data(), of.data(), lo.data(), M, world, bm);
  const int virtual_m = start[world];
  int bad = 0;
  auto fail = [&](const char* what, int a, int b) {
    if (bad++ < 3) std::printf("M %d world %d BM %d: %s (%d, %d)\n", M, world, bm, what, a, b);
  };
  if (virtual_m % bm != 0 || virtual_m > (M + bm - 1) / bm * bm + (world - 1) * bm ||
      virtual_m / bm > static_cast<int>(of.size()))
    fail("virtual M out of its bound", virtual_m, static_cast<int>(of.size()));
  std::vector<int> stored(M, 0);
  const int wg = bm / 2;
  for (int row0 = 0; row0 < virtual_m; row0 += bm) {
    const int2 tile = t.locate(row0);                   // the prologue: owner_rows / load_peer_rows
    const int a_row = t.lo[tile.x] + tile.y;            // gemm-rs: row of the rank's whole A
    if (t.owner(row0 + bm - 1) != tile.x) fail("a tile holds two owners", row0, tile.x);
    for (int c = 0; c < 2; ++c) {
      const int2 at = t.locate(row0 + c * wg);          // the epilogues: store_add_owners / store_shard_rows
      if (at.x != tile.x) fail("a sub-tile's owner is not its tile's", row0 + c * wg, at.x);
      for (int i = 0; i < wg; ++i) {
        const int j = at.y + i;                         // row of owner at.x's output (its map)
        if (j >= t.rows(at.x)) continue;                // dropped by the map: padding
        const int row = lo[at.x] + j;                   // row of the full M x N result
        if (a_row + c * wg + i != row) fail("stored from the wrong A row", row, a_row + c * wg + i);
        ++stored[row];
      }
    }
  }
  for (int r = 0; r < M; ++r)
    if (stored[r] != 1) fail("a row stored other than once", r, stored[r]);
  return bad;
}

}  // namespace

int main() {
  int cases = 0, failed = 0;
  unsigned x = 12345u;  // fixed LCG: the same shapes every run
  auto next = [&x](int n) { x = x * 1664525u + 1013904223u; return static_cast<int>((x >> 8) % n); };
  const int worlds[] = {2, 3, 4, 5, 6, 7, 8, 9, 16, 72, 576};
  for (int bm : {128, 256}) {
    for (int world : worlds) {
      const int fixed[] = {world, world + 1, 63 * world + 1, 64 * world, 1000, 3000, 4096, 8192};
      for (int M : fixed) {
        if (M < world) continue;
        ++cases;
        failed += check(M, world, bm) != 0;
      }
      for (int i = 0; i < 40; ++i) {
        const int M = world + next(16384);
        ++cases;
        failed += check(M, world, bm) != 0;
      }
    }
  }
  std::printf("owner tiles: %d shapes, %d failed\n", cases, failed);
  return failed ? 1 : 0;
}
