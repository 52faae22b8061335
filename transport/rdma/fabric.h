// Fabric: the small interface the RDMA protocol (protocol.h) runs over. Three implementations
// share it, with the same meaning:
//   fabric_ofi   : libfabric FI_EP_RDM endpoints (tcp;ofi_rxm on any machine, verbs;ofi_rxm or
//                  efa on clusters), provider from FI_PROVIDER / RINGFOLD_OFI_PROVIDER
//   fabric_verbs : ibverbs RC queue pairs, libibverbs.so.1 dlopen'ed (no link-time dependency)
//   fabric_fake  : ranks as threads of one process, with fault injection, for tests
//
// Vocabulary
//   peer  : a rank of the job, 0..size-1 (this fabric's own rank never appears as a peer).
//   lane  : one of lanes() independent, in-order paths to a peer (a QP, an endpoint). Work posted
//           on one lane to one peer is carried in order; different lanes and peers are not.
//   write : an RDMA write of local registered bytes into a peer's registered memory. With an
//           immediate (write-with-imm) it also delivers a 32-bit value that the peer sees as a
//           kImmediate completion once the bytes have landed. A write of length 0 is allowed.
//   imm   : 32 bits (verbs and EFA carry no more); the protocol gives them meaning (wire.h).
//
// Contract
//   * open(): the Fabric is created for (rank, size) by its factory and throws Error (with the
//     reason: no device, provider missing, port down) when it cannot run here.
//   * Connection is per pair: localAddress(peer) is what this rank publishes for `peer` (verbs:
//     the QPs it made for that peer; ofi: its endpoint name, the same for every peer), and
//     insertPeer(peer, address) takes what `peer` published for this rank. After both ends
//     called insertPeer the pair may carry writes (verbs may need a moment; the protocol sends
//     a hello and waits for the peer's before it trusts the pair).
//   * registerMemory() returns a Registration (local descriptor, remote key, and the base the
//     peer must name: the virtual address, or 0 where the provider uses offset addressing);
//     deregister() releases it. Registrations are expensive: the caller caches them.
//   * postWrite/postWriteImm never block. They return 0, or -EAGAIN when the fabric cannot take
//     more work now (poll, then post again), or another -errno for an error the post itself saw.
//     Every accepted post ends in exactly one completion with its `context`: kWriteDone when its
//     local buffer may be reused, or kError.
//   * postImmReceives(peer, n) makes room for n more immediates from `peer` (verbs: receive work
//     requests on its QPs; a provider that needs none ignores it). Every kImmediate consumes one.
//   * poll() drives progress (some providers progress only when polled: writes to this rank land
//     only while it polls) and returns completions without blocking.
//   * Blocking: armWait() prepares to sleep and returns false when completions may already be
//     pending (poll again instead); if true, waitFd() becomes readable when one may be; after
//     the sleep, call poll() (an implementation consumes the fd's event there). waitFd() is -1
//     when the fabric has no fd: then the caller sleeps in short slices.
//   * Errors: a write that fails (peer gone, retries exhausted, remote access error) completes
//     with kError naming the peer and the reason. A fabric reports what it knows; silence from a
//     frozen peer is the protocol's business (its timeout and the liveness layer).
//   * One thread drives a Fabric at a time. close() (and the destructor) release everything
//     without waiting on dead peers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ringfold::transport::rdma {

enum class MemoryKind : uint8_t { kHost, kCuda };

// A registration of [data, data + size) with a fabric.
struct Registration {
  void* handle = nullptr;   // the fabric's own object (fid_mr*, ibv_mr*, the fake's entry)
  void* desc = nullptr;     // local descriptor passed to posts (fi_mr_desc; null when unused)
  uint32_t lkey = 0;        // verbs' local key (0 elsewhere)
  uint64_t rkey = 0;        // what a peer passes to write here
  uint64_t remoteBase = 0;  // what a peer names as the address of byte 0 (see the contract)
  void* data = nullptr;
  size_t size = 0;
};

// A peer's memory as this rank writes to it: the address of the byte to write and its key.
struct RemoteAddress {
  uint64_t address = 0;
  uint64_t rkey = 0;
};

struct Completion {
  enum class Type : uint8_t { kWriteDone, kImmediate, kError };
  Type type = Type::kWriteDone;
  int peer = -1;         // kImmediate: who sent it; kError: the peer of the failed op (-1 unknown)
  uint32_t imm = 0;      // kImmediate
  uint64_t context = 0;  // kWriteDone, kError: the post's context
  std::string error;     // kError: what failed and why
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  // "ofi", "verbs" or "fake".
  virtual const char* kind() const = 0;
  // What is in use, for logs and bench headers: "tcp;ofi_rxm on lo", "mlx5_0:1 (RoCE v2, GID 3)".
  virtual std::string describe() const = 0;
  // Independent in-order paths to each peer (>= 1).
  virtual int lanes() const = 0;
  // Whether a write-with-imm on a lane completes at the peer only after every earlier write on
  // that lane landed (verbs RC, tcp;ofi_rxm: yes; EFA: no). When false the protocol puts an
  // immediate on every write it must know has landed.
  virtual bool writesOrdered() const = 0;
  // Largest single write (the protocol cuts larger transfers).
  virtual size_t maxWriteBytes() const = 0;

  virtual std::string localAddress(int peer) = 0;
  virtual void insertPeer(int peer, const std::string& address) = 0;

  // kCuda: device memory (dma-buf where the driver has it); throws InvalidArgument when this
  // fabric cannot register that kind (the caller stages through host memory instead).
  virtual Registration registerMemory(void* data, size_t size, MemoryKind kind) = 0;
  virtual void deregister(const Registration& registration) noexcept = 0;

  virtual int postWrite(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                        RemoteAddress remote, uint64_t context) = 0;
  virtual int postWriteImm(int peer, int lane, const void* local, size_t length, const Registration& localReg,
                           RemoteAddress remote, uint32_t imm, uint64_t context) = 0;
  virtual void postImmReceives(int peer, int count) = 0;

  // Fills at most `max` completions; returns how many.
  virtual int poll(Completion* out, int max) = 0;
  virtual bool armWait() = 0;
  virtual int waitFd() const = 0;

  virtual void close() noexcept = 0;
};

// Which fabric RINGFOLD_RDMA_FABRIC names: "auto" (verbs when a usable device is found, else
// ofi), "verbs", "ofi" or "fake".
std::unique_ptr<Fabric> openFabric(const std::string& which, int rank, int size);

// The RDMA hardware this machine offers: "verbs" (an active InfiniBand/RoCE port that
// RINGFOLD_IB_HCA allows), "ofi" (a libfabric hardware provider such as efa), or "" with the
// reasons in `why`. Cheap (no endpoint is opened): decides whether rdma is used by default.
std::string hardwareFabric(std::string& why);
// Whether openFabric(which, ...) can be expected to work here (for "ofi" and "auto" also a
// software provider such as tcp;ofi_rxm counts); else false with the reasons in `why`.
bool fabricUsable(const std::string& which, std::string& why);

}  // namespace ringfold::transport::rdma
