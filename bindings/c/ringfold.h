/* ringfold.h: the C ABI of libringfold.so.
 *
 * Plain C (C99 and later, and C++). Two families of functions:
 *
 *   horovod_*   Horovod's own C functions (horovod/common/operations.{h,cc}), with the same
 *               names, signatures and return conventions, so that Horovod's basics.py can load
 *               this library with ctypes: init/shutdown, rank and size queries, build flags,
 *               reduce-op codes, process sets, timeline.
 *   ringfold_*  ringfold's own tensor API (Horovod's enqueue functions are C++; these are C):
 *               asynchronous collectives that return a handle, and the calls that wait for a
 *               handle, read its result and release it.
 *
 * Contract
 *   - No function throws and none aborts the process on bad input. Every ringfold_* function
 *     except ringfold_last_error/ringfold_version returns an int status: RINGFOLD_OK (0) or
 *     one of Horovod's Status codes below. ringfold_poll returns 1/0, or a negated status.
 *   - Every function (horovod_* included) starts by clearing this thread's last-error message
 *     and sets it when it fails; ringfold_last_error() returns it ("" after a success). The
 *     message names the problem (the argument, the tensor, the ranks that disagree, ...).
 *   - Status codes (Horovod's StatusCode):
 *       RINGFOLD_OK                  success
 *       RINGFOLD_UNKNOWN_ERROR       anything unexpected (an internal error, out of memory)
 *       RINGFOLD_PRECONDITION_ERROR  not initialized, already shut down (on this or another
 *                                    rank), a handle not yet complete, or the ranks disagreed
 *                                    about a tensor
 *                                    (shape, dtype, op, root, ...: the same message on every
 *                                    rank, as Horovod reports it)
 *       RINGFOLD_ABORTED             a peer died or went silent past RINGFOLD_TIMEOUT, or the
 *                                    network failed; the engine is unusable until re-init, and
 *                                    every later enqueue returns this code and message
 *       RINGFOLD_INVALID_ARGUMENT    a bad argument on this rank (NULL pointer, unknown dtype or
 *                                    reduce-op code, negative dimension, unknown handle or
 *                                    process set, a name already in flight, wrong buffer size)
 *       RINGFOLD_IN_PROGRESS         ringfold_wait: the timeout passed before completion
 *   - Thread safety: init and shutdown are serialized; every other function may be called
 *     from any number of threads at once (enqueue from many threads concurrently). A handle may
 *     be waited on from any thread; releasing it while another thread reads its result is the
 *     caller's race.
 *   - Lifetime: horovod_init/ringfold_init bootstrap from the environment (ringfoldrun, torchrun,
 *     horovodrun/Gloo, Slurm or Open MPI variables; none at all: rank 0 of 1). Calling init again
 *     while initialized does nothing and succeeds. Shutdown on any rank stops every rank's engine
 *     (pending operations complete with RINGFOLD_PRECONDITION_ERROR); init may be called again
 *     afterwards (elastic training). Handles from before a shutdown are rejected afterwards.
 *     Nothing is registered with atexit(): call shutdown before exiting, as Horovod's Python
 *     does (basics.py registers atexit(shutdown)); a process that exits initialized shuts the
 *     engine down from the library's static destructor, as Horovod's does. A child created
 *     with fork() does not inherit a usable engine (calls fail with PRECONDITION_ERROR) and may
 *     call init itself.
 *
 * Tensors
 *   - Collectives are matched across the ranks of a process set by name. A NULL name is
 *     replaced by "<op>.noname.<n>" (op = allreduce, allgather, broadcast, alltoall,
 *     reducescatter), with n counting that op's unnamed calls in that process set since init
 *     or since the last join completed in that set (ranks that made different numbers of calls
 *     before a join are in step after it); ranks that make their unnamed calls in the same
 *     order get the same names. A name may be reused once its previous operation completed.
 *   - shape/ndim describe the tensor (ndim 0: a scalar, shape may then be NULL). Data is dense,
 *     row-major, on the CPU (device = RINGFOLD_CPU_DEVICE) or on a CUDA device (device = its
 *     index, see "GPU tensors" below).
 *   - Buffers passed to an *_async call must stay valid and unmodified (outputs untouched)
 *     until the handle completes.
 *   - Allreduce, broadcast and reduce write into the caller's output (which may equal the
 *     input); reduce writes it on the root only (other ranks' outputs are left as they were).
 *     Allgather, alltoall and reducescatter produce an output whose size the group decides: it
 *     is allocated by the engine and owned by the handle. Read it with ringfold_result_shape /
 *     _bytes and ringfold_result_copy, or borrow it with ringfold_result_data (valid until
 *     ringfold_release). Every handle must be released exactly once, after it completed
 *     (releasing an incomplete handle fails: the engine may still be using its buffers).
 *
 * GPU tensors (builds with CUDA: horovod_cuda_built() is true)
 *   - Allreduce (grouped too) and broadcast take device >= 0: data, output and the input of
 *     every rank are device pointers of that CUDA device (ranks may use different indices).
 *     Other operations refuse GPU tensors with RINGFOLD_INVALID_ARGUMENT. Builds without CUDA
 *     refuse every GPU tensor and every stream ("no CUDA support"); a CUDA build on a machine
 *     without a usable GPU refuses them at enqueue with a message naming the tensor ("...
 *     'grad' is on GPU 0, but no CUDA device is available (cudaGetDeviceCount returned ...)"),
 *     and CPU tensors keep working.
 *   - Ordering: ringfold_enqueue's tensor.stream (a cudaStream_t; NULL = the legacy default
 *     stream; the *_async functions always use NULL) orders the operation: ringfold reads the
 *     input only after the work already queued on that stream, and when the handle completes
 *     the stream has been made to wait (cudaStreamWaitEvent) for the result, so kernels queued
 *     on it afterwards see the result. The result is also on the device when ringfold_wait /
 *     ringfold_poll report completion, so the host may copy it out then. The input must not be
 *     modified, nor the output used, by other streams until then.
 *   - Data moves over TCP through pinned host buffers (RINGFOLD_CUDA_STAGING_BYTES per block, the
 *     copy of one block overlapping the transfer of the next); reductions run on the GPU with
 *     ringfold's kernels and give the same bits as on the CPU.
 *   - ringfold_cuda_device() is the device a rank should use when nothing else decides:
 *     RINGFOLD_CUDA_DEVICE, else local rank modulo the number of devices; -1 without a GPU.
 *
 * Minimal use (rank count and rank from the launcher's environment):
 *
 *   float x[4] = {1, 2, 3, 4};
 *   int64_t shape[1] = {4}, h;
 *   if (!horovod_init(NULL, 0, NULL, NULL, 0)) fail(ringfold_last_error());
 *   ringfold_allreduce_async(x, x, RINGFOLD_FLOAT32, shape, 1, "x", RINGFOLD_OP_SUM, 1.0, 1.0,
 *                            0, RINGFOLD_CPU_DEVICE, &h);
 *   if (ringfold_wait(h, -1.0) != RINGFOLD_OK) fail(ringfold_last_error());
 *   ringfold_release(h);
 *   horovod_shutdown();
 */
