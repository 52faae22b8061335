// The C ABI (ringfold.h): lifecycle, queries, timeline, collectives, completion and results.
// Process sets are in process_sets.cc; errors, state, arguments and handles in capi.{h,cc}.
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings/c/capi.h"
#include "engine/device_ops.h"
#include "common/logging.h"

#ifndef RINGFOLD_LIBRARY_VERSION
#define RINGFOLD_LIBRARY_VERSION "unknown"
#endif

using namespace ringfold::capi;
using ringfold::ReduceOp;
using ringfold::detail::concat;

namespace {

int initOrLog(const char* fn, const int* ranks, int nranks, const int* psRanks, const int* psSizes, int numPs) {
  const int rc = guard(fn, [&] {
    initialize(ranks, nranks, psRanks, psSizes, numPs);
    return RINGFOLD_OK;
  });
  if (rc != RINGFOLD_OK) {
    RF_LOG(kError) << lastError();
  }
  return rc;
}

OpType opTypeOf(int type) {
  switch (type) {
    case RINGFOLD_ALLREDUCE:
      return OpType::kAllreduce;
    case RINGFOLD_ALLGATHER:
      return OpType::kAllgather;
    case RINGFOLD_BROADCAST:
      return OpType::kBroadcast;
    case RINGFOLD_JOIN:
      return OpType::kJoin;
    case RINGFOLD_ALLTOALL:
      return OpType::kAlltoall;
    case RINGFOLD_BARRIER:
      return OpType::kBarrier;
    case RINGFOLD_REDUCESCATTER:
      return OpType::kReducescatter;
    case RINGFOLD_REDUCE:
      return OpType::kReduce;
    default:
      RF_THROW(ringfold::InvalidArgument, "unknown operation type ", type,
               " (RINGFOLD_ALLREDUCE, _ALLGATHER, _BROADCAST, _JOIN, _ALLTOALL, _BARRIER, _REDUCESCATTER or _REDUCE)");
  }
}

// ringfold_enqueue's implementation, which the *_async shorthands call too; `fn` is the exported
// function the error message names. Translates the structs into the engine's TensorArgs (codes,
// and the caller's arrays after checking their lengths); the engine checks the tensor.
int enqueue(const char* fn, const ringfold_op_t* op, const ringfold_tensor_t* input, const ringfold_tensor_t* output,
            int64_t* handle) noexcept {
  return enqueueGuard(fn, [&] {
    requireOut(op, "op");
    const Session s = require();
    requireOut(handle, "handle");
    const OpType type = opTypeOf(op->type);
    if (type == OpType::kJoin || type == OpType::kBarrier) {  // no tensors: input may be NULL
      const Handle h = type == OpType::kJoin ? s.engine->join(op->process_set) : s.engine->barrier(op->process_set);
      *handle = encodeHandle(s, h);
      return RINGFOLD_OK;
    }
    requireOut(input, "input");
    if (output != nullptr) ringfold::engine::checkStream(output->stream, output->device);
    TensorArgs a = tensorArgs(type, *input, op->process_set);
    if (ringfold::engine::reduces(type)) {
      a.reduceOp = ringfold::engine::reduceOpFromHorovodCode(op->reduce_op);
      a.preScale = op->prescale;
      a.postScale = op->postscale;
    }
    if (ringfold::engine::writesCallerOutput(type)) {
      a.output = output != nullptr ? const_cast<void*>(output->data) : nullptr;
    }
    if (ringfold::engine::rooted(type)) a.root = op->root;
    if (type == OpType::kAlltoall) a.splits = alltoallSplits(s, op->splits, op->nsplits, op->process_set);
    a.name = nameFor(op->name, type, op->process_set);
    *handle = encodeHandle(s, s.engine->enqueue(std::move(a)));
    return RINGFOLD_OK;
  });
}

}  // namespace

