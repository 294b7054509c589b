// pk/pk.cuh: umbrella include for the pk multi-GPU primitives (Hopper, sm_90a first).
//
//   common.cuh       error record, spin context, qualifiers
//   pgl.cuh          parallel global layout (per-rank pointers, rank, world) and flag layout
//   sync.cuh         signal / wait / barrier: release/acquire at system scope, monotonic epochs,
//                    clock64() deadlines that record which rank waited on which flag
//   tma.cuh          bulk and tensor-map TMA copies to/from peers, bulk reduce-add (f32, bf16),
//                    mbarriers, completion and the proxy fence required before signalling
//   ldst.cuh         register-path peer copy / add / atomic add, 16-byte vectors, any size
//   multimem.cuh     NVLink-multicast wrappers, compiled only with -DPK_ENABLE_MULTIMEM=1
//   copy_engine.cuh  host-issued copy-engine transfers (host code)
//   host.cuh         error checking, error-record decoding, co-resident cooperative launch,
//                    virtual-rank allocation helpers (host code)
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/include ...
#pragma once

#include "common.cuh"
#include "pgl.cuh"
#include "sync.cuh"
#include "tma.cuh"
#include "ldst.cuh"
#include "multimem.cuh"
#include "host.cuh"
#include "copy_engine.cuh"