#ifndef RINGFOLD_BINDINGS_C_RINGFOLD_H_
#define RINGFOLD_BINDINGS_C_RINGFOLD_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define RINGFOLD_API __attribute__((visibility("default")))
#else
#define RINGFOLD_API
#endif

#ifdef __cplusplus
#define RINGFOLD_NOEXCEPT noexcept
extern "C" {
#else
#define RINGFOLD_NOEXCEPT
#endif

/* Bumped when a signature or a code in this file changes incompatibly. */
#define RINGFOLD_ABI_VERSION 1

/* ---- status codes (Horovod's StatusCode) ------------------------------------------------ */
#define RINGFOLD_OK 0
#define RINGFOLD_UNKNOWN_ERROR 1
#define RINGFOLD_PRECONDITION_ERROR 2
#define RINGFOLD_ABORTED 3
#define RINGFOLD_INVALID_ARGUMENT 4
#define RINGFOLD_IN_PROGRESS 5

/* ---- data types: ringfold's DataType (NCCL's ncclDataType_t numbering, plus bool) ----------
 * Not Horovod's numbering (Horovod: UINT8=0, INT8=1, ...): a plugin maps its framework's types
 * to these. Bool is accepted by the copying collectives only (allgather, broadcast, alltoall). */
#define RINGFOLD_INT8 0
#define RINGFOLD_UINT8 1
#define RINGFOLD_INT32 2
#define RINGFOLD_UINT32 3
#define RINGFOLD_INT64 4
#define RINGFOLD_UINT64 5
#define RINGFOLD_FLOAT16 6
#define RINGFOLD_FLOAT32 7
#define RINGFOLD_FLOAT64 8
#define RINGFOLD_BFLOAT16 9
#define RINGFOLD_BOOL 10
/* OCP 8-bit floats (NCCL's ncclFloat8e4m3 and ncclFloat8e5m2, which NCCL numbers 10 and 11):
 * reduced in float32 and rounded to nearest even, saturating to the largest finite value. */
#define RINGFOLD_FLOAT8_E4M3 11
#define RINGFOLD_FLOAT8_E5M2 12

/* ---- reduce ops: Horovod's codes (what horovod_reduce_op_*() return) -----------------------
 * AVERAGE divides the sum by the number of ranks in the process set. ADASUM is a valid code
 * but ringfold does not implement Adasum: enqueueing with it fails with INVALID_ARGUMENT. */
#define RINGFOLD_OP_AVERAGE 0
#define RINGFOLD_OP_SUM 1
#define RINGFOLD_OP_ADASUM 2
#define RINGFOLD_OP_MIN 3
#define RINGFOLD_OP_MAX 4
#define RINGFOLD_OP_PRODUCT 5

/* Device id of CPU tensors (Horovod's CPU_DEVICE_ID). */
#define RINGFOLD_CPU_DEVICE (-1)

/* ---- process-set error codes (Horovod's HOROVOD_PROCESS_SET_ERROR_*) ---------------------- */
#define HOROVOD_PROCESS_SET_ERROR_INIT (-1)         /* not initialized */
#define HOROVOD_PROCESS_SET_ERROR_DYNAMIC (-2)      /* add/remove without dynamic mode */
#define HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET (-3)  /* no process set with that id */
#define HOROVOD_PROCESS_SET_ERROR_FOREIGN_SET (-4)  /* this rank is not a member */
#define HOROVOD_PROCESS_SET_ERROR_SHUTDOWN (-5)     /* the engine stopped (shutdown or failure) */
#define HOROVOD_PROCESS_SET_ERROR_EXISTING_SET (-6) /* a set with the same ranks exists */
/* ringfold's own: bad ranks (out of range, repeated), a NULL output array, or ranks that
 * disagree about the change. ringfold_last_error() says which. */
#define RINGFOLD_PROCESS_SET_ERROR_INVALID (-7)

/* ==== Horovod-compatible functions ========================================================= */

/* Starts the engine. `ranks` must be NULL/empty or list every rank 0..size-1 in order: ringfold
 * ranks come from the launcher, a communicator over a strict subset is not supported (use a
 * process set). ps_ranks concatenates the ranks of num_ps static process sets, ps_sizes[i]
 * being the length of set i; they get ids 1..num_ps on every rank (every rank must pass the
 * same sets). Dynamic mode (horovod_add/remove_process_set) follows
 * RINGFOLD_DYNAMIC_PROCESS_SETS (alias HOROVOD_DYNAMIC_PROCESS_SETS). Blocks until every rank
 * has connected (RINGFOLD_START_TIMEOUT). The ranks meet under the store keys of
 * RINGFOLD_INCARNATION when it is set (elastic training: a new worker's first init meets the
 * survivors' later ones), else of this process's count of its inits. In elastic mode
 * (RINGFOLD_ELASTIC=1) process sets are refused with INVALID_ARGUMENT, static ones and dynamic
 * mode alike (a set's ranks would name other processes after a reset). Returns true on success
 * (and when already initialized); on failure false, with the reason in ringfold_last_error() and
 * on stderr. */
RINGFOLD_API bool horovod_init(const int* ranks, int nranks, const int* ps_ranks, const int* ps_sizes,
                               int num_ps) RINGFOLD_NOEXCEPT;
/* Stops the engine (collectively: every rank's engine stops at the same cycle) and waits for
 * it. Does nothing when not initialized. */
RINGFOLD_API void horovod_shutdown(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_is_initialized(void) RINGFOLD_NOEXCEPT;

/* Topology; -1 when not initialized (cross rank/size are also -1 when the placement is uneven
 * and the launcher did not say). */
RINGFOLD_API int horovod_rank(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_local_rank(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_size(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_local_size(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_cross_rank(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_cross_size(void) RINGFOLD_NOEXCEPT;
/* True when every host runs the same number of ranks (false when not initialized). */
RINGFOLD_API bool horovod_is_homogeneous(void) RINGFOLD_NOEXCEPT;
/* -1 when not initialized, else 0 (no MPI). */
RINGFOLD_API int horovod_mpi_threads_supported(void) RINGFOLD_NOEXCEPT;

/* Build flags. ringfold uses neither MPI nor Gloo nor NCCL: those report false / 0. */
RINGFOLD_API bool horovod_mpi_enabled(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_mpi_built(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_gloo_enabled(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_gloo_built(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_nccl_built(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_ddl_built(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_ccl_built(void) RINGFOLD_NOEXCEPT;
/* True in builds with CUDA, which are the builds whose engine accepts GPU tensors (allreduce and
 * broadcast; see "GPU tensors"); whether a GPU is present is ringfold_cuda_device()'s answer. */
RINGFOLD_API bool horovod_cuda_built(void) RINGFOLD_NOEXCEPT;
/* The CUDA device this rank should use (see "GPU tensors"); -1 without CUDA support, without a
 * device, or before init. */
RINGFOLD_API int ringfold_cuda_device(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API bool horovod_rocm_built(void) RINGFOLD_NOEXCEPT;

/* Reduce-op codes (RINGFOLD_OP_*): 0 average, 1 sum, 2 adasum, 3 min, 4 max, 5 product. */
RINGFOLD_API int horovod_reduce_op_average(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_reduce_op_sum(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_reduce_op_adasum(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_reduce_op_min(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_reduce_op_max(void) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_reduce_op_product(void) RINGFOLD_NOEXCEPT;

/* Process sets. Set 0 is the global set. add/remove need dynamic mode, are blocking and must
 * be called by every rank with the same arguments. add returns the new id (>0), or
 * EXISTING_SET when a set with the same ranks (after sorting; NULL/empty means all ranks)
 * exists, or INIT / DYNAMIC / SHUTDOWN / RINGFOLD_PROCESS_SET_ERROR_INVALID. remove returns
 * the removed id; operations pending in that set fail with PRECONDITION_ERROR. */
RINGFOLD_API int horovod_add_process_set(const int* ranks, int nranks) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_remove_process_set(int process_set_id) RINGFOLD_NOEXCEPT;
/* This rank's rank in the set (FOREIGN_SET when not a member); id 0: horovod_rank(). */
RINGFOLD_API int horovod_process_set_rank(int process_set_id) RINGFOLD_NOEXCEPT;
/* Number of ranks in the set; id 0: horovod_size(). */
RINGFOLD_API int horovod_process_set_size(int process_set_id) RINGFOLD_NOEXCEPT;
/* 1 if this rank is a member, 0 if not; id 0: always 1. */
RINGFOLD_API int horovod_process_set_included(int process_set_id) RINGFOLD_NOEXCEPT;
/* Number of process sets including the global one (0 when not initialized). */
RINGFOLD_API int horovod_number_of_process_sets(void) RINGFOLD_NOEXCEPT;
/* Writes the ids (ascending) to `ids`, which holds horovod_number_of_process_sets() ints. */
RINGFOLD_API void horovod_process_set_ids(int* ids) RINGFOLD_NOEXCEPT;
/* Writes the set's global ranks (ascending) to `ranks`, which holds
 * horovod_process_set_size(id) ints. Returns 0, or INIT / UNKNOWN_SET / ..._INVALID. */
RINGFOLD_API int horovod_process_set_ranks(int process_set_id, int* ranks) RINGFOLD_NOEXCEPT;

/* Timeline (Chrome trace, written by rank 0; other ranks do nothing). Unlike Horovod, a
 * timeline can be started without RINGFOLD_TIMELINE=DYNAMIC at init. Return 1 on success, -1
 * when not initialized, -3 (ringfold's own) when `file_name` is NULL/empty or cannot be opened.
 * Starting replaces a running timeline; stopping a stopped one succeeds. */
RINGFOLD_API int horovod_start_timeline(const char* file_name, bool mark_cycles) RINGFOLD_NOEXCEPT;
RINGFOLD_API int horovod_stop_timeline(void) RINGFOLD_NOEXCEPT;

/* ==== ringfold's own functions ============================================================= */

/* This thread's message for the last failed call ("" after a success). Valid until the next
 * ringfold_* / horovod_* call on this thread. Never NULL. */
RINGFOLD_API const char* ringfold_last_error(void) RINGFOLD_NOEXCEPT;
/* "0.1.0" (the library version). */
RINGFOLD_API const char* ringfold_version(void) RINGFOLD_NOEXCEPT;

/* horovod_init / horovod_shutdown with a status code. */
RINGFOLD_API int ringfold_init(const int* ranks, int nranks, const int* ps_ranks, const int* ps_sizes,
                               int num_ps) RINGFOLD_NOEXCEPT;
RINGFOLD_API int ringfold_shutdown(void) RINGFOLD_NOEXCEPT;

/* ---- asynchronous collectives -------------------------------------------------------------
 * Each enqueues one operation and stores its handle in *handle (untouched on failure).
 * Arguments checked here fail at once; disagreements between ranks complete the handle with
 * an error on every rank. `process_set` is a process-set id (0: all ranks); `root` is a rank
 * within that process set. */

/* output[i] = postscale * op over ranks of (prescale * input[i]); output may equal input. */
RINGFOLD_API int ringfold_allreduce_async(const void* input, void* output, int dtype, const int64_t* shape,
                                          int ndim, const char* name, int reduce_op, double prescale,
                                          double postscale, int process_set, int device,
                                          int64_t* handle) RINGFOLD_NOEXCEPT;
/* `count` allreduces negotiated and released together (one handle each, in handles[i]). Arrays
 * of `count` entries; `names` may be NULL (all unnamed) or hold NULL entries. All or none are
 * enqueued. */
RINGFOLD_API int ringfold_grouped_allreduce_async(int count, const void* const* inputs, void* const* outputs,
                                                  const int* dtypes, const int64_t* const* shapes,
                                                  const int* ndims, const char* const* names, int reduce_op,
                                                  double prescale, double postscale, int process_set,
                                                  int device, int64_t* handles) RINGFOLD_NOEXCEPT;
/* Concatenates every rank's tensor along the first dimension (which may differ between ranks;
 * the others must agree). Result: engine-allocated, shape [sum of first dims, ...]. */
RINGFOLD_API int ringfold_allgather_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                          const char* name, int process_set, int device,
                                          int64_t* handle) RINGFOLD_NOEXCEPT;
/* Copies root's input into every rank's output (root: output may equal input). */
RINGFOLD_API int ringfold_broadcast_async(const void* input, void* output, int dtype, const int64_t* shape,
                                          int ndim, int root, const char* name, int process_set, int device,
                                          int64_t* handle) RINGFOLD_NOEXCEPT;
/* Sends splits[j] rows (first-dimension slices) to rank j; nsplits 0 (splits may be NULL):
 * equal splits. Result: engine-allocated rows received, in rank order, plus
 * ringfold_result_received_splits. */
RINGFOLD_API int ringfold_alltoall_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                         const int64_t* splits, int nsplits, const char* name, int process_set,
                                         int device, int64_t* handle) RINGFOLD_NOEXCEPT;
/* Reduces across ranks, then rank r keeps its block of rows (first dimension split as evenly
 * as possible, the first ranks taking one more row). Result: engine-allocated. */
RINGFOLD_API int ringfold_reducescatter_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                              const char* name, int reduce_op, double prescale,
                                              double postscale, int process_set, int device,
                                              int64_t* handle) RINGFOLD_NOEXCEPT;
/* Horovod's join: this rank has no more data; until every rank joined, the others' allreduces
 * proceed with zeros from it. Completes when all ranks joined: ringfold_join_last_rank. */
RINGFOLD_API int ringfold_join_async(int process_set, int64_t* handle) RINGFOLD_NOEXCEPT;
RINGFOLD_API int ringfold_barrier_async(int process_set, int64_t* handle) RINGFOLD_NOEXCEPT;

/* ---- one entry point for every operation, with tensors as plain structs -------------------
 * The *_async functions above are shorthands for this: each fills these structs and calls it. */

typedef struct ringfold_tensor {
  const void* data;      /* NULL only when the tensor has no elements (or for an output the
                            engine allocates: allgather, alltoall, reducescatter) */
  int dtype;             /* RINGFOLD_INT8 ... RINGFOLD_FLOAT8_E5M2 */
  const int64_t* shape;  /* ndim dimensions, row-major; NULL when ndim is 0 (a scalar) */
  int ndim;
  int device;            /* RINGFOLD_CPU_DEVICE, or a CUDA device index */
  void* stream;          /* the cudaStream_t a GPU tensor's data is ordered on (NULL: the default
                            stream); must be NULL for CPU tensors */
} ringfold_tensor_t;

#define RINGFOLD_ALLREDUCE 0
#define RINGFOLD_ALLGATHER 1
#define RINGFOLD_BROADCAST 2
#define RINGFOLD_JOIN 3
#define RINGFOLD_ALLTOALL 5
#define RINGFOLD_BARRIER 6
#define RINGFOLD_REDUCESCATTER 7
/* ringfold's own (Horovod has no reduce): the root's output gets op over the ranks' inputs, by a
 * pipelined chain that carries the tensor once per link (half an allreduce's traffic); other
 * ranks' outputs are not written. CPU tensors only. */
#define RINGFOLD_REDUCE 8

typedef struct ringfold_op {
  int type;              /* RINGFOLD_ALLREDUCE ... (Horovod's request types) */
  const char* name;      /* NULL: auto-named */
  int reduce_op;         /* RINGFOLD_OP_*: allreduce, reducescatter, reduce */
  double prescale;       /* allreduce, reducescatter, reduce; 0 is taken as 1 (a zeroed struct works) */
  double postscale;
  int root;              /* broadcast, reduce */
  const int64_t* splits; /* alltoall: nsplits entries, or NULL with nsplits 0 (equal split) */
  int nsplits;
  int process_set;       /* 0: all ranks */
} ringfold_op_t;

/* Enqueues `op` on `input` (output: the caller's buffer for allreduce, broadcast and reduce, NULL for
 * operations whose output the engine allocates, and ignored by join and barrier, which take no
 * tensors: input may be NULL). input->stream orders a GPU tensor (see "GPU tensors"); a
 * non-NULL stream is refused for CPU tensors and by builds without CUDA. */
RINGFOLD_API int ringfold_enqueue(const ringfold_op_t* op, const ringfold_tensor_t* input,
                                  const ringfold_tensor_t* output, int64_t* handle) RINGFOLD_NOEXCEPT;

/* Asks to cancel the operation: it is cancelled only if it has not been agreed yet (still queued
 * here, not yet reported to the coordinator, or reported while some rank of the process set has
 * not submitted it: this rank's request is then withdrawn); it then completes with
 * RINGFOLD_ABORTED and the message "cancelled". An operation every rank already submitted (agreed)
 * runs to completion. Cancel it on every rank that submitted it, or the others stall. Returns OK
 * when the request was taken; wait to learn which happened. */
RINGFOLD_API int ringfold_cancel(int64_t handle) RINGFOLD_NOEXCEPT;

/* ---- completion --------------------------------------------------------------------------- */

/* 1 if the handle completed (successfully or not), 0 if not yet, or a negated status
 * (-RINGFOLD_INVALID_ARGUMENT for an unknown handle, -RINGFOLD_PRECONDITION_ERROR when not
 * initialized). */
RINGFOLD_API int ringfold_poll(int64_t handle) RINGFOLD_NOEXCEPT;
/* Waits until the handle completes or timeout_seconds pass (< 0: no limit) and returns the
 * operation's status (its message in ringfold_last_error), RINGFOLD_IN_PROGRESS on timeout.
 * The handle stays valid: release it. */
RINGFOLD_API int ringfold_wait(int64_t handle, double timeout_seconds) RINGFOLD_NOEXCEPT;
/* Forgets a completed handle and frees its result (PRECONDITION_ERROR if not complete). */
RINGFOLD_API int ringfold_release(int64_t handle) RINGFOLD_NOEXCEPT;

/* ---- results of a completed handle ----------------------------------------------------------
 * Each fails with PRECONDITION_ERROR if the handle has not completed, and returns the
 * operation's own status if it failed. The engine-allocated output (allgather, alltoall,
 * reducescatter) is described by ndim/shape/bytes; for other operations ndim and bytes are 0. */
RINGFOLD_API int ringfold_result_ndim(int64_t handle, int* ndim) RINGFOLD_NOEXCEPT;
/* Writes ndim dimensions; `capacity` (entries of `shape`) must be at least ndim. */
RINGFOLD_API int ringfold_result_shape(int64_t handle, int64_t* shape, int capacity) RINGFOLD_NOEXCEPT;
RINGFOLD_API int ringfold_result_bytes(int64_t handle, size_t* bytes) RINGFOLD_NOEXCEPT;
/* Copies the output to dst; `bytes` must equal ringfold_result_bytes (INVALID_ARGUMENT
 * otherwise, nothing copied). */
RINGFOLD_API int ringfold_result_copy(int64_t handle, void* dst, size_t bytes) RINGFOLD_NOEXCEPT;
/* Borrows the output: *data stays valid until ringfold_release(handle) (NULL when 0 bytes). */
RINGFOLD_API int ringfold_result_data(int64_t handle, const void** data) RINGFOLD_NOEXCEPT;
/* Alltoall: rows received from each rank of the process set (`capacity` >= its size). */
RINGFOLD_API int ringfold_result_received_splits(int64_t handle, int64_t* splits,
                                                 int capacity) RINGFOLD_NOEXCEPT;
/* Join: the rank (within the process set) that joined last. */
RINGFOLD_API int ringfold_join_last_rank(int64_t handle, int* rank) RINGFOLD_NOEXCEPT;

/* ---- the job's store ------------------------------------------------------------------------
 * The key-value store the ranks of the job meet through (ringfoldrun's, or the one rank 0 hosts),
 * for coordination above the engine: elastic training reads its membership tables here
 * (docs/elastic.md). Usable whether the engine is initialized or not (before init, and between
 * shutdown and the next init), from any thread.
 *   - Which store: the one init would use, from the same variables (RINGFOLD_STORE_ADDR/PORT and
 *     RINGFOLD_SECRET, or the other launchers' names; bindings read them at each call): a client
 *     connection to it; on the rank that hosts the store (rank 0 without ringfoldrun) the server
 *     is started here, and the engine's init reuses it. A job of one rank has no store unless
 *     RINGFOLD_STORE_ADDR, RINGFOLD_STORE_PORT and RINGFOLD_SECRET all name one (ringfoldrun's
 *     elastic mode sets them for an incarnation of one worker too); without them the store is
 *     this process's own, in memory. The connection is opened on first use (waiting up to
 *     RINGFOLD_START_TIMEOUT for the server) and kept; it is opened again when those variables
 *     change, after a call failed on it, and in a fork()ed child.
 *   - Keys are NUL-terminated text, values bytes (at most RINGFOLD_STORE_MAX_VALUE_BYTES).
 *   - Errors: a store that cannot be reached, or that closed the connection, is RINGFOLD_ABORTED
 *     (the message names it); one that refuses this process's secret is RINGFOLD_UNKNOWN_ERROR
 *     ("... wrong secret ..."); bad arguments are RINGFOLD_INVALID_ARGUMENT. */

/* Sets `key` to the `len` bytes at `value` (value may be NULL when len is 0), replacing any
 * earlier value. */
RINGFOLD_API int ringfold_store_set(const char* key, const void* value, size_t len) RINGFOLD_NOEXCEPT;
/* Waits until `key` exists (timeout_seconds < 0: no limit) and copies its value to `buf`;
 * *len is the value's length. RINGFOLD_IN_PROGRESS when the timeout passed first. A value longer
 * than `capacity` is not copied: RINGFOLD_INVALID_ARGUMENT with *len set to its length (call again
 * with a buffer that large). `buf` may be NULL when capacity is 0. */
RINGFOLD_API int ringfold_store_get(const char* key, double timeout_seconds, void* buf, size_t capacity,
                                    size_t* len) RINGFOLD_NOEXCEPT;
/* 1 if `key` exists, 0 if not (without waiting), or a negated status. */
RINGFOLD_API int ringfold_store_check(const char* key) RINGFOLD_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RINGFOLD_BINDINGS_C_RINGFOLD_H_ */
