#include "engine/operations.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <string>

#include "collectives/collectives.h"
#include "common/error.h"
#include "engine/timeline.h"
#include "engine/traced_reducer.h"

namespace ringfold::engine {

int64_t reducescatterRows(int64_t rows, int rank, int size) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

namespace {

int64_t rowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// "170.7 MiB (178956971 bytes)"
std::string sizeText(uint64_t bytes) {
  char text[32];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  } else if (bytes >= (uint64_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    return std::to_string(bytes) + " bytes";
  }
  return detail::concat(text, " (", bytes, " bytes)");
}

std::string tensorText(const Response& r) { return detail::concat(opTypeLowerName(r.op), " '", r.name, "'"); }

// An allocation failure that the members did not agree on (a small batch): it stops the engine
// on this rank, which then aborts its communicators with this message (engine.h).
[[noreturn]] void outOfMemory(const Response& r, int globalRank, uint64_t bytes) {
  RF_THROW(Error, tensorText(r), ": out of memory: rank ", globalRank, " could not allocate ", sizeText(bytes),
           " (an operation this small is not checked on every rank first, so ringfold stops on this rank)");
}

// The engine-allocated output of `shape`; on std::bad_alloc, none, and *failed holds its size.
Result allocated(DataType dtype, std::vector<int64_t> shape, uint64_t* failed) {
  Result res;
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  res.outputBytes = static_cast<size_t>(elements) * dataTypeSize(dtype);
  res.shape = std::move(shape);
  try {
    res.output = std::make_unique_for_overwrite<std::byte[]>(res.outputBytes);
  } catch (const std::bad_alloc&) {
    *failed += res.outputBytes;
  }
  return res;
}

// Grows `buffer` (contents dropped) to `bytes`, freeing the old one first so the peak is the new
// size; if that fails, tries to get the old size back. False when `bytes` could not be had.
bool grow(std::unique_ptr<std::byte[]>& buffer, size_t& capacity, size_t bytes) {
  if (capacity >= bytes) return true;
  const size_t old = capacity;
  buffer.reset();
  capacity = 0;
  try {
    buffer = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity = bytes;
    return true;
  } catch (const std::bad_alloc&) {
  }
  try {
    if (old > 0) buffer = std::make_unique_for_overwrite<std::byte[]>(old);
    capacity = old;
  } catch (const std::bad_alloc&) {
  }
  return false;
}

Result failedResult(const std::string& message) {
  Result res;
  res.status = {StatusCode::kUnknownError, message};
  return res;
}

std::string transportActivity(Communicator& comm, OpType op) {
  std::string name = comm.transportName();
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name + "_" + opTypeName(op);
}

}  // namespace

Operations::Operations(Timeline* timeline, int localRank)
    : timeline_(timeline), localRank_(localRank), deviceOps_(makeDeviceOps()) {}
Operations::~Operations() = default;

bool Operations::tracing() const { return timeline_ && timeline_->active(); }

void Operations::activity(const std::vector<const Response*>& members, const char* name) {
  if (!tracing()) return;
  for (const Response* r : members) timeline_->activityStart(r->name, name);
}

void Operations::activityEnd(const std::vector<const Response*>& members) {
  if (!tracing()) return;
  for (const Response* r : members) timeline_->activityEnd(r->name);
}

std::vector<Result> Operations::run(ProcessSet& set, const std::vector<Response>& responses,
                                    const Batch& batch, std::vector<std::optional<TensorEntry>>& entries) {
  Communicator& comm = set.comm();
  std::vector<const Response*> members;
  for (size_t i : batch.members) members.push_back(&responses[i]);
  const Response& head = *members.front();
  // Every reduction of this batch is recorded on its first tensor's row.
  TracedReducer reducer(timeline_, comm.reducer(), tracing() ? head.name : "");
  if (tracing()) {
    for (const Response* r : members) timeline_->opStart(r->name, opTypeName(r->op));
  }
  const std::string transport = transportActivity(comm, head.op);
  std::vector<Result> results(members.size());
  switch (head.op) {
    case OpType::kAllreduce:
      if (std::string error = allreduce(set, members, entries, reducer); !error.empty()) {
        for (Result& r : results) r = failedResult(error);
      }
      break;
    case OpType::kAllgather:
      activity(members, transport.c_str());
      results[0] = allgather(set, head, *entries[0]);
      activityEnd(members);
      break;
    case OpType::kBroadcast: {
      activity(members, transport.c_str());
      const TensorEntry& e = *entries[0];
      if (e.request.device != kCpuDevice) {
        RF_ENFORCE(deviceOps_ != nullptr, "GPU broadcast in a build without CUDA");
        deviceOps_->broadcast(comm, e.request.device, {e.input, e.output, responseBytes(head), e.stream}, head.dtype,
                              head.root);
      } else {
        broadcast(comm, {e.input, e.output, static_cast<size_t>(head.elements), head.dtype, head.root});
      }
      bytesMoved_ += responseBytes(head);
      activityEnd(members);
      break;
    }
    case OpType::kReduce: {  // CPU only (Engine::checkDevice): a chain to the root, half an allreduce's traffic
      activity(members, transport.c_str());
      const TensorEntry& e = *entries[0];
      ReduceOptions o{e.input, e.output, static_cast<size_t>(head.elements), head.dtype, head.reduceOp,
                      head.root, head.preScale, head.postScale};
      o.reducer = &reducer;
      ringfold::reduce(comm, o);
      bytesMoved_ += responseBytes(head);
      activityEnd(members);
      break;
    }
    case OpType::kAlltoall:
      activity(members, transport.c_str());
      results[0] = alltoall(set, head, *entries[0]);
      activityEnd(members);
      break;
    case OpType::kReducescatter:
      activity(members, transport.c_str());
      results[0] = reducescatter(set, head, *entries[0], reducer);
      activityEnd(members);
      break;
    case OpType::kBarrier:
      activity(members, transport.c_str());
      barrier(comm);
      activityEnd(members);
      break;
    default:
      RF_THROW(Error, "Operations::run cannot run ", opTypeLowerName(head.op));
  }
  if (tracing()) {
    for (const Response* r : members) timeline_->opEnd(r->name, dataTypeName(r->dtype), r->shape);
  }
  return results;
}

std::string Operations::agreeOnMemory(ProcessSet& set, const Response& head, size_t fused, uint64_t batchBytes,
                                      uint64_t failedBytes) {
  Communicator& comm = set.comm();
  std::vector<uint64_t> failed(comm.size());
  ringfold::allgather(comm, {&failedBytes, failed.data(), 1, DataType::kUint64});
  std::string who;
  for (int r = 0; r < comm.size(); ++r) {
    if (failed[r] == 0) continue;
    who += detail::concat(who.empty() ? "" : ", ", "rank ", set.ranks()[r], " could not allocate ", sizeText(failed[r]));
  }
  if (who.empty()) return "";
  const std::string size =
      fused > 1 ? detail::concat(" and ", fused - 1, fused == 2 ? " other tensor" : " other tensors", " fused with it, ",
                                 sizeText(batchBytes), " in all")
                : " of " + sizeText(batchBytes);
  return detail::concat(tensorText(head), size, ": out of memory: ", who,
                        "; the operation failed on every rank, and later operations run as usual");
}

std::string Operations::checkMemory(ProcessSet& set, const Response& r, uint64_t batchBytes, uint64_t failedBytes) {
  if (batchBytes >= kAgreeMinBytes) return agreeOnMemory(set, r, 1, batchBytes, failedBytes);
  if (failedBytes) outOfMemory(r, set.ranks()[set.comm().rank()], failedBytes);
  return "";
}

std::string Operations::allreduce(ProcessSet& set, const std::vector<const Response*>& members,
                                  std::vector<std::optional<TensorEntry>>& entries, Reducer& reducer) {
  Communicator& comm = set.comm();
  const Response& head = *members.front();
  const std::string transport = transportActivity(comm, OpType::kAllreduce);
  if (head.device != kCpuDevice) {
    deviceAllreduce(comm, members, entries);
    return "";
  }
  uint64_t total = 0;
  for (const Response* r : members) total += responseBytes(*r);
  const size_t es = dataTypeSize(head.dtype);
  if (members.size() == 1 && entries[0]) {
    bytesMoved_ += total;
    const TensorEntry& e = *entries[0];
    activity(members, transport.c_str());
    AllreduceOptions o{e.input, e.output, static_cast<size_t>(head.elements), head.dtype,
                       head.reduceOp, head.preScale, head.postScale};
    o.reducer = &reducer;
    ringfold::allreduce(comm, o);
    activityEnd(members);
    return "";
  }
  // Several tensors, or a joined rank's zeros: through the fusion buffer. Every member runs the
  // same batches of this set, so whether a fused batch is larger than any the set agreed on
  // before is the same question everywhere (a joined rank alone in a batch of one is not asked).
  const bool grown = grow(fusion_, fusionBytes_, total);
  uint64_t& agreed = fusionAgreed_[set.id()];
  if (members.size() > 1 && total >= kAgreeMinBytes && total > agreed) {
    std::string error = agreeOnMemory(set, head, members.size(), total, grown ? 0 : total);
    if (!error.empty()) return error;
    agreed = total;
  } else if (!grown) {
    outOfMemory(head, set.ranks()[comm.rank()], total);
  }
  bytesMoved_ += total;
  std::byte* fusion = fusion_.get();
  activity(members, "MEMCPY_IN_FUSION_BUFFER");
  size_t offset = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t bytes = responseBytes(*members[i]);
    if (entries[i]) {
      if (bytes) std::memcpy(fusion + offset, entries[i]->input, bytes);
    } else {
      std::memset(fusion + offset, 0, bytes);
    }
    offset += bytes;
  }
  activityEnd(members);
  activity(members, transport.c_str());
  AllreduceOptions o{fusion, fusion, total / es, head.dtype, head.reduceOp, head.preScale, head.postScale};
  o.reducer = &reducer;
  ringfold::allreduce(comm, o);
  activityEnd(members);
  activity(members, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t bytes = responseBytes(*members[i]);
    if (entries[i] && bytes) std::memcpy(entries[i]->output, fusion + offset, bytes);
    offset += bytes;
  }
  activityEnd(members);
  return "";
}

