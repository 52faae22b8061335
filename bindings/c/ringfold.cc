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

int enqueueOne(TensorArgs args, int64_t* handle) {
  const Session s = require();
  const Handle h = s.engine->enqueue(std::move(args));
  *handle = encodeHandle(s, h);
  return RINGFOLD_OK;
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

RINGFOLD_API int ringfold_allreduce_async(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                                          const char* name, int reduce_op, double prescale, double postscale,
                                          int process_set, int device, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_allreduce_async", [&] {
    require();
    requireOut(handle, "handle");
    size_t bytes = 0;
    TensorArgs a = tensorArgs(OpType::kAllreduce, input, dtype, shape, ndim, process_set, device, &bytes);
    requireReducible(a);
    if (bytes > 0 && output == nullptr) RF_THROW(ringfold::InvalidArgument, "output is NULL");
    a.output = output;
    a.reduceOp = toReduceOp(reduce_op);
    a.preScale = prescale;
    a.postScale = postscale;
    a.name = nameFor(name, a.op, process_set);
    return enqueueOne(std::move(a), handle);
  });
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
    const ReduceOp op = toReduceOp(reduce_op);
    std::vector<TensorArgs> args;
    for (int i = 0; i < count; ++i) {
      size_t bytes = 0;
      try {
        TensorArgs a = tensorArgs(OpType::kAllreduce, inputs[i], dtypes[i], shapes[i], ndims[i], process_set,
                                  device, &bytes);
        requireReducible(a);
        if (bytes > 0 && outputs[i] == nullptr) RF_THROW(ringfold::InvalidArgument, "output is NULL");
        a.output = outputs[i];
        a.reduceOp = op;
        a.preScale = prescale;
        a.postScale = postscale;
        args.push_back(std::move(a));
      } catch (const ringfold::InvalidArgument& e) {
        RF_THROW(ringfold::InvalidArgument, "tensor ", i, ": ", e.what());
      }
    }
    for (int i = 0; i < count; ++i) args[i].name = nameFor(names ? names[i] : nullptr, OpType::kAllreduce, process_set);
    const std::vector<Handle> hs = s.engine->enqueueGroup(std::move(args));
    for (int i = 0; i < count; ++i) handles[i] = encodeHandle(s, hs[i]);
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_allgather_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                          const char* name, int process_set, int device, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_allgather_async", [&] {
    require();
    requireOut(handle, "handle");
    size_t bytes = 0;
    TensorArgs a = tensorArgs(OpType::kAllgather, input, dtype, shape, ndim, process_set, device, &bytes);
    a.name = nameFor(name, a.op, process_set);
    return enqueueOne(std::move(a), handle);
  });
}

RINGFOLD_API int ringfold_broadcast_async(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                                          int root, const char* name, int process_set, int device,
                                          int64_t* handle) noexcept {
  return enqueueGuard("ringfold_broadcast_async", [&] {
    require();
    requireOut(handle, "handle");
    size_t bytes = 0;
    TensorArgs a = tensorArgs(OpType::kBroadcast, input, dtype, shape, ndim, process_set, device, &bytes);
    if (bytes > 0 && output == nullptr) RF_THROW(ringfold::InvalidArgument, "output is NULL");
    a.output = output;
    a.root = root;
    a.name = nameFor(name, a.op, process_set);
    return enqueueOne(std::move(a), handle);
  });
}

RINGFOLD_API int ringfold_alltoall_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                         const int64_t* splits, int nsplits, const char* name, int process_set,
                                         int device, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_alltoall_async", [&] {
    const Session s = require();
    requireOut(handle, "handle");
    size_t bytes = 0;
    TensorArgs a = tensorArgs(OpType::kAlltoall, input, dtype, shape, ndim, process_set, device, &bytes);
    a.splits = alltoallSplits(s, splits, nsplits, process_set, a.shape);
    a.name = nameFor(name, a.op, process_set);
    return enqueueOne(std::move(a), handle);
  });
}

