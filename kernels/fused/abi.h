/* fused/abi.h: the C interface between a generated fused GEMM + communication library and its
 * caller (validation/run/fused.py mirrors these structs with ctypes and checks their sizes).
 *
 * A generated translation unit exports, with C linkage:
 *   int pk_<op>_<overlap>(const pkf_args* a, char* msg, size_t msg_len);  enqueue one call
 *   int pkf_requirements(const pkf_args* a, pkf_reqs* out, char* msg, size_t msg_len);
 *   int pkf_table(const pkf_args* a, void* host, size_t bytes, char* msg, size_t msg_len);
 *   int pkf_abi_version(void); size_t pkf_args_size(void); size_t pkf_reqs_size(void);
 *   const char* pkf_manifest(void);              JSON: op, overlap, mechanism, entry, tile, key
 *   int pkc_read_error(const void* err, char* msg, size_t msg_len);   after the stream finished
 * Every function returns a pkc_status (collectives/abi.h) and on failure writes one line into
 * msg saying what is wrong.
 *
 * Shapes (local shapes as ParallelKittens states them; every matrix bf16, row-major):
 *   gemm-rs  rank r: A_r [M x K] @ B_r [K x N] -> partial sums reduce-scattered along M: rank r
 *            ends with rows [lo(r), lo(r+1)) of sum_s A_s @ B_s in out[r] [(lo(r+1)-lo(r)) x N],
 *            where lo(r) = floor(r * M / world).
 *   gemm-ar  the same product, all-reduced: out[r] [M x N] on every rank.
 *   ag-gemm  rank r holds a[r] = rows [lo(r), lo(r+1)) of A [M x K]; A is all-gathered and
 *            out[r] [M x N] = A @ B_r (intra-SM: rank r's GEMM loads every a[s] in place, no
 *            gathered copy).
 * Requirements: 2 <= world <= PKF_MAX_RANKS, M >= world, K and N multiples of 8 (16-byte TMA
 * row pitches), every pointer 16-byte aligned.
 *
 * World size. Everything per rank is sized at run time. The caller passes its per-rank pointers
 * as HOST arrays of `world` entries (a, b, out, partial, gathered, flags). What the kernel needs
 * of them, and what is derived from them (one pk::gemm::params per rank with its TMA tensor
 * maps, every rank's output or shard maps, the row partition, pointer arrays), lives in the
 * DEVICE TABLE: device memory of pkf_reqs.table_bytes that the caller owns; pkf_table() writes
 * its bytes for these arguments (and for the table's device address, a->table) into host
 * memory, and the caller copies them to a->table (once, and again whenever an argument
 * other than seq, stream and zero_output changes). The kernel parameter stays a few hundred bytes at
 * any world (tensor maps of 256 ranks would not fit CUDA's parameter space). The table starts
 * with a hash of what it was written for: a kernel handed a table of other arguments stops with
 * a device error ("stale device table") before any block uses it.
 *
 * Store-add variants (intra-SM gemm-rs / gemm-ar) ADD into out[]: the outputs must be zero
 * before the kernel starts. zero_output = 1 makes the entry point clear them on the stream
 * first (part of the call); zero_output = 0 leaves that to the caller.
 *
 * Launches. one_rank = 0: every rank's buffers are addressable from this process on the
 * current device (virtual ranks, or one process over the peers' buffers mapped by CUDA IPC) and
 * one launch runs all ranks (grid = world x (gemm_blocks + comm_blocks), block b serving rank
 * b / (gemm_blocks + comm_blocks)); gemm_blocks defaults to SMs / world - comm_blocks.
 * one_rank = 1: one process per rank, each on its own GPU: this launch runs rank `rank`'s blocks
 * only (grid = gemm_blocks + comm_blocks; gemm_blocks defaults to SMs - comm_blocks) and every
 * rank makes the same call with its own rank. The arrays still hold every rank's pointers (the
 * peers' as this process maps them), the device table is this process's. Inter-SM variants
 * meet on their flags; intra-SM variants have no device-side meeting, so the caller meets the
 * other ranks before the launch (operands in place; store-add outputs zeroed) and after it has
 * finished (every rank's adds or loads done) before it reads or reuses the buffers.
 * Variants whose blocks wait on each other (inter-SM) launch cooperatively, which guarantees
 * co-residency or fails with the limit in the message. Flag counters only grow: seq counts the
 * earlier calls made with the same flags (zeroed once).
 */
#ifndef PKF_ABI_H
#define PKF_ABI_H

#include <stddef.h>

#define PKF_ABI_VERSION 3
#define PKF_MAX_RANKS 576          /* one NVLink domain (pksim_core.kernel_contract FUSED_MAX_RANKS) */

typedef struct pkf_args {
  int abi_version;           /* PKF_ABI_VERSION */
  int world;                 /* ranks, 2..PKF_MAX_RANKS */
  int M, N, K;               /* see the shapes above */
  void* const* a;            /* host array of world pointers: A_r (gemm-rs, gemm-ar) or the shard
                                of A (ag-gemm) */
  void* const* b;            /* B_r [K x N] */
  void* const* out;          /* outputs (see the shapes above) */
  void* const* partial;      /* inter-SM gemm-rs / gemm-ar: M x N scratch per rank, else NULL */
  void* const* gathered;     /* inter-SM ag-gemm: M x K scratch per rank, else NULL */
  void* partial_mc;          /* in-network gemm-ar: multicast addresses (never created here) */
  void* out_mc;
  unsigned int* const* flags;  /* inter-SM: pkf_reqs.num_flags counters per rank, else NULL */
  int num_flags;             /* per rank, as allocated */
  int gemm_blocks;           /* per rank; 0: SMs / world - comm_blocks */
  int comm_blocks;           /* per rank (inter-SM); 0: the generated default (comm_sms) */
  int tile_order;            /* -1: generated default; 0: staggered; 1: sequential */
  int group_m;               /* band height of the tile raster; 0: 16 */
  int zero_output;           /* store-add variants: 1 = clear the outputs first */
  unsigned int seq;          /* earlier calls on these flags */
  void* err;                 /* device pk::error_record, zeroed by the caller */
  void* stream;              /* cudaStream_t (NULL: legacy default stream) */
  void* table;               /* the device table (pkf_reqs.table_bytes, 64-byte aligned) */
  unsigned long long table_bytes;  /* as allocated */
  long long timeout_cycles;  /* deadline of every device wait (clock64 cycles); 0: default */
  int one_rank;              /* 0: one launch runs every rank; 1: rank `rank`'s blocks only */
  int rank;                  /* one_rank = 1: this process's rank, 0..world-1 */
} pkf_args;

typedef struct pkf_reqs {
  unsigned long long partial_bytes;   /* per rank (0: none needed) */
  unsigned long long gathered_bytes;  /* per rank (0: none needed) */
  int num_flags;                      /* per rank (0: none needed) */
  int gemm_blocks;                    /* per rank, as a call with these arguments would use */
  int comm_blocks;                    /* per rank */
  int threads;
  unsigned long long smem_bytes;      /* dynamic shared memory per block */
  int max_coresident_blocks;          /* of the kernel on the current device */
  int spins;                          /* 1: blocks wait on each other (cooperative launch) */
  unsigned long long table_bytes;     /* the device table (64-byte aligned) */
} pkf_reqs;

#endif /* PKF_ABI_H */
