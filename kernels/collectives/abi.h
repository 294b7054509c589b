/* collectives/abi.h: the C interface between a generated collective library and its caller.
 *
 * A generated translation unit exports, with C linkage:
 *   int  <entry>(const pkc_args* a, char* msg, size_t msg_len);      run (enqueue) the collective
 *   int  pkc_requirements(const pkc_args* a, pkc_reqs* out, char* msg, size_t msg_len);
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
 * Ranks. rank < 0: VIRTUAL ranks, every rank's buffers live in this process on the current
 * device and one launch runs all of them (its grid is world x blocks_per_rank blocks, block b
 * serving rank b / blocks_per_rank). rank >= 0: this process is that rank; the other ranks'
 * buffers are CUDA-IPC mappings, and the kernel adds an entry and an exit barrier.
 *
 * Phases. An algorithm is a sequence of phases (pkc_reqs.phases). With device_sync = 1 one call
 * runs them all and synchronises the ranks between phases on the device (barriers or ring
 * flags). With device_sync = 0 one call runs [phase_begin, phase_end) without any waiting, and
 * the caller synchronises the ranks between calls (used where spinning is not possible, e.g.
 * two processes time-slicing one GPU).
 */
#ifndef PKC_ABI_H
#define PKC_ABI_H

#include <stddef.h>

#define PKC_ABI_VERSION 1
#define PKC_MAX_RANKS 8
#define PKC_RING_FLAG_BASE 8        /* flags [0, 8): barrier counters; [8, 8 + blocks): ring */
#define PKC_MAX_BLOCKS_PER_RANK 1024

enum pkc_dtype { PKC_FP32 = 0, PKC_BF16 = 1 };

enum pkc_status {
  PKC_OK = 0,
  PKC_BAD_ARGUMENT = 1,   /* an argument check failed; msg says which */
  PKC_CUDA_ERROR = 2,     /* a CUDA call failed; msg names it */
  PKC_DEVICE_TIMEOUT = 3, /* a device-side wait passed its deadline (pkc_read_error) */
  PKC_UNSUPPORTED = 4     /* compiled, but not runnable here (multimem without multicast) */
};

typedef struct pkc_args {
  int abi_version;           /* PKC_ABI_VERSION */
  int world;                 /* ranks taking part, 1..PKC_MAX_RANKS */
  int rank;                  /* -1: all ranks in this process (virtual); else this rank */
  int dtype;                 /* pkc_dtype */
  unsigned long long count;  /* elements: per-rank shard (all-gather, reduce-scatter, all-to-all)
                                or the whole buffer (all-reduce, broadcast) */
  void* in[PKC_MAX_RANKS];   /* every rank's input, as addressable from this process */
  void* out[PKC_MAX_RANKS];  /* every rank's output */
  void* scratch[PKC_MAX_RANKS];
  unsigned int* flags[PKC_MAX_RANKS];  /* every rank's flag counters (zeroed once) */
  void* in_mc;               /* multicast addresses (multimem kernels only), else NULL */
  void* out_mc;
  unsigned long long scratch_bytes;    /* per rank, as allocated */
  int num_flags;             /* per rank, as allocated */
  int blocks_per_rank;       /* 0: the generated default (schedule.comm_sms) */
  void* err;                 /* device pk::error_record, zeroed by the caller */
  void* stream;              /* cudaStream_t of the launch (NULL: legacy default stream) */
  void* rank_streams[PKC_MAX_RANKS];   /* copy engines, virtual ranks: one stream per rank */
  unsigned int seq;          /* launches so far with these flags (monotonic counters) */
  int phase_begin;           /* with device_sync = 0: the phases to run */
  int phase_end;             /* -1: through the last */
  int device_sync;           /* 1: synchronise ranks on the device between phases */
  int root;                  /* broadcast root */
  long long timeout_cycles;  /* deadline of every device wait (clock64 cycles); 0: default */
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
} pkc_reqs;

#endif /* PKC_ABI_H */