extern "C" {

RINGFOLD_API const char* ringfold_last_error(void) noexcept {
  return lastError();
}

RINGFOLD_API const char* ringfold_version(void) noexcept {
  clearError();
  return RINGFOLD_LIBRARY_VERSION;
}

RINGFOLD_API int ringfold_init(const int* ranks, int nranks, const int* ps_ranks, const int* ps_sizes,
                               int num_ps) noexcept {
  return initOrLog("ringfold_init", ranks, nranks, ps_ranks, ps_sizes, num_ps);
}

RINGFOLD_API bool horovod_init(const int* ranks, int nranks, const int* ps_ranks, const int* ps_sizes,
                               int num_ps) noexcept {
  return initOrLog("horovod_init", ranks, nranks, ps_ranks, ps_sizes, num_ps) == RINGFOLD_OK;
}

RINGFOLD_API int ringfold_shutdown(void) noexcept {
  return guard("ringfold_shutdown", [] {
    shutdown();
    return RINGFOLD_OK;
  });
}

RINGFOLD_API void horovod_shutdown(void) noexcept {
  guard("horovod_shutdown", [] {
    shutdown();
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int horovod_is_initialized(void) noexcept {
  return guardOr("horovod_is_initialized", 0, [] { return current().engine ? 1 : 0; });
}

#define RF_TOPOLOGY_QUERY(fn, expr)                 \
  RINGFOLD_API int fn(void) noexcept {              \
    return guardOr(#fn, -1, [] {                    \
      const Session s = require();                  \
      [[maybe_unused]] const Engine& e = *s.engine; \
      return static_cast<int>(expr);                \
    });                                             \
  }
RF_TOPOLOGY_QUERY(horovod_rank, e.rank())
RF_TOPOLOGY_QUERY(horovod_size, e.size())
RF_TOPOLOGY_QUERY(horovod_local_rank, e.topology().localRank)
RF_TOPOLOGY_QUERY(horovod_local_size, e.topology().localSize)
RF_TOPOLOGY_QUERY(horovod_cross_rank, e.topology().crossRank)
RF_TOPOLOGY_QUERY(horovod_cross_size, e.topology().crossSize)
RF_TOPOLOGY_QUERY(horovod_mpi_threads_supported, 0)
#undef RF_TOPOLOGY_QUERY

RINGFOLD_API bool horovod_is_homogeneous(void) noexcept {
  return guardOr("horovod_is_homogeneous", false, [] {
    return require().engine->topology().homogeneous;
  });
}

RINGFOLD_API bool horovod_mpi_enabled(void) noexcept { clearError(); return false; }
RINGFOLD_API bool horovod_mpi_built(void) noexcept { clearError(); return false; }
RINGFOLD_API bool horovod_gloo_enabled(void) noexcept { clearError(); return false; }
RINGFOLD_API bool horovod_gloo_built(void) noexcept { clearError(); return false; }
RINGFOLD_API int horovod_nccl_built(void) noexcept { clearError(); return 0; }
RINGFOLD_API bool horovod_ddl_built(void) noexcept { clearError(); return false; }
RINGFOLD_API bool horovod_ccl_built(void) noexcept { clearError(); return false; }
// True when the CUDA kernels were built, which is when the engine takes GPU tensors (allreduce
// and broadcast); whether a GPU is present is a run-time matter (ringfold_cuda_device()).
RINGFOLD_API bool horovod_cuda_built(void) noexcept { clearError(); return ringfold::engine::deviceOpsBuilt(); }
RINGFOLD_API int ringfold_cuda_device(void) noexcept {
  return guardOr("ringfold_cuda_device", -1, [] { return require().engine->cudaDevice(); });
}
RINGFOLD_API bool horovod_rocm_built(void) noexcept { clearError(); return false; }

RINGFOLD_API int horovod_reduce_op_average(void) noexcept { clearError(); return RINGFOLD_OP_AVERAGE; }
RINGFOLD_API int horovod_reduce_op_sum(void) noexcept { clearError(); return RINGFOLD_OP_SUM; }
RINGFOLD_API int horovod_reduce_op_adasum(void) noexcept { clearError(); return RINGFOLD_OP_ADASUM; }
RINGFOLD_API int horovod_reduce_op_min(void) noexcept { clearError(); return RINGFOLD_OP_MIN; }
RINGFOLD_API int horovod_reduce_op_max(void) noexcept { clearError(); return RINGFOLD_OP_MAX; }
RINGFOLD_API int horovod_reduce_op_product(void) noexcept { clearError(); return RINGFOLD_OP_PRODUCT; }

// ---- timeline ---------------------------------------------------------------------------------

RINGFOLD_API int horovod_start_timeline(const char* file_name, bool mark_cycles) noexcept {
  const char* fn = "horovod_start_timeline";
  return guardOr(fn, -3, [&]() -> int {
    const Session s = current();
    if (!s.engine) {
      setError(fn, "ringfold is not initialized");
      return -1;
    }
    if (file_name == nullptr || *file_name == '\0') {
      setError(fn, "file_name is NULL or empty");
      return -3;
    }
    s.engine->startTimeline(file_name, mark_cycles);
    return 1;
  });
}

RINGFOLD_API int horovod_stop_timeline(void) noexcept {
  const char* fn = "horovod_stop_timeline";
  return guardOr(fn, -3, [&]() -> int {
    const Session s = current();
    if (!s.engine) {
      setError(fn, "ringfold is not initialized");
      return -1;
    }
    s.engine->stopTimeline();
    return 1;
  });
}

// ---- collectives --------------------------------------------------------------------------------

// The shorthands: each fills ringfold_enqueue's structs (no stream: GPU tensors use the default
// stream) and calls its implementation. Grouped allreduce, several tensors at once, is the one
// with a body of its own.

RINGFOLD_API int ringfold_allreduce_async(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                                          const char* name, int reduce_op, double prescale, double postscale,
                                          int process_set, int device, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_ALLREDUCE, name, reduce_op, prescale, postscale, 0, nullptr, 0, process_set};
  const ringfold_tensor_t in{input, dtype, shape, ndim, device, nullptr};
  const ringfold_tensor_t out{output, dtype, shape, ndim, device, nullptr};
  return enqueue("ringfold_allreduce_async", &op, &in, &out, handle);
}

RINGFOLD_API int ringfold_grouped_allreduce_async(int count, const void* const* inputs, void* const* outputs,
                                                  const int* dtypes, const int64_t* const* shapes, const int* ndims,
                                                  const char* const* names, int reduce_op, double prescale,
                                                  double postscale, int process_set, int device,
                                                  int64_t* handles) noexcept {
  return enqueueGuard("ringfold_grouped_allreduce_async", [&] {
    Session s = require();
    if (count < 0) RF_THROW(ringfold::InvalidArgument, "count is ", count);
    if (count == 0) return RINGFOLD_OK;
    requireOut(inputs, "inputs");
    requireOut(outputs, "outputs");
    requireOut(dtypes, "dtypes");
    requireOut(shapes, "shapes");
    requireOut(ndims, "ndims");
    requireOut(handles, "handles");
    const ReduceOp op = ringfold::engine::reduceOpFromHorovodCode(reduce_op);
    std::vector<TensorArgs> args;
    for (int i = 0; i < count; ++i) {
      try {
        const ringfold_tensor_t t{inputs[i], dtypes[i], shapes[i], ndims[i], device, nullptr};
        args.push_back(tensorArgs(OpType::kAllreduce, t, process_set));
      } catch (const ringfold::InvalidArgument& e) {
        RF_THROW(ringfold::InvalidArgument, "tensor ", i, ": ", e.what());  // as Engine::enqueueGroup says it
      }
      TensorArgs& a = args.back();
      a.output = outputs[i];
      a.reduceOp = op;
      a.preScale = prescale;
      a.postScale = postscale;
    }
    for (int i = 0; i < count; ++i) args[i].name = nameFor(names ? names[i] : nullptr, OpType::kAllreduce, process_set);
    const std::vector<Handle> hs = s.engine->enqueueGroup(std::move(args));
    for (int i = 0; i < count; ++i) handles[i] = encodeHandle(s, hs[i]);
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_allgather_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                          const char* name, int process_set, int device, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_ALLGATHER, name, 0, 1.0, 1.0, 0, nullptr, 0, process_set};
  const ringfold_tensor_t in{input, dtype, shape, ndim, device, nullptr};
  return enqueue("ringfold_allgather_async", &op, &in, nullptr, handle);
}

RINGFOLD_API int ringfold_broadcast_async(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                                          int root, const char* name, int process_set, int device,
                                          int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_BROADCAST, name, 0, 1.0, 1.0, root, nullptr, 0, process_set};
  const ringfold_tensor_t in{input, dtype, shape, ndim, device, nullptr};
  const ringfold_tensor_t out{output, dtype, shape, ndim, device, nullptr};
  return enqueue("ringfold_broadcast_async", &op, &in, &out, handle);
}

RINGFOLD_API int ringfold_alltoall_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                         const int64_t* splits, int nsplits, const char* name, int process_set,
                                         int device, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_ALLTOALL, name, 0, 1.0, 1.0, 0, splits, nsplits, process_set};
  const ringfold_tensor_t in{input, dtype, shape, ndim, device, nullptr};
  return enqueue("ringfold_alltoall_async", &op, &in, nullptr, handle);
}

