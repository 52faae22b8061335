// shm backend: ranks of one host reach each other through shared memory: a ring per direction
// per pair in a memfd segment, cross-memory attach (process_vm_readv) for large messages, and
// eventfd doorbells for sleeping (protocol.h).
//
// Files of this backend
//   device.{h,cc}          the Device: Stats, createDevice
//   connection.{h,cc}      ShmConnection (isend/irecv) and ShmRequest (test/wait)
//   memory_region.h        plain memory: nothing to register
//   device_state.{h,cc}    DeviceState, shared by the three: start-up, progress, wait, failure
//   peer.{h,cc}            the protocol with one peer (its two rings, matching, cma, bounces)
//   ring.h                 the single-producer/single-consumer ring in shared memory
//   segment.{h,cc}         memfd segments, descriptor passing, cross-memory attach
//   protocol.h             the protocol in prose, the slot types and the hello
//
// Contract (shm::Device): as transport::Device. connectAll joins the selected peers through the
// tcp_uring backend's Unix mesh (tcp_uring/mesh.h), so it needs io_uring's build (the mesh lives
// there) but not io_uring at run time; a peer the mesh cannot reach is left out at both ends
// (nullptr) and logged. name() is "shm"; describe() says the ring geometry and, per peer,
// whether large messages go by cross-memory attach or through the rings, and why.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"

namespace ringfold::transport::shm {

class DeviceState;

// Counts since the device was created.
struct Stats {
  uint64_t bytesSent = 0;            // payload bytes of completed sends
  uint64_t bytesReceived = 0;        // payload bytes of completed receives
  uint64_t ringCopyBytes = 0;        // copied into a ring (sender) and out of one (receiver)
  uint64_t ringSinkBytes = 0;        // taken from a ring by a lazy receive's sink (no copy)
  uint64_t cmaBytes = 0;             // read from a peer's memory (process_vm_readv)
  uint64_t unexpectedCopyBytes = 0;  // out of a buffer (unexpected or bounced) into the receive posted later
  uint64_t eagerMessages = 0;        // sent through the ring
  uint64_t cmaMessages = 0;          // sent by request to send, read by the receiver
  uint64_t bouncedMessages = 0;      // requests to send read into a bounce buffer (unmatched)
  uint64_t sleeps = 0;               // waits that slept on the doorbell
};

class Device final : public transport::Device {
 public:
  Device();
  ~Device() override;
  const char* name() const override { return "shm"; }
  std::string describe() const override;
  using transport::Device::connectAll;
  std::vector<std::unique_ptr<Connection>> connectAll(const ConnectSpec& spec) override;
  std::unique_ptr<transport::MemoryRegion> registerMemory(void* data, size_t size) override;
  void abort(ErrorKind kind, const std::string& message) override;
  bool aborted() const override;
  std::exception_ptr abortReason() const override;
  void progress() override;
  void setWaitHook(std::function<void()> hook) override;
  void shareLiveness(std::shared_ptr<liveness::Monitor> monitor) override;
  std::shared_ptr<liveness::Monitor> liveness() const override;
  Stats stats() const;

 private:
  std::shared_ptr<DeviceState> state_;
};

std::unique_ptr<transport::Device> createDevice();

}  // namespace ringfold::transport::shm