int Operations::localDevice(const std::vector<std::optional<TensorEntry>>& entries, const Response& head) {
  for (const auto& e : entries) {
    if (e) return e->request.device;
  }
  const int device = defaultCudaDevice(localRank_, deviceOps_->deviceCount());  // a joined rank
  if (device < 0) {
    RF_THROW(InvalidArgument, "allreduce '", head.name, "' is on GPU on the other ranks, but this joined rank has no CUDA device");
  }
  return device;
}

void Operations::deviceAllreduce(Communicator& comm, const std::vector<const Response*>& members,
                                 std::vector<std::optional<TensorEntry>>& entries) {
  const Response& head = *members.front();
  RF_ENFORCE(deviceOps_ != nullptr, "GPU allreduce in a build without CUDA");
  const int device = localDevice(entries, head);
  std::vector<DeviceTensor> tensors;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t bytes = responseBytes(*members[i]);
    bytesMoved_ += bytes;
    if (!entries[i]) {
      tensors.push_back({nullptr, nullptr, bytes, nullptr});
      continue;
    }
    if (entries[i]->request.device != device) {
      RF_THROW(InvalidArgument, "allreduce '", members[i]->name, "' is on GPU ", entries[i]->request.device,
               " but was fused with '", members.front()->name, "' on GPU ", device);
    }
    tensors.push_back({entries[i]->input, entries[i]->output, bytes, entries[i]->stream});
  }
  const std::string transport = transportActivity(comm, OpType::kAllreduce) + "_STAGED";
  activity(members, transport.c_str());
  deviceOps_->allreduce(comm, device, tensors, head.dtype, head.reduceOp, head.preScale, head.postScale);
  activityEnd(members);
}

