// Collectives and point-to-point calls of the NCCL-API library, and ncclGroupStart/End.
//
// Contract
//   * submit() checks the call's arguments first (a bad one returns ncclInvalidArgument, an
//     unsupported one ncclInvalidUsage, with ncclGetLastError saying which, and leaves the
//     communicator usable), then runs it at once, or queues it while a group is open on this
//     thread.
//   * Host buffers (or no usable CUDA) run synchronously on the CPU after `stream` is drained
//     (where CUDA works): the call returns with the result in place.
//   * Device buffers: allreduce and broadcast through ringfold's GpuStaging (where ringfold is
//     built with CUDA), everything else through pinned host copies on `stream`; the call
//     returns once the result is on the device.
//   * Groups: ncclGroupEnd runs, per communicator, the collectives in call order and then all
//     send/recv (and gather/scatter) at once: every receive and send is posted non-blocking
//     before any is waited for, so an all-to-all of sends and receives cannot deadlock. The
//     batches of different communicators run on threads of their own (a single thread may
//     drive several ranks, as with ncclCommInitAll). Inits and splits started inside the
//     group are waited for at ncclGroupEnd (blocking communicators only).
//   * A failure returns the ringfold error's code (ncclRemoteError for a dead or silent peer or
//     an abort) and the communicator then reports it through ncclCommGetAsyncError.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "bindings/nccl/state.h"

namespace ringfold::nccl {

enum class OpKind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter, kSend, kRecv };
const char* opKindName(OpKind kind);  // NCCL's function name, e.g. "ncclAllReduce"

struct Op {
  OpKind kind = OpKind::kAllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // NCCL's count argument (allgather: sendcount; reducescatter: recvcount)
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;  // root, or the peer of send/recv
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
};

ncclResult_t submit(const Op& op);
ncclResult_t groupStart();
ncclResult_t groupEnd();
bool inGroup();
// An init or split started inside the open group, waited for at ncclGroupEnd.
void noteGroupInit(ncclComm* comm);
// Drops the queued calls of the open group (ncclGroupSimulateEnd) and closes it.
void discardGroup();

}  // namespace ringfold::nccl
