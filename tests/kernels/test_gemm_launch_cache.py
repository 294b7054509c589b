"""kernels/gemm/launch_cache.cuh, the GEMM's per-thread store of recent calls' kernel
parameters (gemm_host.cuh launches a stored entry when a call repeats one's arguments): a hit
only for exactly the same arguments, round-robin replacement, drop. Plain host C++, compiled
here with nvcc (as host code, no GPU needed) and run; skipped when nvcc is not found."""
import subprocess

import pytest

from codegen.build import find_nvcc
from hwmodels.resources import kernels_dir

NVCC = find_nvcc()

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc not found: the host check of the GEMM's "
                                            "launch cache cannot be compiled"),
]

PROGRAM = r"""
#include <cstdio>
#include "gemm/launch_cache.cuh"
using namespace pk::gemm;
static int a[4];
static launch_key key(int i, int M) {
  return launch_key{&a[0], &a[1], &a[2 + (i & 1)], M, 256, 64, 0, 0, 0, 0, 0};
}
int main() {
  launch_cache<int, 3> c;
  launch_key k = key(0, 128);
  std::printf("empty %d\n", c.find(k) == nullptr);
  c.put(k, 7);
  std::printf("hit %d\n", *c.find(k));
  launch_key other = k;
  other.device = 1;  std::printf("device %d\n", c.find(other) == nullptr);
  other = k; other.C = &a[3];  std::printf("pointer %d\n", c.find(other) == nullptr);
  other = k; other.group_m = 8;  std::printf("band %d\n", c.find(other) == nullptr);
  other = k; other.flags = 1;  std::printf("flags %d\n", c.find(other) == nullptr);
  c.put(k, 8);  // same key: replaced in place, no slot used
  c.put(key(0, 129), 9);
  c.put(key(0, 130), 10);
  std::printf("kept %d %d %d\n", *c.find(k), *c.find(key(0, 129)), *c.find(key(0, 130)));
  c.put(key(0, 131), 11);  // the fourth key evicts the oldest
  std::printf("evicted %d then %d\n", c.find(k) == nullptr, *c.find(key(0, 131)));
  c.drop(key(0, 130));
  std::printf("dropped %d kept %d\n", c.find(key(0, 130)) == nullptr, *c.find(key(0, 129)));
  return 0;
}
"""

EXPECTED = """empty 1
hit 7
device 1
pointer 1
band 1
flags 1
kept 8 9 10
evicted 1 then 11
dropped 1 kept 9
"""


def test_launch_cache_hits_only_identical_arguments(tmp_path):
    src = tmp_path / "cache_check.cu"
    src.write_text(PROGRAM)
    exe = tmp_path / "cache_check"
    subprocess.run([NVCC, "-std=c++17", "-I", str(kernels_dir()), "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out == EXPECTED
