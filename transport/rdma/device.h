// rdma backend: ranks reach each other by RDMA writes over a Fabric (fabric.h: libfabric,
// ibverbs, or the in-process fake for tests), with the protocol of protocol.h.
//
// Files of this backend
//   device.{h,cc}            the Device: Options, Stats, createDevice
//   connection.{h,cc}        RdmaConnection (isend/irecv) and RdmaRequest (test/wait)
//   memory_region.{h,cc}     rdma::MemoryRegion: a region holding a cached registration
//   registration_cache.{h,cc} the registrations, reused by page-aligned range (LRU budget)
//   device_state.{h,cc}      DeviceState, shared by the three: start-up, progress, wait, failure
//   pair.{h,cc}              PairLink: one link to one peer, started over a caller's socket
//                            instead of the store (the NCCL net plugin's rdma carrier)
//   peer.{h,cc}              the protocol with one peer (rings, credits, matching, rendezvous);
//   peer_receive.cc          its receiving side (slots in order, matching, clear to send, bounces)
//   protocol.h, wire.h       the protocol in prose, and its wire format
//   fabric*.{h,cc}           the Fabric interface and its implementations (verbs_*: the verbs
//                            fabric's symbol table, pure decisions, device and port)
//
// Contract (rdma::Device): as transport::Device. connectAll opens the fabric for (rank, size)
// unless Options gave an open one, connects the selected peers (none selected: no fabric is
// opened), and returns when every selected peer answered its hello. name() is "rdma".
// registerMemory() may come before connectAll (the registration is then made at first use).
// stats() counts what the protocol did, for tests and benches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma {

class DeviceState;

// What an rdma device is told by its creator.
struct Options {
  // "auto", "verbs", "ofi" or "fake" (openFabric); empty: RINGFOLD_RDMA_FABRIC.
  std::string fabric;
  // A fabric already open for this device's (rank, size): used instead of opening one.
  std::shared_ptr<Fabric> opened;
};

// Counts since the device was created.
struct Stats {
  uint64_t bytesSent = 0;            // payload bytes of completed sends
  uint64_t bytesReceived = 0;        // payload bytes of completed receives
  uint64_t bytesCopied = 0;          // payload bytes the CPU copied: the sum of the next three
  uint64_t stagingCopyBytes = 0;     // sender: payload copied into a staging slot
  uint64_t receiveCopyBytes = 0;     // receiver: out of a slot (into the receive or a buffer)
  uint64_t unexpectedCopyBytes = 0;  // receiver: out of a buffer (or a bounce) into the receive posted later
  uint64_t eagerMessages = 0;        // sent in a slot
  uint64_t rendezvousMessages = 0;   // sent by rendezvous
  uint64_t bouncedMessages = 0;      // received by rendezvous into a bounce buffer (unmatched)
  uint64_t regHits = 0;              // registration cache
  uint64_t regMisses = 0;
  uint64_t registrations = 0;
  uint64_t deregistrations = 0;
};

class Device final : public transport::Device {
 public:
  explicit Device(const Options& options);
  ~Device() override;
  const char* name() const override { return "rdma"; }
  // "<fabric kind> <what it runs on>", e.g. "ofi tcp;ofi_rxm on lo"; empty before connectAll.
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
  // The fabric in use: null before connectAll, or when it selected no peer.
  Fabric* fabric() const;

 private:
  std::shared_ptr<DeviceState> state_;
};

// Nothing is opened until connectAll (the fabric needs the rank and size); an unknown fabric
// name throws InvalidArgument here.
std::unique_ptr<transport::Device> createDevice(const Options& options = {});

}  // namespace ringfold::transport::rdma
