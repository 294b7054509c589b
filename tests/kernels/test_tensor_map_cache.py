"""kernels/include/pk/tensor_map_cache.cuh, the per-thread store of encoded tensor maps that
pk/host.cuh consults before cuTensorMapEncodeTiled (the fused kernels' host path asks for the
same maps on every launch, issue #38): a hit only for exactly the same pointer, data type,
dimensions, stride, box and modes; replacement of a set's oldest way; drop and clear. Plain
host C++, compiled here with nvcc as host code (no GPU) and run; skipped without nvcc."""
import subprocess

import pytest

from codegen.build import find_nvcc
from hwmodels.resources import kernels_dir

NVCC = find_nvcc()

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc not found: the host check of the tensor-map "
                                            "cache cannot be compiled"),
]

PROGRAM = r"""
#include <cstdio>
#include "pk/tensor_map_cache.cuh"
using namespace pk;
static char buf[1 << 12];
static tensor_map_key key(int off, uint64_t rows) {
  tensor_map_key k;
  k.base = buf + off; k.dtype = 9; k.dims[0] = 264; k.dims[1] = rows; k.stride = 528;
  k.box[0] = 64; k.box[1] = 128; k.swizzle = 3; k.l2 = 2; k.oob = 0;
  return k;
}
int main() {
  tensor_map_cache<int, 4, 2> c;
  const tensor_map_key k = key(0, 375);
  std::printf("empty %d\n", c.find(k) == nullptr);
  c.put(k, 7);
  std::printf("hit %d\n", *c.find(k));
  tensor_map_key o = key(0, 375);
  std::printf("copy %d\n", *c.find(o));
  int misses = 0;
  o = k; o.base = buf + 16; misses += c.find(o) == nullptr;
  o = k; o.dtype = 7; misses += c.find(o) == nullptr;
  o = k; o.dims[0] = 272; misses += c.find(o) == nullptr;
  o = k; o.dims[1] = 376; misses += c.find(o) == nullptr;
  o = k; o.stride = 544; misses += c.find(o) == nullptr;
  o = k; o.box[0] = 32; misses += c.find(o) == nullptr;
  o = k; o.box[1] = 64; misses += c.find(o) == nullptr;
  o = k; o.swizzle = 0; misses += c.find(o) == nullptr;
  o = k; o.l2 = 1; misses += c.find(o) == nullptr;
  o = k; o.oob = 1; misses += c.find(o) == nullptr;
  std::printf("each field a miss %d of 10\n", misses);
  c.put(k, 8);
  std::printf("replaced %d\n", *c.find(k));
  // fill one set past its two ways: the oldest goes, the others stay
  const int s = c.set_of(k);
  tensor_map_key same_set[3];
  int n = 0;
  for (int r = 1; n < 3 && r < 100000; ++r) {
    tensor_map_key t = key(0, 375 + r);
    if (c.set_of(t) == s) same_set[n++] = t;
  }
  c.put(same_set[0], 10);
  std::printf("two ways %d %d\n", *c.find(k), *c.find(same_set[0]));
  c.put(same_set[1], 11);
  std::printf("oldest out %d, kept %d %d\n", c.find(k) == nullptr, *c.find(same_set[0]),
              *c.find(same_set[1]));
  c.drop(same_set[0]);
  std::printf("dropped %d kept %d\n", c.find(same_set[0]) == nullptr, *c.find(same_set[1]));
  c.clear();
  std::printf("cleared %d\n", c.find(same_set[1]) == nullptr);
  return 0;
}
"""

EXPECTED = """empty 1
hit 7
copy 7
each field a miss 10 of 10
replaced 8
two ways 8 10
oldest out 1, kept 10 11
dropped 1 kept 11
cleared 1
"""


def test_tensor_map_cache_hits_only_identical_arguments(tmp_path):
    src = tmp_path / "map_cache_check.cu"
    src.write_text(PROGRAM)
    exe = tmp_path / "map_cache_check"
    subprocess.run([NVCC, "-std=c++17", "-I", str(kernels_dir() / "include"), "-o", str(exe),
                    str(src)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out == EXPECTED
