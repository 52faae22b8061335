// per_peer backend: one rank's endpoint when its peers are reached through different backends
// (unix_uring to the ranks of its host, tcp_uring to the others; shared memory and RDMA later).
//
// connect() is the entry point: it asks the selector (selector.h) which backend each peer gets,
// creates one child device per backend in use (through the caller's Factory) and connects each
// with its subset of peers under "<prefix>/<backend>": the local backends first (in name order),
// the remote one last, so every rank meets its peers in the same order. A peer that a local
// backend leaves out (unix_uring returns null when a Unix connect is refused: both ends see it)
// is logged and joined through the remote backend instead. With one backend in use it returns
// that backend's device itself: a single-host or all-TCP job runs with no wrapper at all.
//
// Device: the composite of several children.
//   * Connections are the children's, wrapped to unwrap the composite MemoryRegion, which holds
//     one region registered with each child.
//   * Progress: each child gets a wait hook that drives the other children (progress()) while
//     it blocks, so a send queued on one backend moves while this rank waits on another.
//   * One abort policy: abort() aborts every child. A child aborted by a peer makes the
//     composite abort the others with the same kind and text (checked from every wait hook and
//     from aborted()), so the peers reached only through another backend hear of it too, and
//     every rank fails with one error whatever backend links it to the rank that failed.
//     abortReason() is the reason of the child that aborted first (the peer's abort), else the
//     first child's.
//   * One thread drives it, as any Device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/per_peer/selector.h"

namespace ringfold::transport::per_peer {

// Makes the device of one backend by name ("unix_uring", "tcp_uring", "loopback", ...).
using Factory = std::function<std::unique_ptr<transport::Device>(const std::string& backend)>;

struct Connected {
  std::unique_ptr<transport::Device> device;  // a single backend's device, or a per_peer::Device
  std::vector<std::unique_ptr<transport::Connection>> peers;  // by rank, null at spec.rank
  std::vector<std::string> hostIds;  // every rank's host identity (connect() only; selector.h)
};

// One backend's device, connected, with its connections by rank (null where it has none).
struct Child {
  std::string label;
  std::unique_ptr<transport::Device> device;
  std::vector<std::unique_ptr<transport::Connection>> peers;
};

// Selects (exchanging host identities under "<spec.prefix>/host/") and connects. spec.peers
// must be empty (every peer).
Connected connect(const ConnectSpec& spec, const Policy& policy, const Factory& factory,
                  const std::string& myHost = selectionHostId());

// Connects peer p through backendOf[p] ("" at spec.rank), falling back to policy.remote as
// above. With no peer at all, policy.remote's device connects nothing.
Connected connectWith(const ConnectSpec& spec, std::vector<std::string> backendOf, const Factory& factory,
                      const Policy& policy);

class Device final : public transport::Device {
 public:
  // Children already connected (connectWith), at least two.
  explicit Device(std::vector<Child> children);
  ~Device() override;

  const char* name() const override { return name_.c_str(); }
  // "label: what" for every child that describes itself, joined with "; ".
  std::string describe() const override;
  using transport::Device::connectAll;
  // The composite is connected when built: throws InvalidArgument (use per_peer::connect).
  std::vector<std::unique_ptr<transport::Connection>> connectAll(const ConnectSpec& spec) override;
  // The connections of every child, wrapped, by rank; once.
  std::vector<std::unique_ptr<transport::Connection>> takeConnections();
  std::unique_ptr<transport::MemoryRegion> registerMemory(void* data, size_t size) override;
  void abort(ErrorKind kind, const std::string& message) override;
  bool aborted() const override;
  std::exception_ptr abortReason() const override;
  void progress() override;
  void setWaitHook(std::function<void()> hook) override { outerHook_ = std::move(hook); }
  // The one monitor every child shares.
  std::shared_ptr<liveness::Monitor> liveness() const override;

  size_t childCount() const { return children_.size(); }
  transport::Device& child(size_t i) { return *children_.at(i); }
  const std::string& label(size_t i) const { return labels_.at(i); }  // the child's backend

 private:
  // Drives every child but `except`, spreads a peer's abort, runs the outer hook.
  void pump(size_t except);
  // If a child was aborted (by a peer), aborts the others with its reason. Returns whether any is.
  bool spread() const;
  // Aborts every child but `except` (children_.size(): none) with `kind` and `message`.
  void abortChildren(ErrorKind kind, const std::string& message, size_t except) const;

  std::string name_;  // "per_peer(<label>+<label>...)"
  std::vector<std::string> labels_;
  std::vector<std::unique_ptr<transport::Device>> children_;
  std::vector<std::unique_ptr<transport::Connection>> connections_;  // until takeConnections()
  std::function<void()> outerHook_;
  mutable std::exception_ptr reason_;  // the reason spread to every child
  mutable bool spreading_ = false;
};

}  // namespace ringfold::transport::per_peer
