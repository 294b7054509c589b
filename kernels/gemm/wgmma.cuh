// gemm/wgmma.cuh: Hopper warpgroup matrix-multiply building blocks (sm_90a only).
//
// Provides (device side, namespace pk::gemm::wg)
//   * smem_desc(addr, lbo, sbo): a wgmma shared-memory matrix descriptor with 128-byte
//     swizzling (bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride
//     byte offset >> 4, 49-51 base offset = 0, 62-63 swizzle mode 1 = 128 B; PTX ISA,
//     "Matrix Descriptor Format");
//   * fence / commit / wait<N>: wgmma.fence, wgmma.commit_group, wgmma.wait_group;
//   * keep(reg): an empty asm that pins an accumulator register in place, so that the
//     compiler never moves an ordinary access of it across an asynchronous wgmma;
//   * mma_m64n128k16 / mma_m64n256k16: one warpgroup-wide wgmma.mma_async, bf16 x bf16 -> f32,
//     A and B from shared memory through descriptors, A K-major, B K-major (TransB = 0) or
//     N-major (TransB = 1); `accumulate` = 0 overwrites D (scale-d predicate), 1 adds to it;
//   * set_max_regs_dec<N> / set_max_regs_inc<N>: setmaxnreg, moving registers between
//     warpgroups (needs a register cap at kernel entry: __launch_bounds__(threads, 1));
//   * named_sync(id, threads): bar.sync on a named barrier (id 0 is __syncthreads').
//
// Layouts the descriptors describe (both written by TMA with CU_TENSOR_MAP_SWIZZLE_128B, every
// buffer 1024-byte aligned, so the base offset field stays 0):
//   K-major operand (A, rows x 64 of bf16): row r at byte r*128, its eight 16-byte chunks
//     permuted by (chunk ^ (r % 8)). Eight-row groups lie 1024 B apart: SBO = 1024; LBO is
//     unused with swizzling (encoded as 1). The k-th 16-wide slice starts 32*k bytes in.
//   N-major operand (B, 64 K-rows x 64 N-columns per 8 KiB box, boxes side by side along N):
//     K-row r of a box at byte r*128, swizzled the same way. LBO = distance between 64-column
//     boxes along N, SBO = distance between 8-row groups along K (1024). The k-th 16-row
//     slice starts 2048*k bytes in (a multiple of 1024, so the swizzle phase is unchanged).
//
// The accumulator fragment of m64nN (per warpgroup thread t, warp w = t / 32, lane l):
//   d[4j + 0..1] = D[16w + l/4    ][8j + 2(l%4) + 0..1]
//   d[4j + 2..3] = D[16w + l/4 + 8][8j + 2(l%4) + 0..1]      for j in 0 .. N/8 - 1.
#pragma once

#include <cstdint>

#include "pk/common.cuh"

namespace pk {
namespace gemm {
namespace wg {

PK_DEV uint64_t smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return d;
}

PK_DEV void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
PK_DEV void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
PK_DEV void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" : : "n"(N) : "memory");
}
PK_DEV void keep(float& r) { asm volatile("" : "+f"(r) : : "memory"); }

template <int N>
PK_DEV void set_max_regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" : : "n"(N));
}
template <int N>
PK_DEV void set_max_regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" : : "n"(N));
}

PK_DEV void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" : : "r"(id), "r"(threads) : "memory");
}

// The operand lists below are written out: inline asm needs one named operand per register.
// D[64 x 128] (+)= A[64 x 16] * B[16 x 128]; 64 fp32 accumulators per thread.
template <int TransB>
PK_DEV void mma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransB));
}

// D[64 x 256] (+)= A[64 x 16] * B[16 x 256]; 128 fp32 accumulators per thread.
template <int TransB>
PK_DEV void mma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransB));
}

// D[64 x N] for N in {128, 256}: dispatch on the fragment size.
template <int N, int TransB>
PK_DEV void mma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(N == 128 || N == 256, "wgmma wrappers exist for N = 128 and N = 256");
  if constexpr (N == 128) {
    mma_m64n128k16<TransB>(d, desc_a, desc_b, accumulate);
  } else {
    mma_m64n256k16<TransB>(d, desc_a, desc_b, accumulate);
  }
}

}  // namespace wg
}  // namespace gemm
}  // namespace pk
