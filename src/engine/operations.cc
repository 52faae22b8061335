#include "engine/operations.h"

#include <cstring>
#include <memory>
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

Result allocated(DataType dtype, std::vector<int64_t> shape) {
  Result res;
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  res.outputBytes = static_cast<size_t>(elements) * dataTypeSize(dtype);
  res.output = std::make_unique_for_overwrite<std::byte[]>(res.outputBytes);
  res.shape = std::move(shape);
  return res;
}

std::string transportActivity(Communicator& comm, OpType op) {
  std::string name = comm.device().name();
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
  if (auto* traced = dynamic_cast<TracedReducer*>(&comm.reducer())) traced->setTensor(tracing() ? head.name : "");
  if (tracing()) {
    for (const Response* r : members) timeline_->opStart(r->name, opTypeName(r->op));
  }
  const std::string transport = transportActivity(comm, head.op);
  std::vector<Result> results(members.size());
  switch (head.op) {
    case OpType::kAllreduce:
      allreduce(comm, members, entries);
      break;
    case OpType::kAllgather:
      activity(members, transport.c_str());
      results[0] = allgather(comm, head, *entries[0]);
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
    case OpType::kAlltoall:
      activity(members, transport.c_str());
      results[0] = alltoall(comm, head, *entries[0]);
      activityEnd(members);
      break;
    case OpType::kReducescatter:
      activity(members, transport.c_str());
      results[0] = reducescatter(comm, head, *entries[0]);
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

void Operations::allreduce(Communicator& comm, const std::vector<const Response*>& members,
                           std::vector<std::optional<TensorEntry>>& entries) {
  const Response& head = *members.front();
  const std::string transport = transportActivity(comm, OpType::kAllreduce);
  if (head.device != kCpuDevice) {
    deviceAllreduce(comm, members, entries);
    return;
  }
  uint64_t total = 0;
  for (const Response* r : members) total += responseBytes(*r);
  bytesMoved_ += total;
  const size_t es = dataTypeSize(head.dtype);
  if (members.size() == 1 && entries[0]) {
    const TensorEntry& e = *entries[0];
    activity(members, transport.c_str());
    ringfold::allreduce(comm, {e.input, e.output, static_cast<size_t>(head.elements), head.dtype,
                               head.reduceOp, head.preScale, head.postScale});
    activityEnd(members);
    return;
  }
  // Several tensors, or a joined rank's zeros: through the fusion buffer.
  if (fusion_.size() < total) {
    fusion_.clear();
    fusion_.shrink_to_fit();
    fusion_.resize(total);
  }
  activity(members, "MEMCPY_IN_FUSION_BUFFER");
  size_t offset = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t bytes = responseBytes(*members[i]);
    if (entries[i]) {
      if (bytes) std::memcpy(fusion_.data() + offset, entries[i]->input, bytes);
    } else {
      std::memset(fusion_.data() + offset, 0, bytes);
    }
    offset += bytes;
  }
  activityEnd(members);
  activity(members, transport.c_str());
  ringfold::allreduce(comm, {fusion_.data(), fusion_.data(), total / es, head.dtype, head.reduceOp,
                             head.preScale, head.postScale});
  activityEnd(members);
  activity(members, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t bytes = responseBytes(*members[i]);
    if (entries[i] && bytes) std::memcpy(entries[i]->output, fusion_.data() + offset, bytes);
    offset += bytes;
  }
  activityEnd(members);
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

Result Operations::allgather(Communicator& comm, const Response& r, const TensorEntry& e) {
  const int64_t row = rowElements(e.request.shape);
  std::vector<size_t> counts;
  int64_t rows = 0;
  for (int64_t d : r.firstDims) {
    counts.push_back(static_cast<size_t>(d * row));
    rows += d;
  }
  std::vector<int64_t> shape = e.request.shape;
  shape[0] = rows;
  Result res = allocated(r.dtype, shape);
  allgatherv(comm, {e.input, res.output.get(), counts, r.dtype});
  bytesMoved_ += res.outputBytes;
  return res;
}

Result Operations::alltoall(Communicator& comm, const Response& r, const TensorEntry& e) {
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
  Result res = allocated(r.dtype, shape);
  ringfold::alltoall(comm, {e.input, res.output.get(), sendCounts, recvCounts, r.dtype});
  for (size_t v : recvRows) res.receivedSplits.push_back(static_cast<int64_t>(v));
  bytesMoved_ += res.outputBytes;
  return res;
}

Result Operations::reducescatter(Communicator& comm, const Response& r, const TensorEntry& e) {
  const int n = comm.size();
  const int64_t rows = r.shape[0];
  const int64_t row = rowElements(r.shape);
  const size_t es = dataTypeSize(r.dtype);
  std::vector<int64_t> shape = r.shape;
  shape[0] = reducescatterRows(rows, comm.rank(), n);
  Result res = allocated(r.dtype, shape);
  if (rows % n == 0) {
    reduceScatter(comm, {e.input, res.output.get(), static_cast<size_t>(rows / n * row), r.dtype,
                         r.reduceOp, r.preScale, r.postScale});
  } else {
    // Equal blocks of maxRows rows, each rank's real rows first and zeros after them.
    const int64_t maxRows = rows / n + 1;
    const size_t block = static_cast<size_t>(maxRows * row) * es;
    staging_.assign(block * (n + 1), std::byte{0});
    const auto* in = static_cast<const std::byte*>(e.input);
    int64_t start = 0;
    for (int q = 0; q < n; ++q) {
      const int64_t mine = reducescatterRows(rows, q, n);
      std::memcpy(staging_.data() + q * block, in + static_cast<size_t>(start * row) * es,
                  static_cast<size_t>(mine * row) * es);
      start += mine;
    }
    std::byte* out = staging_.data() + n * block;
    reduceScatter(comm, {staging_.data(), out, static_cast<size_t>(maxRows * row), r.dtype, r.reduceOp,
                         r.preScale, r.postScale});
    if (res.outputBytes) std::memcpy(res.output.get(), out, res.outputBytes);
  }
  bytesMoved_ += static_cast<uint64_t>(rows * row) * es;
  return res;
}

}  // namespace ringfold::engine
