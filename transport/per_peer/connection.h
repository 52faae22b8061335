// per_peer Connection and MemoryRegion: a child backend's connection, and a region registered
// with every child. The connection hands its child the child's own region (regions of one
// backend mean nothing to another: an RDMA key, a shared-memory offset) and returns the child's
// requests unchanged, so a transfer costs one indirection over the child's.
#pragma once

#include <memory>
#include <vector>

#include "transport/connection.h"
#include "transport/memory_region.h"

namespace ringfold::transport::per_peer {

class MemoryRegion final : public transport::MemoryRegion {
 public:
  MemoryRegion(void* data, size_t size, std::vector<std::unique_ptr<transport::MemoryRegion>> parts)
      : transport::MemoryRegion(data, size), parts_(std::move(parts)) {}
  transport::MemoryRegion& part(size_t child) const { return *parts_[child]; }

 private:
  std::vector<std::unique_ptr<transport::MemoryRegion>> parts_;  // by child
};

// Regions passed here must come from the composite Device's registerMemory.
class Connection final : public transport::Connection {
 public:
  Connection(std::unique_ptr<transport::Connection> child, size_t childIndex)
      : child_(std::move(child)), index_(childIndex) {}
  int peerRank() const override { return child_->peerRank(); }
  std::unique_ptr<Request> isend(const transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override {
    return child_->isend(static_cast<const MemoryRegion&>(region).part(index_), offset, length, tag, check);
  }
  std::unique_ptr<Request> irecv(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                 uint64_t check) override {
    return child_->irecv(static_cast<MemoryRegion&>(region).part(index_), offset, length, tag, check);
  }
  std::unique_ptr<Request> irecvLazy(transport::MemoryRegion& region, size_t offset, size_t length, uint64_t tag,
                                     uint64_t check) override {
    return child_->irecvLazy(static_cast<MemoryRegion&>(region).part(index_), offset, length, tag, check);
  }

 private:
  std::unique_ptr<transport::Connection> child_;
  size_t index_;
};

}  // namespace ringfold::transport::per_peer
