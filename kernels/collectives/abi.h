/* collectives/abi.h: the C interface between a generated collective library and its caller.
 *
 * A generated translation unit exports, with C linkage:
 *   int  <entry>(const pkc_args* a, char* msg, size_t msg_len);      run (enqueue) the collective
 *   int  pkc_requirements(const pkc_args* a, pkc_reqs* out, char* msg, size_t msg_len);
 *   int  pkc_table(const pkc_args* a, void* host, size_t bytes, char* msg, size_t msg_len);
 *   int  pkc_read_error(const void* err, char* msg, size_t msg_len);  after the stream finished
 *   int  pkc_abi_version(void); size_t pkc_args_size(void); size_t pkc_reqs_size(void);
 *   const char* pkc_manifest(void);                                   op/algorithm/mechanism/key
 *   int  pkc_ipc_handle(const void* ptr, void* handle64, size_t* offset, char* msg, size_t len);
 *   int  pkc_ipc_open(const void* handle64, void** base, char* msg, size_t len);
 *   int  pkc_ipc_close(void* base);
 * Every function returns a pkc_status and, on failure, writes a one-line message into msg.
 * The Python side (validation/runtime/collectives.py) mirrors these structs with ctypes and checks
 * pkc_args_size() / pkc_reqs_size() against its own layout before the first call.
 *
 * World size. Everything is sized at run time: world is an argument (2 .. PKC_MAX_RANKS, the
 * largest NVLink domain pksim models), and so are the per-rank buffers. The caller passes its
 * per-rank pointers as HOST arrays of `world` entries (in, out, scratch, flags, rank_streams).
 * The kernel reads them from one of two places:
 *   * world <= PKC_INLINE_RANKS: the library copies them into the kernel parameter (no table;
 *     pkc_reqs.table_bytes = 0): the pointers of a small world cost no load from memory;
 *   * larger worlds: from the PEER TABLE, device memory of pkc_reqs.table_bytes that the caller
 *     owns and fills: pkc_table() writes the table's bytes for these arguments into host memory,
 *     the caller copies them to the device (once, and again whenever a pointer changes) and
 *     passes the device address in `table`. The table starts with a hash of what it was built
 *     from; a kernel handed a table built for other pointers stops with a device error
 *     ("stale peer table") instead of touching wrong memory.
 * Kernel parameters stay small at any world (CUDA's 4 KiB limit before 12.1), so a new
 * collective adds no fixed-size per-rank array to pkc_args or to its globals: it reads its
 * ranks' buffers through the table (collective.cuh pkc::peers).
 *
 * Ranks. rank < 0: VIRTUAL ranks, every rank's buffers live in this process on the current
 * device and one launch runs all of them (its grid is world x blocks_per_rank blocks, block b
 * serving rank b / blocks_per_rank). rank >= 0: this process is that rank; the other ranks'
 * buffers are CUDA-IPC mappings, and the kernel adds an entry and an exit barrier.
 *
 * Phases. An algorithm is a sequence of phases (pkc_reqs.phases); a call runs [phase_begin,
 * phase_end) (0, -1: all of them). With device_sync = 1 the ranks synchronise between phases on
 * the device (barriers or flags); a call may also be split into consecutive ranges, each made
 * with the same seq, and runs as one call would (the hierarchical schedules run an NVLink
 * all-reduce ring as its reduce-scatter phases, NCCL across domains, then its all-gather
 * phases: codegen/manifest.py). With device_sync = 0 a call waits on nothing, and the caller
 * synchronises the ranks between calls (used where spinning is not possible, e.g. two processes
 * time-slicing one GPU).
 *
 * Flags (pkc_reqs.num_flags 32-bit counters per rank, zeroed once, never reset: every wait is
 * for "counter >= epoch", and pkc_args.seq counts the earlier calls on the same flags with the
 * same blocks per rank):
 *   [0, PKC_BARRIER_FLAGS)                  the barrier: arrivals of the rank's blocks, their
 *                                           release, and one counter per round of a
 *                                           dissemination barrier among the ranks (ceil(log2
 *                                           world) rounds: O(world log world) signals in all,
 *                                           where every rank signalling every rank is world^2);
 *   [PKC_P2P_FLAG_BASE, num_flags)          point to point: ring algorithms one counter per
 *                                           block (block b of rank r waits for block b of r - 1),
 *                                           recursive halving / doubling one per phase.
 *
 * Adding a collective (reduce, gather, scatter, the -v forms, send/recv): a struct in
 * collectives/<op>.cuh with the static members listed at the top of collective.cuh; it reads
 * buffers as g.in[r], g.out[r], g.scratch[r] (any rank, any world) and moves data with
 * copy_to / copy_range / reduce_to, which take up to PKC_SET_SLOTS pointers in registers or a
 * peer_list of any length. Per-call sizes (counts, displacements) that differ by rank belong in
 * the table, after the pointers, not in pkc_args.
 */
#ifndef PKC_ABI_H
#define PKC_ABI_H

#include <stddef.h>

