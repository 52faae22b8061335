// per_peer: selection, connection of each child with its peers, and the composite Device.
#include "transport/per_peer/device.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/logging.h"
#include "transport/liveness/monitor.h"
#include "transport/per_peer/connection.h"

namespace ringfold::transport::per_peer {

using Clock = std::chrono::steady_clock;

namespace {

// spec with the time left until `deadline`, the child's prefix and its peers.
ConnectSpec childSpec(const ConnectSpec& spec, const std::string& label, std::vector<bool> peers,
                      Clock::time_point deadline) {
  ConnectSpec s = spec;
  s.prefix = spec.prefix + "/" + label;
  s.timeout = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                       std::chrono::milliseconds(0));
  s.peers = std::move(peers);
  return s;
}

}  // namespace

Connected connect(const ConnectSpec& spec, const Policy& policy, const Factory& factory, const std::string& myHost) {
  RF_ENFORCE(spec.store != nullptr, "per_peer::connect needs a store");
  RF_ENFORCE(spec.peers.empty(), "per_peer::connect connects every peer");
  const auto hosts = exchangeHostIds(*spec.store, spec.prefix, spec.rank, spec.size, myHost, spec.timeout);
  auto backends = assignBackends(hosts, spec.rank, policy);
  Policy used = policy;
  if (!policy.fallback.empty()) {
    const auto words = exchangeRemoteCapabilities(*spec.store, spec.prefix, spec.rank, spec.size, policy, spec.timeout);
    used = applyFallback(backends, words, spec.rank, policy);
  }
  Connected c = connectWith(spec, std::move(backends), factory, used);
  c.hostIds = hosts;
  return c;
}

Connected connectWith(const ConnectSpec& spec, std::vector<std::string> backendOf, const Factory& factory,
                      const Policy& policy) {
  RF_ENFORCE_EQ(backendOf.size(), static_cast<size_t>(spec.size), "one backend per rank");
  const auto deadline = Clock::now() + spec.timeout;
  std::set<std::string> locals;
  for (int p = 0; p < spec.size; ++p) {
    if (p != spec.rank && backendOf[p] != policy.remote) locals.insert(backendOf[p]);
  }
  auto peersOf = [&](const std::string& label) {
    std::vector<bool> mine(spec.size, false);
    for (int p = 0; p < spec.size; ++p) mine[p] = p != spec.rank && backendOf[p] == label;
    return mine;
  };
  std::vector<Child> children;
  // One liveness monitor for every child: WAITING notices reach every peer whatever its backend,
  // and blame follows them across backends.
  auto monitor = std::make_shared<liveness::Monitor>();
  auto connectChild = [&](const std::string& label, const std::vector<bool>& mine) {
    Child c{label, factory(label), {}};
    c.device->shareLiveness(monitor);
    c.peers = c.device->connectAll(childSpec(spec, label, mine, deadline));
    RF_ENFORCE_EQ(c.peers.size(), static_cast<size_t>(spec.size), label, " returned a wrong table");
    return c;
  };
  for (const auto& first : locals) {
    // A local backend may leave out pairs it cannot join (at both ends): they go to the policy's
    // local fallback (shm -> unix_uring), else to the remote backend, connected below.
    std::string label = first;
    auto mine = peersOf(label);
    for (;;) {
      Child c = connectChild(label, mine);
      const std::string next =
          label == policy.local && !policy.localFallback.empty() && policy.localFallback != label
              ? policy.localFallback
              : policy.remote;
      bool any = false, left = false;
      for (int p = 0; p < spec.size; ++p) {
        if (!mine[p]) continue;
        if (c.peers[p]) {
          any = true;
          mine[p] = false;
          continue;
        }
        RF_LOG(kWarning) << label << " could not join rank " << p << " (on this host, but its local socket refused "
                         << "the connection or does not exist); joining it through " << next;
        backendOf[p] = next;
        left = true;
      }
      if (any) children.push_back(std::move(c));
      if (!left || next == policy.remote) break;
      label = next;
    }
  }
  const auto remote = peersOf(policy.remote);
  if (children.empty() || std::find(remote.begin(), remote.end(), true) != remote.end()) {
    children.push_back(connectChild(policy.remote, remote));
  }
  // One line per rank names the backend of every peer ("rank 0 reaches ranks 1-3 through shm,
  // ranks 4-7 through tcp_uring"): ringfoldrun --verbose shows it.
  std::string reach;
  for (int p = 0; p < spec.size;) {
    if (p == spec.rank) {
      ++p;
      continue;
    }
    int q = p;
    while (q + 1 < spec.size && q + 1 != spec.rank && backendOf[q + 1] == backendOf[p]) ++q;
    reach += detail::concat(reach.empty() ? "" : ", ", q > p ? "ranks " : "rank ", p, q > p ? detail::concat("-", q) : "",
                            " through ", backendOf[p]);
    p = q + 1;
  }
  RF_LOG(kInfo) << "rank " << spec.rank << " reaches " << (reach.empty() ? "no peer" : reach);
  if (children.size() == 1) return {std::move(children[0].device), std::move(children[0].peers), {}};
  // How many peers each same-host backend joined (tests/netns reads this line).
  std::string local;
  for (const auto& label : {std::string("shm"), std::string("unix_uring")}) {
    if (label == policy.remote) continue;
    const auto n = std::count(backendOf.begin(), backendOf.end(), label);
    if (n > 0) local += detail::concat(local.empty() ? "" : ", ", n, " on this host through ", label);
  }
  RF_LOG(kDebug) << "connected to " << spec.size - 1 << " peers (" << (local.empty() ? "none on this host" : local)
                 << ") through " << children.size() << " backends";
  auto device = std::make_unique<Device>(std::move(children));
  auto peers = device->takeConnections();
  return {std::move(device), std::move(peers), {}};
}

