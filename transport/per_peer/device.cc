// per_peer: selection, connection of each child with its peers, and the composite Device.
#include "transport/per_peer/device.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/logging.h"
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

ErrorKind describeError(const std::exception_ptr& error, std::string& text, int& peer) {
  peer = -1;
  try {
    std::rethrow_exception(error);
  } catch (const MismatchError& e) {
    text = e.what();
    return ErrorKind::kMismatch;
  } catch (const InvalidArgument& e) {
    text = e.what();
    return ErrorKind::kInvalidArgument;
  } catch (const IoError& e) {
    peer = e.peerRank();
    text = e.what();
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
    text = "unknown exception";
  }
  return ErrorKind::kIo;
}

Connected connect(const ConnectSpec& spec, const Policy& policy, const Factory& factory, const std::string& myHost) {
  RF_ENFORCE(spec.store != nullptr, "per_peer::connect needs a store");
  RF_ENFORCE(spec.peers.empty(), "per_peer::connect connects every peer");
  const auto hosts = exchangeHostIds(*spec.store, spec.prefix, spec.rank, spec.size, myHost, spec.timeout);
  return connectWith(spec, assignBackends(hosts, spec.rank, policy), factory, policy.local);
}

Connected connectWith(const ConnectSpec& spec, const std::vector<std::string>& backendOf, const Factory& factory,
                      const std::string& fallback) {
  RF_ENFORCE_EQ(backendOf.size(), static_cast<size_t>(spec.size), "one backend per rank");
  std::set<std::string> used;
  for (int p = 0; p < spec.size; ++p) {
    if (p != spec.rank) used.insert(backendOf[p]);
  }
  if (used.size() <= 1) {
    const std::string label = used.empty() ? fallback : *used.begin();
    Connected out{factory(label), {}};
    out.peers = out.device->connectAll(childSpec(spec, label, {}, Clock::now() + spec.timeout));
    return out;
  }
  std::vector<std::string> labels(used.begin(), used.end());
  std::vector<std::unique_ptr<transport::Device>> children;
  for (const auto& label : labels) children.push_back(factory(label));
  auto device = std::make_unique<Device>(labels, std::move(children), backendOf);
  auto peers = device->connectAll(spec);
  return {std::move(device), std::move(peers)};
}

Device::Device(std::vector<std::string> labels, std::vector<std::unique_ptr<transport::Device>> children,
               std::vector<std::string> backendOf)
    : labels_(std::move(labels)), children_(std::move(children)), backendOf_(std::move(backendOf)) {
  RF_ENFORCE(!children_.empty() && children_.size() == labels_.size(), "per_peer: ", children_.size(),
             " children for ", labels_.size(), " backends");
  name_ = "per_peer(";
  for (size_t i = 0; i < labels_.size(); ++i) name_ += (i ? "+" : "") + labels_[i];
  name_ += ")";
  for (size_t i = 0; i < children_.size(); ++i) {
    RF_ENFORCE(children_[i] != nullptr, "per_peer: no device for ", labels_[i]);
    children_[i]->setWaitHook([this, i] { pump(i); });
  }
}

Device::~Device() {
  for (auto& child : children_) child->setWaitHook(nullptr);
}

std::vector<std::unique_ptr<transport::Connection>> Device::connectAll(const ConnectSpec& spec) {
  RF_ENFORCE(spec.store != nullptr, "per_peer: connectAll needs a store");
  RF_ENFORCE_EQ(backendOf_.size(), static_cast<size_t>(spec.size), "per_peer: one backend per rank");
  RF_ENFORCE(spec.peers.empty() || spec.peers.size() == backendOf_.size(), "per_peer: ", spec.peers.size(),
             " peer flags for ", spec.size, " ranks");
  const auto deadline = Clock::now() + spec.timeout;
  std::vector<std::unique_ptr<transport::Connection>> out(spec.size);
  for (size_t i = 0; i < children_.size(); ++i) {
    std::vector<bool> mine(spec.size, false);
    for (int p = 0; p < spec.size; ++p) {
      mine[p] = p != spec.rank && backendOf_[p] == labels_[i] && (spec.peers.empty() || spec.peers[p]);
    }
    auto connections = children_[i]->connectAll(childSpec(spec, labels_[i], mine, deadline));
    RF_ENFORCE_EQ(connections.size(), static_cast<size_t>(spec.size), labels_[i], " returned a wrong table");
    for (int p = 0; p < spec.size; ++p) {
      if (!mine[p]) continue;
      RF_ENFORCE(connections[p] != nullptr, labels_[i], " did not connect rank ", p);
      out[p] = std::make_unique<Connection>(std::move(connections[p]), i);
    }
  }
  RF_LOG(kDebug) << name_ << " connected";
  return out;
}

std::unique_ptr<transport::MemoryRegion> Device::registerMemory(void* data, size_t size) {
  std::vector<std::unique_ptr<transport::MemoryRegion>> parts;
  parts.reserve(children_.size());
  for (auto& child : children_) parts.push_back(child->registerMemory(data, size));
  return std::make_unique<MemoryRegion>(data, size, std::move(parts));
}

void Device::abort(ErrorKind kind, const std::string& message) {
  if (spread()) return;  // a peer's abort came first: it is every child's reason now
  spreading_ = true;
  for (auto& child : children_) {
    try {
      child->abort(kind, message);
    } catch (const std::exception& e) {
      RF_LOG(kWarning) << "abort of " << child->name() << " failed: " << e.what();
    }
  }
  spreading_ = false;
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
    spreading_ = true;
    for (size_t j = 0; j < children_.size(); ++j) {
      if (j == i) continue;
      try {
        children_[j]->abort(kind, text);
      } catch (const std::exception& e) {
        RF_LOG(kWarning) << "abort of " << labels_[j] << " failed: " << e.what();
      }
    }
    spreading_ = false;
    return true;
  }
  return false;
}

bool Device::aborted() const {
  if (spread()) return true;
  return std::any_of(children_.begin(), children_.end(), [](const auto& c) { return c->aborted(); });
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