#define PKC_ABI_VERSION 2
#define PKC_MAX_RANKS 576           /* world <= this: one NVLink domain (pksim_core.kernel_contract) */
#define PKC_INLINE_RANKS 8          /* worlds up to this pass their pointers in the kernel parameter */
#define PKC_SET_SLOTS 8             /* buffers a move holds in registers at once; more go in batches */
#define PKC_TMA_MAX_SOURCES 8       /* sources one TMA sum stages in shared memory */
#define PKC_BARRIER_FLAGS 32        /* flags [0, 32): the barrier (2 + ceil(log2 world) used) */
#define PKC_P2P_FLAG_BASE PKC_BARRIER_FLAGS
#define PKC_MAX_BLOCKS_PER_RANK 1024
#define PKC_TABLE_HEADER_BYTES 16   /* the table: header (hash, world), then in, out, scratch,
                                       flags: world pointers each */

enum pkc_dtype { PKC_FP32 = 0, PKC_BF16 = 1 };

enum pkc_status {
  PKC_OK = 0,
  PKC_BAD_ARGUMENT = 1,   /* an argument check failed; msg says which */
  PKC_CUDA_ERROR = 2,     /* a CUDA call failed; msg names it */
  PKC_DEVICE_TIMEOUT = 3, /* a device-side wait passed its deadline, or a stale table (pkc_read_error) */
  PKC_UNSUPPORTED = 4     /* compiled, but not runnable here (multimem without multicast) */
};

typedef struct pkc_args {
  int abi_version;           /* PKC_ABI_VERSION */
  int world;                 /* ranks taking part, 2..PKC_MAX_RANKS */
  int rank;                  /* -1: all ranks in this process (virtual); else this rank */
  int dtype;                 /* pkc_dtype */
  unsigned long long count;  /* elements: per-rank shard (all-gather, reduce-scatter, all-to-all)
                                or the whole buffer (all-reduce, broadcast) */
  void* const* in;           /* host array of world pointers: every rank's input, as
                                addressable from this process */
  void* const* out;          /* every rank's output */
  void* const* scratch;      /* every rank's scratch; NULL when scratch_bytes is 0 */
  unsigned int* const* flags;  /* every rank's flag counters (zeroed once) */
  void* in_mc;               /* multicast addresses (multimem kernels only), else NULL */
  void* out_mc;
  unsigned long long scratch_bytes;    /* per rank, as allocated */
  int num_flags;             /* per rank, as allocated */
  int blocks_per_rank;       /* 0: the generated default (schedule.comm_sms) */
  void* err;                 /* device pk::error_record, zeroed by the caller */
  void* stream;              /* cudaStream_t of the launch (NULL: legacy default stream) */
  void* const* rank_streams; /* copy engines, virtual ranks: world streams, one per rank (NULL:
                                every rank on `stream`) */
  void* table;               /* device peer table of pkc_reqs.table_bytes, filled from
                                pkc_table(); NULL when table_bytes is 0 */
  unsigned long long table_bytes;      /* as allocated */
  unsigned int seq;          /* launches so far with these flags (monotonic counters) */
  int phase_begin;           /* the phases to run: [phase_begin, phase_end) */
  int phase_end;             /* -1: through the last */
  int device_sync;           /* 1: synchronise ranks on the device between phases */
  int root;                  /* broadcast root */
  long long timeout_cycles;  /* deadline of every device wait (clock64 cycles); 0: default */
  /* The -v forms and send/recv (collectives/varsize.cuh, p2p.cuh): the split sizes in elements,
     a host array of num_splits entries: all-to-all-v and send/recv world x world (row r: what
     rank r sends to each rank, in rank order), all-gather-v and reduce-scatter-v world (rank r's
     share). count is then every rank's input and output buffer (elements, at least each rank's
     total). The library writes the splits and their displacements into the peer table after
     its pointers (pkc_table), so these collectives take a table at every world. NULL and 0 for
     every other collective. */
  const unsigned long long* splits;
  unsigned long long num_splits;
  /* Fused element-wise epilogue (collectives/epilogue.cuh; the reduce op and which terms apply
     are compile-time, config::reduce_op / config::epilogue): out = reduce(in) [x alpha]
     [+ bias[i % bias_count]], i the element's index in the reduced buffer. */
  double alpha;              /* scale epilogues */
  const void* bias;          /* bias epilogues: device, bias_count elements of the dtype */
  unsigned long long bias_count;
} pkc_args;

typedef struct pkc_reqs {
  unsigned long long in_count;       /* elements per rank */
  unsigned long long out_count;      /* elements per rank */
  unsigned long long scratch_bytes;  /* per rank */
  int num_flags;                     /* per rank */
  int phases;
  int blocks_per_rank;               /* what a call with these arguments would use */
  int max_coresident_blocks;         /* of the kernel on the current device (0: no kernel) */
  int threads;
  unsigned long long smem_bytes;     /* dynamic shared memory per block */
  int barriers_per_launch;           /* device barriers one call performs (informational) */
  int spins;                         /* 1: the call's blocks wait on each other (cooperative) */
  unsigned long long table_bytes;    /* device peer table (0: world <= PKC_INLINE_RANKS) */
} pkc_reqs;

#endif /* PKC_ABI_H */
