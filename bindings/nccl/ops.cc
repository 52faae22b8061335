// Collectives, point to point and groups of the NCCL-API library (ops.h).
#include "bindings/nccl/ops.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "bindings/nccl/device.h"
#include "collectives/check.h"
#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "common/error.h"

namespace ringfold::nccl {

namespace {

struct Group {
  int depth = 0;
  std::vector<Op> ops;
  std::vector<ncclComm*> inits;
  ncclResult_t firstError = ncclSuccess;  // of a call that failed its checks inside the group
};
thread_local Group tGroup;

const char* typeName(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "an unknown ncclDataType_t";
  }
}

bool reduces(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kReduce || k == OpKind::kReduceScatter;
}
bool rooted(OpKind k) {
  return k == OpKind::kBroadcast || k == OpKind::kReduce || k == OpKind::kGather || k == OpKind::kScatter;
}
bool pointToPoint(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv; }

DataType dtypeOf(const Op& o) { return dataTypeOf(o.dtype, opKindName(o.kind)); }

struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  double preScale = 1.0;
};

Reduction reductionOf(ncclComm* c, const Op& o) {
  const int op = static_cast<int>(o.op);
  if (op >= 0 && op < ncclNumOps) return {static_cast<ReduceOp>(op), 1.0};
  PreMulSum p;
  {
    std::lock_guard<std::mutex> lock(c->opsMutex);
    auto it = c->preMulSums.find(op);
    if (it == c->preMulSums.end()) {
      throw NcclError(ncclInvalidArgument, std::string(opKindName(o.kind)) + ": invalid reduction operator " +
                                               std::to_string(op) + " for this communicator");
    }
    p = it->second;
  }
  if (p.dtype != dtypeOf(o)) {
    throw NcclError(ncclInvalidArgument, std::string(opKindName(o.kind)) + ": the PreMulSum operator was created for " +
                                             dataTypeName(p.dtype) + ", not " + typeName(o.dtype));
  }
  return {ReduceOp::kSum, p.deviceScalar ? readScalar(p.scalarPtr, p.dtype) : p.hostValue};
}

size_t elemSize(const Op& o) { return dataTypeSize(dtypeOf(o)); }

// Bytes read from sendbuf and written to recvbuf by this rank.
void spans(const Op& o, int rank, int n, size_t& in, size_t& out) {
  const size_t b = o.count * elemSize(o);
  const bool root = rank == o.root;
  switch (o.kind) {
    case OpKind::kAllReduce: in = b, out = b; break;
    case OpKind::kBroadcast: in = root ? b : 0, out = b; break;
    case OpKind::kReduce: in = b, out = root ? b : 0; break;
    case OpKind::kAllGather: in = b, out = b * n; break;
    case OpKind::kReduceScatter: in = b * n, out = b; break;
    case OpKind::kAlltoAll: in = b * n, out = b * n; break;
    case OpKind::kGather: in = b, out = root ? b * n : 0; break;
    case OpKind::kScatter: in = root ? b * n : 0, out = b; break;
    case OpKind::kSend: in = b, out = 0; break;
    case OpKind::kRecv: in = 0, out = b; break;
  }
}

// Argument checks that leave the communicator usable (NCCL's ncclInvalidArgument).
void validate(const Op& o) {
  const char* name = opKindName(o.kind);
  ncclComm* c = o.comm;
  dtypeOf(o);
  if (reduces(o.kind)) {
    const int op = static_cast<int>(o.op);
    if (op < 0) throw NcclError(ncclInvalidArgument, std::string(name) + ": invalid reduction operator " + std::to_string(op));
    if (op >= ncclNumOps) {
      std::lock_guard<std::mutex> lock(c->opsMutex);
      if (!c->preMulSums.count(op)) {
        throw NcclError(ncclInvalidArgument, std::string(name) + ": invalid reduction operator " + std::to_string(op) +
                                                 " (not created by ncclRedOpCreatePreMulSum on this communicator)");
      }
    }
  }
  if ((rooted(o.kind) || pointToPoint(o.kind)) && (o.root < 0 || o.root >= c->nranks)) {
    throw NcclError(ncclInvalidArgument, std::string(name) + ": " + (pointToPoint(o.kind) ? "peer " : "root ") +
                                             std::to_string(o.root) + " is not a rank of this communicator (" +
                                             std::to_string(c->nranks) + " ranks)");
  }
  size_t in = 0, out = 0;
  spans(o, c->rank, c->nranks, in, out);
  if (in > 0 && o.sendbuf == nullptr) throw NcclError(ncclInvalidArgument, std::string(name) + ": sendbuff is NULL");
  if (out > 0 && o.recvbuf == nullptr) throw NcclError(ncclInvalidArgument, std::string(name) + ": recvbuff is NULL");
}

