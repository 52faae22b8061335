// Device: one rank's endpoint of a transport backend. It creates the Connections to every peer
// from addresses exchanged through a rendezvous Store, registers memory, and can abort.
//
// Contract
//   * connectAll() is called once per Device. It publishes this device's address under
//     "<prefix>/addr/<rank>", reads each peer's, and returns `size` entries with nullptr at
//     `rank`. It returns when every connection is up, or throws (IoError / TimeoutError naming
//     the rank that did not connect) once `timeout` passes.
//   * abort(kind, message) poisons the device: every pending and later request on every
//     connection fails with an error of `kind` carrying `message`, and each connected peer is
//     told, so that its requests fail the same way within a bounded time instead of hanging.
//     The first abort wins; later ones are ignored. A peer's abort poisons this device likewise.
//   * Backends: tcp_uring/ (processes, TCP via io_uring) and loopback/ (ranks as threads).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/memory_region.h"

namespace ringfold::rendezvous {
class Store;
}

namespace ringfold::transport {

enum class ErrorKind : uint8_t { kIo = 0, kMismatch = 1, kInvalidArgument = 2 };

// Throws the exception that `kind` names, with `message` (and `peerRank` for kIo).
[[noreturn]] void throwError(ErrorKind kind, int peerRank, const std::string& message);

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;
  virtual std::vector<std::unique_ptr<Connection>> connectAll(rendezvous::Store& store,
                                                              const std::string& prefix, int rank,
                                                              int size,
                                                              std::chrono::milliseconds timeout) = 0;
  virtual std::unique_ptr<MemoryRegion> registerMemory(void* data, size_t size) = 0;
  virtual void abort(ErrorKind kind, const std::string& message) = 0;
  // True once abort() was called here or by a peer.
  virtual bool aborted() const = 0;
};

// Creates the backend named by `name` ("tcp_uring" or "loopback"); an empty name reads
// RINGFOLD_TRANSPORT. Throws InvalidArgument naming the backend if it is unknown or not built,
// and Error explaining why if it cannot run here (e.g. io_uring disabled by the kernel).
std::unique_ptr<Device> createDevice(const std::string& name = "");

}  // namespace ringfold::transport
