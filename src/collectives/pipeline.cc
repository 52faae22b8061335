#include "collectives/pipeline.h"

#include <algorithm>
#include <limits>

namespace ringfold::coll {

Flight::Flight(Communicator& comm, size_t recvSlots, size_t sendWindow)
    : comm_(comm),
      requests_(comm.inflight().requests),
      recvSlots_(recvSlots),
      sendWindow_(std::max<size_t>(1, sendWindow)),
      keys_(sendWindow_, 0) {
  requests_.clear();
  requests_.resize(recvSlots_ + sendWindow_);
}

transport::MemoryRegion& Flight::region(const void* data, size_t bytes) {
  static std::byte empty{};
  void* p = data != nullptr ? const_cast<void*>(data) : static_cast<void*>(&empty);
  auto& regions = comm_.inflight().regions;
  regions.push_back(comm_.device().registerMemory(p, data != nullptr ? bytes : 0));
  return *regions.back();
}

void Flight::postRecv(size_t slot, int peer, transport::MemoryRegion& region, size_t offset,
                      size_t length, uint64_t tag, uint64_t check, bool lazy) {
  auto& request = requests_[slot];
  RF_ENFORCE(request == nullptr, "receive slot ", slot, " is still in use");
  transport::Connection& c = comm_.peer(peer);
  request = lazy ? c.irecvLazy(region, offset, length, tag, check) : c.irecv(region, offset, length, tag, check);
}

bool Flight::deliverRecv(size_t slot, transport::Sink& sink) {
  auto& request = requests_[slot];
  RF_ENFORCE(request != nullptr, "receive slot ", slot, " holds no request");
  const bool took = request->deliver(sink, comm_.timeout());
  if (!took) request->wait(comm_.timeout());
  request.reset();
  return took;
}

void Flight::waitRecv(size_t slot) {
  auto& request = requests_[slot];
  RF_ENFORCE(request != nullptr, "receive slot ", slot, " holds no request");
  request->wait(comm_.timeout());
  request.reset();
}

bool Flight::recvDone(size_t slot) {
  auto& request = requests_[slot];
  RF_ENFORCE(request != nullptr, "receive slot ", slot, " holds no request");
  return request->test();
}

void Flight::postSend(int peer, const transport::MemoryRegion& region, size_t offset, size_t length,
                      uint64_t tag, uint64_t check, uint64_t key) {
  if (tail_ - head_ == sendWindow_) popOldestSend(true);
  const size_t slot = tail_ % sendWindow_;
  requests_[recvSlots_ + slot] = comm_.peer(peer).isend(region, offset, length, tag, check);
  keys_[slot] = key;
  ++tail_;
}

bool Flight::popOldestSend(bool block) {
  const size_t slot = head_ % sendWindow_;
  auto& request = requests_[recvSlots_ + slot];
  if (block) {
    request->wait(comm_.timeout());
  } else if (!request->test()) {
    return false;
  }
  request.reset();
  keys_[slot] = 0;
  ++head_;
  return true;
}

bool Flight::retireSend(uint64_t key, bool block) {
  if (key == 0) return true;
  for (size_t i = head_; i < tail_; ++i) {
    if (keys_[i % sendWindow_] == key) {
      while (head_ <= i) {
        if (!popOldestSend(block)) return false;
      }
      return true;
    }
  }
  return true;
}

void Flight::waitAllSends() {
  while (head_ < tail_) popOldestSend(true);
}

size_t byteSize(const char* coll, int rank, size_t count, DataType dtype) {
  if (static_cast<int>(dtype) >= kNumDataTypes) {
    RF_THROW(InvalidArgument, coll, " on rank ", rank, ": unknown dtype ", static_cast<int>(dtype));
  }
  const size_t es = dataTypeSize(dtype);
  if (count > std::numeric_limits<size_t>::max() / es) {
    RF_THROW(InvalidArgument, coll, " on rank ", rank, ": count ", count, " overflows");
  }
  return count * es;
}

void requireBuffer(const char* coll, int rank, const void* p, size_t bytes, const char* what) {
  if (p == nullptr && bytes > 0) {
    RF_THROW(InvalidArgument, coll, " on rank ", rank, ": ", what, " is null but must hold ", bytes, " bytes");
  }
}

void requireReducible(const char* coll, int rank, DataType dtype) {
  if (!isReducible(dtype)) {
    RF_THROW(InvalidArgument, coll, " on rank ", rank, ": dtype ", dataTypeName(dtype),
             " cannot be reduced (use allgather, broadcast or alltoall for it)");
  }
}

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (aBytes == 0 || bBytes == 0 || a == nullptr || b == nullptr) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bBytes && pb < pa + aBytes;
}

}  // namespace ringfold::coll