RINGFOLD_API int ringfold_reducescatter_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                              const char* name, int reduce_op, double prescale, double postscale,
                                              int process_set, int device, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_REDUCESCATTER, name, reduce_op, prescale, postscale, 0, nullptr, 0, process_set};
  const ringfold_tensor_t in{input, dtype, shape, ndim, device, nullptr};
  return enqueue("ringfold_reducescatter_async", &op, &in, nullptr, handle);
}

RINGFOLD_API int ringfold_join_async(int process_set, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_JOIN, nullptr, 0, 1.0, 1.0, 0, nullptr, 0, process_set};
  return enqueue("ringfold_join_async", &op, nullptr, nullptr, handle);
}

RINGFOLD_API int ringfold_barrier_async(int process_set, int64_t* handle) noexcept {
  const ringfold_op_t op{RINGFOLD_BARRIER, nullptr, 0, 1.0, 1.0, 0, nullptr, 0, process_set};
  return enqueue("ringfold_barrier_async", &op, nullptr, nullptr, handle);
}

// The one entry point. Its structs differ from the shorthands' arguments only in that a zero
// scale factor is taken as 1 (so a zeroed ringfold_op_t works).
RINGFOLD_API int ringfold_enqueue(const ringfold_op_t* op, const ringfold_tensor_t* input,
                                  const ringfold_tensor_t* output, int64_t* handle) noexcept {
  if (op == nullptr) return enqueue("ringfold_enqueue", nullptr, input, output, handle);
  ringfold_op_t o = *op;
  if (o.prescale == 0.0) o.prescale = 1.0;
  if (o.postscale == 0.0) o.postscale = 1.0;
  return enqueue("ringfold_enqueue", &o, input, output, handle);
}

