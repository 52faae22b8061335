// Messages of the engine's negotiation: what a rank asks for (Request) and what the group
// agreed to run (Response), and their wire encoding.
//
// Vocabulary
//   request  : one rank's "tensor <name> is ready here, with these properties". It carries
//              everything the coordinator needs to check that all ranks agree (op, dtype,
//              shape, reduce op, scale factors, root, device, alltoall splits, group).
//   response : the group's decision about one tensor: run it (with the sizes every rank needs,
//              e.g. each rank's first dimension for allgather), or fail it with one message
//              that every rank reports. A response names one tensor; fusion (fusion.h) later
//              packs several into one transfer.
//   list     : what travels in one negotiation step; RequestList from a rank to the
//              coordinator, ResponseList from the coordinator to everyone.
//
// Encoding: little-endian fixed-width integers and length-prefixed strings/arrays. decode*()
// bound every length by the bytes actually present (and names by kMaxNameBytes), so a corrupt
// or hostile message is rejected with InvalidArgument instead of allocating what it claims.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace ringfold::engine {

// Values of the first eight follow Horovod's Request::RequestType.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kJoin = 3,
  kAlltoall = 5,
  kBarrier = 6,
  kReducescatter = 7,
  kReduce = 8,             // ringfold's own (Horovod has none): the root's output gets the reduction
  kAddProcessSet = 20,     // engine-internal: runs on the global set
  kRemoveProcessSet = 21,  // engine-internal: runs on the global set
  kCancel = 22,            // engine-internal: a rank withdraws its request for `name` (cancel);
                           // the response's root is the set rank whose request was withdrawn
};
// What an operation takes and writes: a reduce op and scale factors (reduces); a root rank
// (rooted); the caller's own output buffer, of the input's shape (writesCallerOutput; the others
// write one the engine allocates, or none).
inline bool reduces(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kReducescatter || op == OpType::kReduce;
}
inline bool rooted(OpType op) { return op == OpType::kBroadcast || op == OpType::kReduce; }
inline bool writesCallerOutput(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kBroadcast || op == OpType::kReduce;
}

// "ALLREDUCE", "ALLGATHER", ... (Horovod's spelling, used in the timeline and in errors).
const char* opTypeName(OpType op);
// "allreduce", "allgather", ... for messages.
const char* opTypeLowerName(OpType op);

inline constexpr int kCpuDevice = -1;
inline constexpr size_t kMaxNameBytes = 4096;

struct Request {
  int32_t rank = 0;  // rank within the process set
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduceOp = ReduceOp::kSum;
  int32_t root = 0;
  int32_t device = kCpuDevice;
  double preScale = 1.0;
  double postScale = 1.0;
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank (empty: equal split)
  std::string group;            // grouped calls: the group's key (empty: not grouped)
  int32_t groupSize = 0;

  int64_t elements() const;  // product of shape (1 for a scalar)
};

struct Response {
  OpType op = OpType::kAllreduce;
  bool error = false;
  std::string errorMessage;  // when error: the text every rank reports
  std::string name;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduceOp = ReduceOp::kSum;
  int32_t root = 0;
  int32_t device = kCpuDevice;
  double preScale = 1.0;
  double postScale = 1.0;
  int64_t elements = 0;             // allreduce/broadcast: elements of the tensor
  std::vector<int64_t> firstDims;   // allgather: each rank's first dimension
  std::vector<int64_t> shape;       // the agreed shape (allgather: with rank 0's first dim)
  std::string group;
  int32_t lastJoinedRank = -1;      // join
};

struct RequestList {
  std::vector<Request> requests;
};
struct ResponseList {
  std::vector<Response> responses;
};

std::vector<uint8_t> encode(const RequestList& list);
std::vector<uint8_t> encode(const ResponseList& list);
RequestList decodeRequests(const uint8_t* data, size_t size);
ResponseList decodeResponses(const uint8_t* data, size_t size);

// "[2, 3]"
std::string shapeString(const std::vector<int64_t>& shape);
// "0, 2, 3"
std::string rankList(const std::vector<int>& ranks);

}  // namespace ringfold::engine