Device::Device(std::vector<Child> children) {
  RF_ENFORCE(children.size() >= 2, "per_peer: a composite of ", children.size(), " backends");
  name_ = "per_peer(";
  for (size_t i = 0; i < children.size(); ++i) {
    Child& c = children[i];
    RF_ENFORCE(c.device != nullptr, "per_peer: no device for ", c.label);
    name_ += (i ? "+" : "") + c.label;
    if (connections_.size() < c.peers.size()) connections_.resize(c.peers.size());
    for (size_t p = 0; p < c.peers.size(); ++p) {
      if (!c.peers[p]) continue;
      RF_ENFORCE(connections_[p] == nullptr, "per_peer: rank ", p, " connected by two backends");
      connections_[p] = std::make_unique<Connection>(std::move(c.peers[p]), i);
    }
    labels_.push_back(c.label);
    children_.push_back(std::move(c.device));
    children_.back()->setWaitHook([this, i] { pump(i); });
  }
  name_ += ")";
}

Device::~Device() {
  for (auto& child : children_) child->setWaitHook(nullptr);
}

std::vector<std::unique_ptr<transport::Connection>> Device::connectAll(const ConnectSpec&) {
  RF_THROW(InvalidArgument, name_, " is connected when built; connect through per_peer::connect");
}

std::string Device::describe() const {
  std::string out;
  for (size_t i = 0; i < children_.size(); ++i) {
    const std::string what = children_[i]->describe();
    if (!what.empty()) out += (out.empty() ? "" : "; ") + labels_[i] + ": " + what;
  }
  return out;
}

std::vector<std::unique_ptr<transport::Connection>> Device::takeConnections() { return std::move(connections_); }

std::unique_ptr<transport::MemoryRegion> Device::registerMemory(void* data, size_t size) {
  std::vector<std::unique_ptr<transport::MemoryRegion>> parts;
  parts.reserve(children_.size());
  for (auto& child : children_) parts.push_back(child->registerMemory(data, size));
  return std::make_unique<MemoryRegion>(data, size, std::move(parts));
}

void Device::abortChildren(ErrorKind kind, const std::string& message, size_t except) const {
  spreading_ = true;
  for (size_t j = 0; j < children_.size(); ++j) {
    if (j == except) continue;
    try {
      children_[j]->abort(kind, message);
    } catch (const std::exception& e) {
      RF_LOG(kWarning) << "abort of " << labels_[j] << " failed: " << e.what();
    }
  }
  spreading_ = false;
}

void Device::abort(ErrorKind kind, const std::string& message) {
  if (spread()) return;  // a peer's abort came first: it is every child's reason now
  abortChildren(kind, message, children_.size());
  for (auto& child : children_) {
    if (auto why = child->abortReason()) {
      reason_ = why;
      break;
    }
  }
}

bool Device::spread() const {
  if (reason_) return true;
  if (spreading_) return false;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (!children_[i]->aborted()) continue;
    std::exception_ptr why = children_[i]->abortReason();
    if (!why) continue;
    std::string text;
    int peer = -1;
    const ErrorKind kind = describeError(why, text, peer);
    RF_LOG(kDebug) << labels_[i] << " was aborted (" << text << "); aborting the other backends with it";
    reason_ = why;
    abortChildren(kind, text, i);
    return true;
  }
  return false;
}

bool Device::aborted() const {
  if (spread()) return true;
  return std::any_of(children_.begin(), children_.end(), [](const auto& c) { return c->aborted(); });
}

std::shared_ptr<liveness::Monitor> Device::liveness() const {
  for (const auto& child : children_) {
    if (auto monitor = child->liveness()) return monitor;
  }
  return nullptr;
}

std::exception_ptr Device::abortReason() const {
  if (spread()) return reason_;
  for (auto& child : children_) {
    if (auto why = child->abortReason()) return why;
  }
  return nullptr;
}

void Device::progress() {
  for (auto& child : children_) child->progress();
  spread();
}

void Device::pump(size_t except) {
  for (size_t j = 0; j < children_.size(); ++j) {
    if (j != except) children_[j]->progress();
  }
  spread();
  if (outerHook_) outerHook_();
}

}  // namespace ringfold::transport::per_peer