Result Operations::allgather(ProcessSet& set, const Response& r, const TensorEntry& e) {
  Communicator& comm = set.comm();
  const int64_t row = rowElements(e.request.shape);
  std::vector<size_t> counts;
  int64_t rows = 0;
  for (int64_t d : r.firstDims) {
    counts.push_back(static_cast<size_t>(d * row));
    rows += d;
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = rows;
  uint64_t failed = 0;
  Result res = allocated(r.dtype, shape, &failed);
  // The same output size on every member.
  if (std::string error = checkMemory(set, r, res.outputBytes, failed); !error.empty()) return failedResult(error);
  allgatherv(comm, {e.input, res.output.get(), counts, r.dtype});
  bytesMoved_ += res.outputBytes;
  return res;
}

Result Operations::alltoall(ProcessSet& set, const Response& r, const TensorEntry& e) {
  Communicator& comm = set.comm();
  const int n = comm.size();
  const int64_t row = rowElements(e.request.shape);
  std::vector<size_t> sendRows(n);
  for (int i = 0; i < n; ++i) {
    sendRows[i] = e.request.splits.empty() ? static_cast<size_t>(e.request.shape[0] / n)
                                           : static_cast<size_t>(e.request.splits[i]);
  }
  std::vector<size_t> recvRows = alltoallExchangeCounts(comm, sendRows);
  std::vector<size_t> sendCounts(n), recvCounts(n);
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    sendCounts[i] = sendRows[i] * row;
    recvCounts[i] = recvRows[i] * row;
    rows += static_cast<int64_t>(recvRows[i]);
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = rows;
  uint64_t failed = 0;
  Result res = allocated(r.dtype, shape, &failed);
  // What a rank receives differs between ranks; all of them together send the same everywhere
  // (the coordinator's firstDims), and no rank receives more than that.
  const uint64_t sent = static_cast<uint64_t>(std::accumulate(r.firstDims.begin(), r.firstDims.end(), int64_t{0})) *
                        static_cast<uint64_t>(row) * dataTypeSize(r.dtype);
  if (std::string error = checkMemory(set, r, sent, failed); !error.empty()) return failedResult(error);
  ringfold::alltoall(comm, {e.input, res.output.get(), sendCounts, recvCounts, r.dtype});
  for (size_t v : recvRows) res.receivedSplits.push_back(static_cast<int64_t>(v));
  bytesMoved_ += res.outputBytes;
  return res;
}

Result Operations::reducescatter(ProcessSet& set, const Response& r, const TensorEntry& e, Reducer& reducer) {
  Communicator& comm = set.comm();
  const int n = comm.size();
  const int64_t rows = r.shape[0];
  const int64_t row = rowElements(r.shape);
  const size_t es = dataTypeSize(r.dtype);
  std::vector<int64_t> shape = r.shape;
  shape[0] = reducescatterRows(rows, comm.rank(), n);
  uint64_t failed = 0;
  Result res = allocated(r.dtype, shape, &failed);
  // Uneven splits: equal blocks of maxRows rows, each rank's real rows first and zeros after them.
  const int64_t maxRows = rows / n + 1;
  const size_t block = static_cast<size_t>(maxRows * row) * es;
  if (rows % n != 0 && !grow(staging_, stagingBytes_, block * (n + 1))) failed += block * (n + 1);
  const uint64_t inputBytes = static_cast<uint64_t>(rows * row) * es;  // the same on every member
  if (std::string error = checkMemory(set, r, inputBytes, failed); !error.empty()) return failedResult(error);
  if (rows % n == 0) {
    reduceScatter(comm, {e.input, res.output.get(), static_cast<size_t>(rows / n * row), r.dtype,
                         r.reduceOp, r.preScale, r.postScale, &reducer});
  } else {
    std::byte* staging = staging_.get();
    const auto* in = static_cast<const std::byte*>(e.input);
    int64_t start = 0;
    for (int q = 0; q < n; ++q) {
      const int64_t mine = reducescatterRows(rows, q, n);
      const size_t bytes = static_cast<size_t>(mine * row) * es;
      std::memcpy(staging + q * block, in + static_cast<size_t>(start * row) * es, bytes);
      std::memset(staging + q * block + bytes, 0, block - bytes);  // the padding rows
      start += mine;
    }
    std::byte* out = staging + n * block;
    reduceScatter(comm, {staging, out, static_cast<size_t>(maxRows * row), r.dtype, r.reduceOp,
                         r.preScale, r.postScale, &reducer});
    if (res.outputBytes) std::memcpy(res.output.get(), out, res.outputBytes);
  }
  bytesMoved_ += static_cast<uint64_t>(rows * row) * es;
  return res;
}

}  // namespace ringfold::engine