void copyHost(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

// Gather / scatter: the root exchanges one block with every rank, all posted at once.
void rootedExchange(Communicator& comm, const Op& o, DataType dt) {
  const bool gather = o.kind == OpKind::kGather;
  coll::run(comm, opKindName(o.kind), [&] {
    const coll::Call call =
        coll::begin(comm, {.kind = coll::Kind::kAlltoall, .dtype = dt, .root = static_cast<uint32_t>(o.root), .count = o.count});
    const size_t b = o.count * dataTypeSize(dt);
    const int n = comm.size(), me = comm.rank();
    if (me == o.root) {
      coll::Flight flight(comm, n, n);
      if (gather) {
        auto& region = flight.region(o.recvbuf, b * n);
        size_t slot = 0;
        for (int r = 0; r < n; ++r) {
          if (r != me) flight.postRecv(slot++, r, region, b * r, b, call.tag(0), call.check);
        }
        copyHost(static_cast<std::byte*>(o.recvbuf) + b * me, o.sendbuf, b);
        for (size_t s = 0; s < slot; ++s) flight.waitRecv(s);
      } else {
        auto& region = flight.region(o.sendbuf, b * n);
        for (int r = 0; r < n; ++r) {
          if (r != me) flight.postSend(r, region, b * r, b, call.tag(0), call.check);
        }
        copyHost(o.recvbuf, static_cast<const std::byte*>(o.sendbuf) + b * me, b);
        flight.waitAllSends();
      }
    } else {
      coll::Flight flight(comm, 1, 1);
      if (gather) {
        flight.postSend(o.root, flight.region(o.sendbuf, b), 0, b, call.tag(0), call.check);
        flight.waitAllSends();
      } else {
        flight.postRecv(0, o.root, flight.region(o.recvbuf, b), 0, b, call.tag(0), call.check);
        flight.waitRecv(0);
      }
    }
  });
}

void runCollective(ncclComm* c, Communicator& comm, const Op& o) {
  const DataType dt = dtypeOf(o);
  switch (o.kind) {
    case OpKind::kAllReduce: {
      const Reduction red = reductionOf(c, o);
      AllreduceOptions a;
      a.sendbuf = o.sendbuf;
      a.recvbuf = o.recvbuf;
      a.count = o.count;
      a.dtype = dt;
      a.op = red.op;
      a.preScale = red.preScale;
      allreduce(comm, a);
      return;
    }
    case OpKind::kReduce: {
      // A chain to the root (collectives/reduce.h): each link carries the buffer once; recvbuff
      // is written at the root only, as NCCL does.
      const Reduction red = reductionOf(c, o);
      ReduceOptions r;
      r.sendbuf = o.sendbuf;
      r.recvbuf = comm.rank() == o.root ? o.recvbuf : nullptr;
      r.count = o.count;
      r.dtype = dt;
      r.op = red.op;
      r.root = o.root;
      r.preScale = red.preScale;
      reduce(comm, r);
      return;
    }
    case OpKind::kBroadcast: {
      BroadcastOptions b;
      b.sendbuf = comm.rank() == o.root ? o.sendbuf : o.recvbuf;
      b.recvbuf = o.recvbuf;
      b.count = o.count;
      b.dtype = dt;
      b.root = o.root;
      broadcast(comm, b);
      return;
    }
    case OpKind::kAllGather: {
      AllgatherOptions a;
      a.sendbuf = o.sendbuf;
      a.recvbuf = o.recvbuf;
      a.sendCount = o.count;
      a.dtype = dt;
      allgather(comm, a);
      return;
    }
    case OpKind::kReduceScatter: {
      const Reduction red = reductionOf(c, o);
      ReduceScatterOptions r;
      r.sendbuf = o.sendbuf;
      r.recvbuf = o.recvbuf;
      r.recvCount = o.count;
      r.dtype = dt;
      r.op = red.op;
      r.preScale = red.preScale;
      reduceScatter(comm, r);
      return;
    }
    case OpKind::kAlltoAll: {
      AlltoallOptions a;
      a.sendbuf = o.sendbuf;
      a.recvbuf = o.recvbuf;
      a.sendCounts.assign(comm.size(), o.count);
      a.recvCounts.assign(comm.size(), o.count);
      a.dtype = dt;
      alltoall(comm, a);
      return;
    }
    case OpKind::kGather:
    case OpKind::kScatter: rootedExchange(comm, o, dt); return;
    case OpKind::kSend:
    case OpKind::kRecv: break;
  }
  throw NcclError(ncclInternalError, "runCollective: not a collective");
}

// Every send and receive of a group at once (see ops.h).
void runPointToPoint(Communicator& comm, const std::vector<const Op*>& ops) {
  if (ops.empty()) return;
  const int me = comm.rank();
  std::vector<const Op*> selfSends, selfRecvs;
  size_t recvs = 0, sends = 0;
  for (const Op* o : ops) {
    if (o->root == me) {
      (o->kind == OpKind::kSend ? selfSends : selfRecvs).push_back(o);
    } else {
      ++(o->kind == OpKind::kSend ? sends : recvs);
    }
  }
  // Checked before anything is posted, so that a mistake leaves the communicator usable.
  if (selfSends.size() != selfRecvs.size()) {
    unsupported("rank " + std::to_string(me) + " posted " + std::to_string(selfSends.size()) + " ncclSend and " +
                std::to_string(selfRecvs.size()) + " ncclRecv to itself in one group: they must pair up");
  }
  for (size_t i = 0; i < selfSends.size(); ++i) {
    if (selfSends[i]->count * elemSize(*selfSends[i]) != selfRecvs[i]->count * elemSize(*selfRecvs[i])) {
      unsupported("rank " + std::to_string(me) + ": an ncclSend to itself of " +
                  std::to_string(selfSends[i]->count * elemSize(*selfSends[i])) + " bytes meets an ncclRecv of " +
                  std::to_string(selfRecvs[i]->count * elemSize(*selfRecvs[i])) + " bytes");
    }
  }
  coll::run(comm, "send/recv", [&] {
    coll::Flight flight(comm, recvs, std::max<size_t>(sends, 1));
    size_t slot = 0;
    for (const Op* o : ops) {
      if (o->kind != OpKind::kRecv || o->root == me) continue;
      const DataType dt = dtypeOf(*o);
      const size_t b = o->count * dataTypeSize(dt);
      flight.postRecv(slot++, o->root, flight.region(o->recvbuf, b), 0, b, coll::kSendRecvTag,
                      coll::packCheck({.kind = coll::Kind::kSendRecv, .dtype = dt, .count = o->count}));
    }
    for (const Op* o : ops) {
      if (o->kind != OpKind::kSend || o->root == me) continue;
      const DataType dt = dtypeOf(*o);
      const size_t b = o->count * dataTypeSize(dt);
      flight.postSend(o->root, flight.region(o->sendbuf, b), 0, b, coll::kSendRecvTag,
                      coll::packCheck({.kind = coll::Kind::kSendRecv, .dtype = dt, .count = o->count}));
    }
    for (size_t i = 0; i < selfSends.size(); ++i) {
      copyHost(selfRecvs[i]->recvbuf, selfSends[i]->sendbuf, selfSends[i]->count * elemSize(*selfSends[i]));
    }
    for (size_t s = 0; s < slot; ++s) flight.waitRecv(s);
    flight.waitAllSends();
  });
}

// Device buffers of a batch copied through pinned host buffers (ops.h). Each op's pointers are
// replaced by host ones; finish() copies the results back and waits for the streams.
class Staging {
 public:
  Staging(ncclComm* c, std::vector<Op>& ops) : c_(c) {
    std::set<cudaStream_t> streams;
    for (Op& o : ops) {
      const bool devSend = memKind(o.sendbuf) == MemKind::kDevice;
      const bool devRecv = memKind(o.recvbuf) == MemKind::kDevice;
      if (cudaUsable()) streams.insert(o.stream);
      if (!devSend && !devRecv) continue;
      size_t in = 0, out = 0;
      spans(o, c->rank, c->nranks, in, out);
      auto* s = static_cast<const std::byte*>(o.sendbuf);
      auto* r = static_cast<std::byte*>(o.recvbuf);
      if (devSend && devRecv && in > 0 && out > 0 && s < r + out && r < s + in) {
        // Overlapping (in place): one host copy of the union keeps the offsets NCCL's
        // in-place rules rely on.
        const std::byte* lo = std::min<const std::byte*>(s, r);
        const std::byte* hi = std::max<const std::byte*>(s + in, r + out);
        auto* h = static_cast<std::byte*>(stagingBuffer(c, slot_++, hi - lo));
        copy(h, lo, hi - lo, o.stream);
        back_.push_back({const_cast<std::byte*>(lo), h, static_cast<size_t>(hi - lo), o.stream});
        o.sendbuf = h + (s - lo);
        o.recvbuf = h + (r - lo);
        continue;
      }
      if (devSend && in > 0) {
        auto* h = stagingBuffer(c, slot_++, in);
        copy(h, o.sendbuf, in, o.stream);
        o.sendbuf = h;
      }
      if (devRecv && out > 0) {
        auto* h = static_cast<std::byte*>(stagingBuffer(c, slot_++, out));
        back_.push_back({r, h, out, o.stream});
        o.recvbuf = h;
      }
    }
    streams_.assign(streams.begin(), streams.end());
    for (cudaStream_t st : streams_) syncStream(st);
  }
  void finish() {
    for (const Back& b : back_) copy(b.dev, b.host, b.bytes, b.stream);
    if (!back_.empty()) {
      for (cudaStream_t st : streams_) syncStream(st);
    }
  }

 private:
  struct Back {
    std::byte* dev;
    const std::byte* host;
    size_t bytes;
    cudaStream_t stream;
  };
  ncclComm* c_;
  int slot_ = 0;
  std::vector<Back> back_;
  std::vector<cudaStream_t> streams_;
};

// Runs one communicator's calls (in their submission order, collectives first, then every
// send/recv at once).
ncclResult_t runOnComm(ncclComm* c, std::vector<Op> ops) {
  std::lock_guard<std::mutex> lock(c->opMutex);
  try {
    Communicator& comm = c->ready(true);
    if (c->abortRequested.load()) throw IoError(-1, abortText(c));
    for (const Op& o : ops) requireNotCapturing(o.stream);
    // Device buffers of a single allreduce or broadcast: ringfold's GpuStaging.
    if (ops.size() == 1 && (ops[0].kind == OpKind::kAllReduce || ops[0].kind == OpKind::kBroadcast)) {
      const Op& o = ops[0];
      const bool dev = memKind(o.recvbuf) == MemKind::kDevice &&
                       (o.kind == OpKind::kBroadcast && c->rank != o.root ? true : memKind(o.sendbuf) == MemKind::kDevice);
      if (dev) {
        StagedCall call;
        call.sendbuf = o.sendbuf;
        call.recvbuf = o.recvbuf;
        call.count = o.count;
        call.dtype = dtypeOf(o);
        call.root = o.root;
        call.stream = o.stream;
        bool done;
        if (o.kind == OpKind::kAllReduce) {
          const Reduction red = reductionOf(c, o);
          call.op = red.op;
          call.preScale = red.preScale;
          done = gpuStagedAllreduce(c, call);
        } else {
          done = gpuStagedBroadcast(c, call);
        }
        if (done) return ncclSuccess;
      }
    }
    Staging staging(c, ops);
    std::vector<const Op*> p2p;
    for (const Op& o : ops) {
      if (pointToPoint(o.kind)) {
        p2p.push_back(&o);
      } else {
        runCollective(c, comm, o);
      }
    }
    runPointToPoint(comm, p2p);
    staging.finish();
    return ncclSuccess;
  } catch (...) {
    return c->recordFailure(std::current_exception());
  }
}

}  // namespace

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "ncclAllReduce";
    case OpKind::kBroadcast: return "ncclBroadcast";
    case OpKind::kReduce: return "ncclReduce";
    case OpKind::kAllGather: return "ncclAllGather";
    case OpKind::kReduceScatter: return "ncclReduceScatter";
    case OpKind::kAlltoAll: return "ncclAlltoAll";
    case OpKind::kGather: return "ncclGather";
    case OpKind::kScatter: return "ncclScatter";
    case OpKind::kSend: return "ncclSend";
    case OpKind::kRecv: return "ncclRecv";
  }
  return "?";
}

