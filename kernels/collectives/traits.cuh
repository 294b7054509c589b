// collectives/traits.cuh: the defaults of an algorithm's static members (collective.cuh, "An
// algorithm"). Every algorithm struct inherits algorithm_defaults, directly or through sm_only
// or rhd_base, and states only what differs; a member it states hides the default.
#pragma once

namespace pkc {

struct algorithm_defaults {
  static constexpr sync_kind kSync = sync_kind::none;    // one phase: nothing to wait for
  static constexpr sync_kind kCeSync = sync_kind::all;   // copy engines: every rank between phases
  PK_HD static size_t in_count(size_t n, int) { return n; }   // elements per rank
  PK_HD static size_t out_count(size_t n, int) { return n; }
  PK_HD static size_t scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static size_t ce_scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int phases(int) { return 1; }
  PK_HD static int ce_phases(int) { return 1; }
  PK_HD static int p2p_flags(int) { return 1; }     // point-to-point counters per block
  PK_HD static int sources(int) { return 2; }       // the most buffers one sum reads
  PK_HD static bool world_ok(int) { return true; }  // any world
};

// Algorithm A without its copy-engine form (the reducing kernels given a reduce op: a copy
// engine cannot apply it; entry.cuh traits); sm_only: for those that have only that form.
template <class A>
struct sm_only_of : A {
  static constexpr sync_kind kCeSync = sync_kind::none;
  PK_HD static size_t ce_scratch_bytes(size_t, int, size_t) { return 0; }
  PK_HD static int ce_phases(int) { return 1; }
  template <class C, class G>
  static void ce_phase(const G&, int, int, const ce_ctx&) {}
};
using sm_only = sm_only_of<algorithm_defaults>;

}  // namespace pkc
