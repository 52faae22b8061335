// rdma::MemoryRegion (memory_region.h).
#include "transport/rdma/memory_region.h"

#include "transport/rdma/device_state.h"

namespace ringfold::transport::rdma {

MemoryRegion::MemoryRegion(std::shared_ptr<DeviceState> device, void* data, size_t size)
    : transport::MemoryRegion(data, size), device_(std::move(device)) {
  entry();  // registers now when the device is connected
}

MemoryRegion::~MemoryRegion() {
  if (entry_ != nullptr && device_->cache() != nullptr) device_->cache()->release(entry_);
}

RegistrationCache::Entry* MemoryRegion::entry() const {
  if (entry_ == nullptr && size() > 0 && data() != nullptr && device_->cache() != nullptr && !device_->poisoned()) {
    entry_ = device_->cache()->acquire(data(), size());
  }
  return entry_;
}

const Registration* MemoryRegion::registration() const {
  RegistrationCache::Entry* e = entry();
  return e != nullptr ? &e->registration() : nullptr;
}

}  // namespace ringfold::transport::rdma
