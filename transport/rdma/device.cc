// The rdma Device (device.h): a thin owner of the DeviceState its connections share.
#include "transport/rdma/device.h"

#include "transport/rdma/connection.h"
#include "transport/rdma/device_state.h"
#include "transport/rdma/memory_region.h"
#include "transport/rdma/peer.h"

namespace ringfold::transport::rdma {

Device::Device(const Options& options) : state_(std::make_shared<DeviceState>(options)) {}

Device::~Device() { state_->shutdown(); }

std::vector<std::unique_ptr<Connection>> Device::connectAll(const ConnectSpec& spec) {
  std::vector<Peer*> peers = state_->connect(spec);
  std::vector<std::unique_ptr<Connection>> out(spec.size);
  for (int p = 0; p < spec.size; ++p) {
    if (peers[p] != nullptr) out[p] = std::make_unique<RdmaConnection>(state_, peers[p], p);
  }
  return out;
}

std::unique_ptr<transport::MemoryRegion> Device::registerMemory(void* data, size_t size) {
  return std::make_unique<MemoryRegion>(state_, data, size);
}

void Device::abort(ErrorKind kind, const std::string& message) { state_->abort(kind, message); }
bool Device::aborted() const { return state_->aborted(); }
std::exception_ptr Device::abortReason() const { return state_->poisonError(); }
void Device::progress() { state_->progress(); }
void Device::setWaitHook(std::function<void()> hook) { state_->setWaitHook(std::move(hook)); }
void Device::shareLiveness(std::shared_ptr<liveness::Monitor> monitor) { state_->shareMonitor(std::move(monitor)); }
std::shared_ptr<liveness::Monitor> Device::liveness() const { return state_->sharedMonitor(); }
Stats Device::stats() const { return state_->stats(); }

std::string Device::describe() const {
  const Fabric* f = state_->fabricIfOpen();
  return f == nullptr ? "" : std::string(f->kind()) + " " + f->describe();
}
Fabric* Device::fabric() const { return state_->fabricIfOpen(); }

std::unique_ptr<transport::Device> createDevice(const Options& options) { return std::make_unique<Device>(options); }

}  // namespace ringfold::transport::rdma
