// The shm Device (device.h): a thin owner of the DeviceState its connections share.
#include "transport/shm/device.h"

#include "transport/shm/connection.h"
#include "transport/shm/device_state.h"
#include "transport/shm/memory_region.h"

namespace ringfold::transport::shm {

Device::Device() : state_(std::make_shared<DeviceState>()) {}

Device::~Device() { state_->shutdown(); }

std::string Device::describe() const { return state_->describe(); }

std::vector<std::unique_ptr<Connection>> Device::connectAll(const ConnectSpec& spec) {
  std::vector<Peer*> peers = state_->connect(spec);
  std::vector<std::unique_ptr<Connection>> out(peers.size());
  for (size_t p = 0; p < peers.size(); ++p) {
    if (peers[p] != nullptr) out[p] = std::make_unique<ShmConnection>(state_, peers[p]);
  }
  return out;
}

std::unique_ptr<transport::MemoryRegion> Device::registerMemory(void* data, size_t size) {
  return std::make_unique<MemoryRegion>(data, size);
}

void Device::abort(ErrorKind kind, const std::string& message) { state_->abort(kind, message); }
bool Device::aborted() const { return state_->aborted(); }
std::exception_ptr Device::abortReason() const { return state_->poisoned() ? state_->poisonError() : nullptr; }
// A composite's hook while it waits on another backend: nothing moving here may mean a peer
// waits behind a parked message (device_state.h), so it is read out then.
void Device::progress() {
  if (state_->progress() == 0 && state_->unpark()) state_->progress();
}
void Device::setWaitHook(std::function<void()> hook) { state_->setWaitHook(std::move(hook)); }
void Device::shareLiveness(std::shared_ptr<liveness::Monitor> monitor) { state_->shareMonitor(std::move(monitor)); }
std::shared_ptr<liveness::Monitor> Device::liveness() const { return state_->sharedMonitor(); }
Stats Device::stats() const { return state_->stats(); }

std::unique_ptr<transport::Device> createDevice() { return std::make_unique<Device>(); }

}  // namespace ringfold::transport::shm
