// rdma::MemoryRegion: a transport::MemoryRegion registered with its device's fabric, holding one
// use of an entry of the device's registration cache (registration_cache.h) for its lifetime.
//
// Contract: made by rdma::Device::registerMemory. When the device is connected, the registration
// is made (or found in the cache) at once, and a failure throws there; a region made before
// connectAll gets it at its first use by a request. An empty region holds none. The region keeps
// the device state alive, so it may outlive the Device (its registration then ends with the
// device's fabric). Requests on other memory (a PlainMemoryRegion, another device's region) find
// a registration for their bytes in the cache instead.
#pragma once

#include <cstddef>
#include <memory>

#include "transport/memory_region.h"
#include "transport/rdma/registration_cache.h"

namespace ringfold::transport::rdma {

class DeviceState;

class MemoryRegion final : public transport::MemoryRegion {
 public:
  MemoryRegion(std::shared_ptr<DeviceState> device, void* data, size_t size);
  ~MemoryRegion() override;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  bool belongsTo(const DeviceState& device) const { return device_.get() == &device; }
  // The cache entry covering the whole region; acquired now if the device connected since the
  // region was made (throws what the fabric throws). Null for an empty region or before connectAll.
  RegistrationCache::Entry* entry() const;
  // Its registration, or null (see entry()).
  const Registration* registration() const;

 private:
  std::shared_ptr<DeviceState> device_;
  mutable RegistrationCache::Entry* entry_ = nullptr;
};

}  // namespace ringfold::transport::rdma
