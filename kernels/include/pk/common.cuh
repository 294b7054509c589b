// pk/common.cuh: shared definitions for the pk primitives.
//
// Provides
//   * PK_HD / PK_DEV: inline qualifiers for host+device and device-only helpers;
//   * pk::error_record: the device-side record of the first spin that ran past its deadline,
//     and the error codes stored in it;
//   * pk::spin_ctx: where a spinning thread reports a timeout and how long it may spin;
//   * PK_DEFAULT_TIMEOUT_CYCLES: the default spin deadline, in clock64() cycles.
//
// Ordering notes
//   The record is claimed with atomicCAS on `code`, so exactly one failure (the first to
//   claim it) is kept; the other fields are written by the claiming thread afterwards and are
//   only read by the host once the kernel has finished, so they need no ordering of their own.
//   Other spinning threads poll `code` (relaxed) to abandon their own waits early once any
//   rank has failed; that poll is a hint, never used to order data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#define PK_HD __host__ __device__ __forceinline__
#define PK_DEV __device__ __forceinline__

// Deadline of every spin, in SM cycles as counted by clock64(). At the H200's ~1.98 GHz
// boost clock 2^34 cycles is about 8.7 s; no healthy wait in these kernels comes close.
#ifndef PK_DEFAULT_TIMEOUT_CYCLES
#define PK_DEFAULT_TIMEOUT_CYCLES (1LL << 34)
#endif

namespace pk {

enum error_code : int {
  PK_OK = 0,
  PK_ERR_FLAG_TIMEOUT = 1,  // wait() on a flag/barrier counter passed its deadline
  PK_ERR_MBAR_TIMEOUT = 2,  // an mbarrier phase (TMA load completion) never arrived
  PK_ERR_STALE_TABLE = 3,   // a device table (peer pointers, tensor maps) built for other arguments
  PK_ERR_BAD_SHAPE = 4,     // a call the host should have refused reached the device
};

// One per process (one per launch in practice). Zero it before the launch.
struct error_record {
  int code;          // error_code; 0 while nothing has failed
  int rank;          // rank of the thread that timed out
  int peer;          // rank it was waiting for (-1 when not attributable to one peer)
  int flag_index;    // index of the flag in the waiting rank's flag array (-1 for mbarriers)
  unsigned expected; // value (or mbarrier parity) it waited for
  unsigned seen;     // last value it read
};

// What a spinning thread needs besides the address it spins on.
struct spin_ctx {
  error_record* err;        // may be nullptr: then timeouts are silent (the wait still returns)
  long long timeout_cycles; // deadline, relative to the start of each wait

  PK_HD static spin_ctx make(error_record* e, long long cycles = PK_DEFAULT_TIMEOUT_CYCLES) {
    spin_ctx c;
    c.err = e;
    c.timeout_cycles = cycles;
    return c;
  }
};

#ifdef __CUDACC__
// Claim the record for this failure unless another thread already did.
PK_DEV void record_error(error_record* e, int code, int rank, int peer, int flag_index,
                         unsigned expected, unsigned seen) {
  if (e == nullptr) return;
  if (atomicCAS(&e->code, PK_OK, code) == PK_OK) {
    e->rank = rank;
    e->peer = peer;
    e->flag_index = flag_index;
    e->expected = expected;
    e->seen = seen;
    __threadfence_system();
  }
}

// True once any thread has recorded a failure; spinning threads use it to give up early.
PK_DEV bool error_raised(const error_record* e) {
  if (e == nullptr) return false;
  int c;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];"
               : "=r"(c)
               : "l"(__cvta_generic_to_global(&e->code))
               : "memory");
  return c != PK_OK;
}
#endif

}  // namespace pk
