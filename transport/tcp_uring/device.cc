// The tcp_uring Device (device.h): a thin owner of the DeviceState its connections share.
#include "transport/tcp_uring/device.h"

#include "transport/tcp_uring/connection.h"
#include "transport/tcp_uring/device_state.h"
#include "transport/tcp_uring/memory_region.h"

namespace ringfold::transport::tcp_uring {

namespace {

// The Device of this backend. It owns nothing but a shared DeviceState, so its connections
// and requests stay valid after it is destroyed (they then fail with "device was destroyed").
class TcpDevice final : public Device {
 public:
  explicit TcpDevice(const Options& options) : state_(std::make_shared<DeviceState>(options)) {}
  ~TcpDevice() override { state_->shutdown(); }
  const char* name() const override {
    return state_->options().family == Family::kUnix ? "unix_uring" : "tcp_uring";
  }

  using Device::connectAll;
  std::vector<std::unique_ptr<Connection>> connectAll(const ConnectSpec& spec) override {
    std::vector<PeerLink*> links = state_->connect(spec);
    std::vector<std::unique_ptr<Connection>> out(spec.size);
    for (int p = 0; p < spec.size; ++p) {
      if (links[p] != nullptr) out[p] = std::make_unique<TcpConnection>(state_, links[p], p);
    }
    return out;
  }

  std::unique_ptr<transport::MemoryRegion> registerMemory(void* data, size_t size) override {
    return std::make_unique<TcpMemoryRegion>(data, size);
  }

  void abort(ErrorKind kind, const std::string& message) override { state_->abort(kind, message); }
  bool aborted() const override { return state_->aborted(); }
  std::exception_ptr abortReason() const override { return state_->poisonError(); }
  void progress() override { state_->progress(); }
  void setWaitHook(std::function<void()> hook) override { state_->setWaitHook(std::move(hook)); }
  void shareLiveness(std::shared_ptr<liveness::Monitor> monitor) override { state_->shareMonitor(std::move(monitor)); }
  std::shared_ptr<liveness::Monitor> liveness() const override { return state_->sharedMonitor(); }

 private:
  std::shared_ptr<DeviceState> state_;
};

}  // namespace

std::unique_ptr<Device> createDevice(const Options& options) { return std::make_unique<TcpDevice>(options); }

}  // namespace ringfold::transport::tcp_uring
