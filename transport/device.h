// Device: one rank's endpoint of a transport backend. It creates the Connections to every peer
// from addresses exchanged through a rendezvous Store, registers memory, and can abort.
//
// Contract
//   * connectAll() is called once per Device. It publishes this device's address under
//     "<prefix>/addr/<rank>", reads each peer's, and returns `size` entries with nullptr at
//     `rank`. It returns when every connection is up, or throws (IoError / TimeoutError naming
//     the rank that did not connect) once `timeout` passes.
//   * connectAll(spec) connects exactly the peers spec.peers selects (empty: all of them); the
//     returned vector has `size` entries, nullptr for `rank` and for every peer not selected.
//     Two devices of one communicator connect under different prefixes. A backend that cannot
//     reach a selected peer through its medium (unix_uring: a Unix connect refused by a security
//     module) returns nullptr for it at both ends of the pair, and logs why; the caller joins
//     those pairs through another backend.
//   * abort(kind, message) poisons the device: every pending and later request on every
//     connection fails with an error of `kind` carrying `message`, and each connected peer is
//     told, so that its requests fail the same way within a bounded time instead of hanging.
//     The first abort wins; later ones are ignored. A peer's abort poisons this device likewise.
//   * abortReason() is the error every pending and later request fails with once the device is
//     aborted or poisoned (null before). progress() drives completions once without blocking.
//     setWaitHook(h): h is called at least every ~1 ms from inside any blocking wait on this
//     device's requests (a composite device drives its other backends from it).
//   * Backends: tcp_uring/ (processes, TCP via io_uring) and loopback/ (ranks as threads).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/memory_region.h"

namespace ringfold::rendezvous {
class Store;
}

namespace ringfold::transport {

namespace liveness {
class Monitor;
}

enum class ErrorKind : uint8_t { kIo = 0, kMismatch = 1, kInvalidArgument = 2 };

// Throws the exception that `kind` names, with `message` (and `peerRank` for kIo).
[[noreturn]] void throwError(ErrorKind kind, int peerRank, const std::string& message);
// Its inverse: the kind and text of an error, as abort() takes them (IoError's peer in `peer`,
// else -1; anything that is not a MismatchError or InvalidArgument is kIo).
ErrorKind describeError(const std::exception_ptr& error, std::string& text, int& peer);

// Which peers a device connects, and how (see connectAll).
struct ConnectSpec {
  rendezvous::Store* store = nullptr;
  std::string prefix;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{60000};
  std::vector<bool> peers;  // by rank: connect it; empty: every peer (rank's own entry is ignored)
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;
  // What carries the traffic, for logs and bench headers (rdma: "ofi tcp;ofi_rxm on lo"); empty
  // when name() says it all.
  virtual std::string describe() const { return ""; }
  virtual std::vector<std::unique_ptr<Connection>> connectAll(const ConnectSpec& spec) = 0;
  // Every peer: builds the ConnectSpec (a backend declares `using Device::connectAll;`).
  std::vector<std::unique_ptr<Connection>> connectAll(rendezvous::Store& store, const std::string& prefix,
                                                      int rank, int size, std::chrono::milliseconds timeout);
  virtual std::unique_ptr<MemoryRegion> registerMemory(void* data, size_t size) = 0;
  virtual void abort(ErrorKind kind, const std::string& message) = 0;
  // True once abort() was called here or by a peer.
  virtual bool aborted() const = 0;
  // The error pending and later requests fail with; null while the device works.
  virtual std::exception_ptr abortReason() const = 0;
  // Drives this device's progress once without blocking.
  virtual void progress() = 0;
  // Called at least every ~1 ms from inside a blocking wait on this device's requests (null:
  // none). A backend that blocks in the kernel caps its blocking slices while a hook is set.
  virtual void setWaitHook(std::function<void()> hook) = 0;
  // Use `monitor` for WAITING notices and blame (liveness/monitor.h), shared with the other
  // backend devices of one communicator, so notices reach every peer whatever its backend and
  // blame follows them across backends. Before connectAll. Backends without notices ignore it.
  virtual void shareLiveness(std::shared_ptr<liveness::Monitor> monitor) { (void)monitor; }
  // The monitor this device's waits announce on and blame with (shared by a composite device's
  // children); null for backends without notices. Communicator::followAborts gives a group's
  // monitor its enclosing group's as the outer one (liveness/monitor.h).
  virtual std::shared_ptr<liveness::Monitor> liveness() const { return nullptr; }
};

// What a backend may need from its creator (all optional).
struct DeviceConfig {
  // The rendezvous store's host (the launcher's RINGFOLD_STORE_ADDR or the bootstrap's derived
  // one): TCP backends listen on the interface that reaches it. Empty: 127.0.0.1 unless
  // RINGFOLD_SOCKET_IFNAME says otherwise.
  std::string storeAddress;
  // An IPv4 address to listen on, overriding the interface selection (empty: select).
  std::string listenAddress;
};

// Creates the backend named by `name` ("tcp_uring", "unix_uring": tcp_uring over Unix sockets
// between same-host ranks, or "loopback"); an empty name reads RINGFOLD_TRANSPORT. Throws
// InvalidArgument naming the backend if it is unknown or not built, and Error explaining why if
// it cannot run here (e.g. io_uring disabled by the kernel).
std::unique_ptr<Device> createDevice(const std::string& name, const DeviceConfig& config);
std::unique_ptr<Device> createDevice(const std::string& name = "");

}  // namespace ringfold::transport
