// MemoryRegion: a span of memory a backend may send from and receive into.
//
// Contract: the memory stays owned by the caller and must outlive the region and every request
// that uses it. What registration means is the backend's business: plain memory for loopback and
// tcp_uring, an ibverbs MR (lkey/rkey) for RDMA. Registering is cheap enough to do per call on
// TCP; backends for which it is expensive cache registrations themselves.
#pragma once

#include <cstddef>

namespace ringfold::transport {

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  MemoryRegion(void* data, size_t size) : data_(data), size_(size) {}

 private:
  void* data_;
  size_t size_;
};

// A MemoryRegion that needs no registration (loopback, TCP).
class PlainMemoryRegion final : public MemoryRegion {
 public:
  PlainMemoryRegion(void* data, size_t size) : MemoryRegion(data, size) {}
};

}  // namespace ringfold::transport