ncclResult_t submit(const Op& op) {
  if (op.comm == nullptr) {
    setGlobalLastError(std::string(opKindName(op.kind)) + ": comm is NULL");
    return ncclInvalidArgument;
  }
  try {
    validate(op);
  } catch (...) {
    std::string text;
    const ncclResult_t code = codeOf(std::current_exception(), text);
    op.comm->setLastError(text);
    if (tGroup.depth > 0 && tGroup.firstError == ncclSuccess) tGroup.firstError = code;
    return code;
  }
  if (tGroup.depth > 0) {
    tGroup.ops.push_back(op);
    return ncclSuccess;
  }
  return runOnComm(op.comm, {op});
}

ncclResult_t groupStart() {
  ++tGroup.depth;
  return ncclSuccess;
}

bool inGroup() { return tGroup.depth > 0; }

void noteGroupInit(ncclComm* comm) { tGroup.inits.push_back(comm); }

void discardGroup() {
  if (tGroup.depth > 0 && --tGroup.depth == 0) tGroup = Group{};
}

ncclResult_t groupEnd() {
  if (tGroup.depth == 0) {
    setGlobalLastError("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--tGroup.depth > 0) return ncclSuccess;
  Group group = std::move(tGroup);
  tGroup = Group{};
  ncclResult_t result = group.firstError;
  for (ncclComm* c : group.inits) {
    if (!c->blocking) continue;
    c->joinInit();
    const int state = c->asyncError.load();
    if (state != ncclSuccess && result == ncclSuccess) result = static_cast<ncclResult_t>(state);
  }
  if (result != ncclSuccess) return result;  // NCCL runs nothing of a group with a bad call
  for (ncclComm* c : group.inits) {
    if (!c->blocking && c->asyncError.load() == ncclInProgress) result = ncclInProgress;
  }
  if (result == ncclInProgress && group.ops.empty()) return result;
  // Per communicator, in order of first appearance.
  std::vector<ncclComm*> order;
  std::vector<std::vector<Op>> lists;
  for (const Op& o : group.ops) {
    const size_t i = std::find(order.begin(), order.end(), o.comm) - order.begin();
    if (i == order.size()) {
      order.push_back(o.comm);
      lists.emplace_back();
    }
    lists[i].push_back(o);
  }
  if (order.empty()) return ncclSuccess;
  if (order.size() == 1) return runOnComm(order[0], std::move(lists[0]));
  std::vector<ncclResult_t> results(order.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < order.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = runOnComm(order[i], std::move(lists[i])); });
  }
  results[0] = runOnComm(order[0], std::move(lists[0]));
  for (auto& t : threads) t.join();
  for (ncclResult_t r : results) {
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

DataType dataTypeOf(ncclDataType_t t, const char* who) {
  switch (t) {
    case ncclFloat8e4m3: return DataType::kFloat8e4m3;
    case ncclFloat8e5m2: return DataType::kFloat8e5m2;
    default:
      if (t < 0 || t >= ncclFloat8e4m3) {
        throw NcclError(ncclInvalidArgument, std::string(who) + ": invalid datatype " + std::to_string(static_cast<int>(t)));
      }
      return static_cast<DataType>(t);  // int8 .. bfloat16: NCCL's values (common/dtype.h)
  }
}

}  // namespace ringfold::nccl