// ---- completion ---------------------------------------------------------------------------------

RINGFOLD_API int ringfold_cancel(int64_t handle) noexcept {
  return guard("ringfold_cancel", [&] {
    Session s = require();
    withHandle(s, handle, [&](Handle h) {
      s.engine->cancel(h);
      return true;
    });
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_poll(int64_t handle) noexcept {
  bool done = false;
  const int rc = guard("ringfold_poll", [&] {
    Session s = require();
    done = withHandle(s, handle, [&](Handle h) { return s.engine->handles().poll(h); });
    return RINGFOLD_OK;
  });
  if (rc != RINGFOLD_OK) return -rc;
  return done ? 1 : 0;
}

RINGFOLD_API int ringfold_wait(int64_t handle, double timeout_seconds) noexcept {
  return guard("ringfold_wait", [&] {
    Session s = require();
    if (std::isnan(timeout_seconds)) RF_THROW(ringfold::InvalidArgument, "timeout_seconds is NaN");
    std::optional<std::chrono::milliseconds> timeout;
    if (timeout_seconds >= 0 && timeout_seconds < 365.0 * 24 * 3600) {
      timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(timeout_seconds * 1000.0)));
    }
    const Result* r = withHandle(s, handle, [&](Handle h) { return s.engine->handles().wait(h, timeout); });
    if (r == nullptr) {
      setError("ringfold_wait", concat("handle ", handle, " did not complete within ", timeout_seconds, " s"));
      return RINGFOLD_IN_PROGRESS;
    }
    if (!r->status.ok()) {
      setError(nullptr, r->status.message);  // the group's message, verbatim
      return static_cast<int>(r->status.code);
    }
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_release(int64_t handle) noexcept {
  return guard("ringfold_release", [&] {
    Session s = require();
    withHandle(s, handle, [&](Handle h) {
      if (!s.engine->handles().poll(h)) {
        precondition(concat("handle ", handle,
                            " has not completed; the engine may still use its buffers (ringfold_wait first)"));
      }
      s.engine->handles().release(h);
      return 0;
    });
    return RINGFOLD_OK;
  });
}

// ---- results ------------------------------------------------------------------------------------

RINGFOLD_API int ringfold_result_ndim(int64_t handle, int* ndim) noexcept {
  return guard("ringfold_result_ndim", [&] {
    Session s = require();
    requireOut(ndim, "ndim");
    *ndim = static_cast<int>(completedResult(s, handle).shape.size());
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_result_shape(int64_t handle, int64_t* shape, int capacity) noexcept {
  return guard("ringfold_result_shape", [&] {
    Session s = require();
    const Result& r = completedResult(s, handle);
    if (capacity < static_cast<int>(r.shape.size())) {
      RF_THROW(ringfold::InvalidArgument, "capacity ", capacity, " is less than the result's ", r.shape.size(),
               " dimensions");
    }
    if (!r.shape.empty()) requireOut(shape, "shape");
    std::copy(r.shape.begin(), r.shape.end(), shape);
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_result_bytes(int64_t handle, size_t* bytes) noexcept {
  return guard("ringfold_result_bytes", [&] {
    Session s = require();
    requireOut(bytes, "bytes");
    *bytes = completedResult(s, handle).outputBytes;
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_result_copy(int64_t handle, void* dst, size_t bytes) noexcept {
  return guard("ringfold_result_copy", [&] {
    Session s = require();
    const Result& r = completedResult(s, handle);
    if (bytes != r.outputBytes) {
      RF_THROW(ringfold::InvalidArgument, "handle ", handle, " has a result of ", r.outputBytes, " bytes, not ", bytes,
               r.outputBytes == 0 ? " (allreduce and broadcast write into the caller's output)" : "");
    }
    if (bytes > 0) {
      requireOut(dst, "dst");
      std::memcpy(dst, r.output.get(), bytes);
    }
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_result_data(int64_t handle, const void** data) noexcept {
  return guard("ringfold_result_data", [&] {
    Session s = require();
    requireOut(data, "data");
    const Result& r = completedResult(s, handle);
    *data = r.outputBytes > 0 ? r.output.get() : nullptr;
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_result_received_splits(int64_t handle, int64_t* splits, int capacity) noexcept {
  return guard("ringfold_result_received_splits", [&] {
    Session s = require();
    const Result& r = completedResult(s, handle);
    if (r.receivedSplits.empty()) {
      RF_THROW(ringfold::InvalidArgument, "handle ", handle, " has no received splits (only alltoall has them)");
    }
    if (capacity < static_cast<int>(r.receivedSplits.size())) {
      RF_THROW(ringfold::InvalidArgument, "capacity ", capacity, " is less than the ", r.receivedSplits.size(),
               " ranks of the process set");
    }
    requireOut(splits, "splits");
    std::copy(r.receivedSplits.begin(), r.receivedSplits.end(), splits);
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_join_last_rank(int64_t handle, int* rank) noexcept {
  return guard("ringfold_join_last_rank", [&] {
    Session s = require();
    requireOut(rank, "rank");
    const Result& r = completedResult(s, handle);
    if (r.lastJoinedRank < 0) RF_THROW(ringfold::InvalidArgument, "handle ", handle, " is not a join");
    *rank = r.lastJoinedRank;
    return RINGFOLD_OK;
  });
}

}  // extern "C"

