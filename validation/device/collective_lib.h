// collective_lib.h: what a host program needs to call a generated collective library (a
// `pksim validate --prepare` bundle's lib/*.so) without Python: its entry point, requirements
// and error-record functions, found by dlopen / dlsym through its manifest, and the arguments
// of a call in virtual ranks. Used by validation/device/sanitize_collectives.cpp and
// validation/experiments/harness_gap.cu and two_shot_gap.cu (at commit 7cc519e).
#pragma once

#include <dlfcn.h>

#include <cstring>
#include <string>

#include "collectives/abi.h"

typedef int (*pkc_entry_fn)(const pkc_args*, char*, size_t);
typedef int (*pkc_reqs_fn)(const pkc_args*, pkc_reqs*, char*, size_t);
typedef int (*pkc_err_fn)(const void*, char*, size_t);
typedef int (*pkc_table_fn)(const pkc_args*, void*, size_t, char*, size_t);
typedef const char* (*pkc_manifest_fn)(void);

// A call's arguments for `world` virtual ranks (rank -1: one launch serves them all) over
// `count` elements of `dtype`, `blocks_per_rank` blocks each, every phase (phase_end -1); the
// rest zero for the caller to fill (the host arrays of buffers and flags, the peer table past
// PKC_INLINE_RANKS, device_sync, stream, ...).
inline pkc_args virtual_args(int world, int dtype, unsigned long long count, int blocks_per_rank) {
  pkc_args a;
  std::memset(&a, 0, sizeof(a));
  a.abi_version = PKC_ABI_VERSION;
  a.world = world;
  a.rank = -1;
  a.dtype = dtype;
  a.count = count;
  a.blocks_per_rank = blocks_per_rank;
  a.phase_end = -1;
  return a;
}

// The string value of `key` in a manifest (flat JSON of strings, as codegen writes it).
inline std::string json_field(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\": \"";
  const size_t at = json.find(k);
  if (at == std::string::npos) return "";
  const size_t b = at + k.size();
  return json.substr(b, json.find('"', b) - b);
}

struct collective_lib {
  std::string manifest;
  pkc_entry_fn entry = nullptr;
  pkc_reqs_fn reqs = nullptr;
  pkc_err_fn read_err = nullptr;
  pkc_table_fn table = nullptr;

  // Opens the library at `path`: "" when every function was found, else what went wrong.
  std::string open(const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return std::string("dlopen failed: ") + dlerror();
    auto man = reinterpret_cast<pkc_manifest_fn>(dlsym(h, "pkc_manifest"));
    if (!man) return "missing symbol pkc_manifest";
    manifest = man();
    entry = reinterpret_cast<pkc_entry_fn>(dlsym(h, field("entry").c_str()));
    reqs = reinterpret_cast<pkc_reqs_fn>(dlsym(h, "pkc_requirements"));
    read_err = reinterpret_cast<pkc_err_fn>(dlsym(h, "pkc_read_error"));
    table = reinterpret_cast<pkc_table_fn>(dlsym(h, "pkc_table"));
    if (!entry || !reqs || !read_err || !table) return "missing symbols (" + field("entry") + ")";
    return "";
  }
  std::string field(const char* key) const { return json_field(manifest, key); }
};