RINGFOLD_API int ringfold_reducescatter_async(const void* input, int dtype, const int64_t* shape, int ndim,
                                              const char* name, int reduce_op, double prescale, double postscale,
                                              int process_set, int device, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_reducescatter_async", [&] {
    require();
    requireOut(handle, "handle");
    size_t bytes = 0;
    TensorArgs a = tensorArgs(OpType::kReducescatter, input, dtype, shape, ndim, process_set, device, &bytes);
    requireReducible(a);
    a.reduceOp = toReduceOp(reduce_op);
    a.preScale = prescale;
    a.postScale = postscale;
    a.name = nameFor(name, a.op, process_set);
    return enqueueOne(std::move(a), handle);
  });
}

RINGFOLD_API int ringfold_join_async(int process_set, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_join_async", [&] {
    Session s = require();
    requireOut(handle, "handle");
    *handle = encodeHandle(s, s.engine->join(process_set));
    return RINGFOLD_OK;
  });
}

RINGFOLD_API int ringfold_barrier_async(int process_set, int64_t* handle) noexcept {
  return enqueueGuard("ringfold_barrier_async", [&] {
    Session s = require();
    requireOut(handle, "handle");
    *handle = encodeHandle(s, s.engine->barrier(process_set));
    return RINGFOLD_OK;
  });
}

// ---- completion ---------------------------------------------------------------------------------

RINGFOLD_API int ringfold_enqueue(const ringfold_op_t* op, const ringfold_tensor_t* input,
                                  const ringfold_tensor_t* output, int64_t* handle) noexcept {
  const int rc = guard("ringfold_enqueue", [&] {
    requireOut(op, "op");
    requireOut(handle, "handle");
    const bool tensorless = op->type == RINGFOLD_JOIN || op->type == RINGFOLD_BARRIER;
    if (!tensorless) requireOut(input, "input");
    for (const ringfold_tensor_t* t : {input, output}) {
      if (t && t->stream != nullptr && !ringfold::engine::deviceOpsBuilt()) {
        RF_THROW(ringfold::InvalidArgument, "a CUDA stream was given, but this ringfold build has no CUDA support");
      }
      if (t && t->stream != nullptr && t->device == RINGFOLD_CPU_DEVICE) {
        RF_THROW(ringfold::InvalidArgument, "a CUDA stream was given for a CPU tensor (device RINGFOLD_CPU_DEVICE)");
      }
    }
    return RINGFOLD_OK;
  });
  if (rc != RINGFOLD_OK) return rc;
  const EnqueueStream stream(input != nullptr ? input->stream : nullptr);  // read by tensorArgs()
  const double pre = op->prescale == 0.0 ? 1.0 : op->prescale;
  const double post = op->postscale == 0.0 ? 1.0 : op->postscale;
  void* out = output ? const_cast<void*>(output->data) : nullptr;
  switch (op->type) {
    case RINGFOLD_ALLREDUCE:
      return ringfold_allreduce_async(input->data, out, input->dtype, input->shape, input->ndim, op->name,
                                      op->reduce_op, pre, post, op->process_set, input->device, handle);
    case RINGFOLD_ALLGATHER:
      return ringfold_allgather_async(input->data, input->dtype, input->shape, input->ndim, op->name,
                                      op->process_set, input->device, handle);
    case RINGFOLD_BROADCAST:
      return ringfold_broadcast_async(input->data, out, input->dtype, input->shape, input->ndim, op->root, op->name,
                                      op->process_set, input->device, handle);
    case RINGFOLD_ALLTOALL:
      return ringfold_alltoall_async(input->data, input->dtype, input->shape, input->ndim, op->splits, op->nsplits,
                                     op->name, op->process_set, input->device, handle);
    case RINGFOLD_REDUCESCATTER:
      return ringfold_reducescatter_async(input->data, input->dtype, input->shape, input->ndim, op->name,
                                          op->reduce_op, pre, post, op->process_set, input->device, handle);
    case RINGFOLD_JOIN:
      return ringfold_join_async(op->process_set, handle);
    case RINGFOLD_BARRIER:
      return ringfold_barrier_async(op->process_set, handle);
    default:
      return guard("ringfold_enqueue", [&]() -> int {
        RF_THROW(ringfold::InvalidArgument, "unknown operation type ", op->type,
                 " (RINGFOLD_ALLREDUCE, _ALLGATHER, _BROADCAST, _JOIN, _ALLTOALL, _BARRIER or _REDUCESCATTER)");
      });
  }
}

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

