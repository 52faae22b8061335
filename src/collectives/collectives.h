// The collectives, one Options struct and one free function each, over a Communicator.
// Each has its own header; this one includes them all.
//
// Common rules
//   * Counts are in elements of `dtype`. Count 0 is valid and moves nothing (but still checks
//     that every rank agrees).
//   * In place: allreduce/broadcast/reduce when sendbuf == recvbuf; reduce-scatter when
//     recvbuf == sendbuf + rank*recvCount; allgather when sendbuf == recvbuf + rank's offset.
//     These are NCCL's rules. Any other overlap of sendbuf and recvbuf is InvalidArgument.
//   * Results are bitwise identical on every rank and from run to run for the same inputs,
//     rank count and algorithm.
//   * A rank whose count, dtype, op or root differs from the others makes every rank throw
//     MismatchError naming the collective and the differing values; a dead or silent peer makes
//     every rank throw IoError within the communicator's timeout; a bad argument on one rank
//     (null buffer, bool in a reduction, root out of range) makes every rank throw its
//     InvalidArgument. None of these hangs or writes past the caller's buffers. (In a copying
//     collective or a reduce, a rank that needs nothing from the failing rank, e.g. a broadcast
//     or reduce rank upstream of it, may return normally; its next call then throws the same
//     error.)
//   * Reducing collectives accept every dtype but kBool; copying ones accept kBool too.
#pragma once

#include "collectives/allgather.h"
#include "collectives/allreduce.h"
#include "collectives/alltoall.h"
#include "collectives/barrier.h"
#include "collectives/broadcast.h"
#include "collectives/communicator.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/sendrecv.h"
#include "common/dtype.h"
