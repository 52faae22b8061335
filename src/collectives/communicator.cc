#include "collectives/communicator.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <string_view>

#include "collectives/allreduce_model.h"
#include "collectives/topology.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/test_hook.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/job_store.h"
#include "transport/liveness/monitor.h"
#include "transport/memory_region.h"
#include "transport/per_peer/device.h"

namespace ringfold {

namespace {

std::string messageOf(const std::exception_ptr& error) {
  std::string text;
  int peer = -1;
  transport::describeError(error, text, peer);
  return text;
}

// A raw check mismatch is a local transport failure (a backend may keep its first local
// failure as the poison), never the reason an abort carried: aborts carry plain errors.
bool isLocalTransportFailure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const transport::CheckMismatch&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::exception_ptr makeError(transport::ErrorKind kind, int peer, const std::string& message) {
  try {
    transport::throwError(kind, peer, message);
  } catch (...) {
    return std::current_exception();
  }
}

// Connects `rank` of `size` through backends chosen per peer; `config` reaches every device.
transport::per_peer::Connected connectPerPeerDevices(rendezvous::Store& store, const std::string& prefix, int rank,
                                                     int size, const transport::DeviceConfig& config) {
  transport::ConnectSpec spec;
  spec.store = &store;
  spec.prefix = prefix;
  spec.rank = rank;
  spec.size = size;
  spec.timeout = params::kStartTimeout.asSeconds();
  return transport::per_peer::connect(spec, transport::per_peer::Policy::fromParams(),
                                      [&config](const std::string& backend) {
                                        return transport::createDevice(backend, config);
                                      });
}

CollectiveTuning tuningFromParams() {
  CollectiveTuning t;
  t.allreduceAlgorithm = params::kAlgo.str();
  if (params::kDirectMaxBytes.isSet()) t.directMaxBytes = params::kDirectMaxBytes.asBytes();
  t.ringChunkBytes = params::kRingChunkBytes.asBytes();
  if (params::kHierarchicalAllreduce.isSet()) t.hierarchical = params::kHierarchicalAllreduce.asBool();
  return t;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(rendezvous::Store& store, int rank, int size,
                                                    std::unique_ptr<transport::Device> device,
                                                    const std::string& prefix) {
  RF_ENFORCE(device != nullptr, "Communicator::connect needs a device");
  RF_ENFORCE(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " is not in [0, ", size, ")");
  auto peers = device->connectAll(store, prefix, rank, size, params::kStartTimeout.asSeconds());
  return std::make_unique<Communicator>(rank, size, std::move(device), std::move(peers),
                                        makeCpuReducer());
}

std::unique_ptr<Communicator> Communicator::connectPerPeer(rendezvous::Store& store, int rank, int size,
                                                           const transport::DeviceConfig& config,
                                                           const std::string& prefix) {
  RF_ENFORCE(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " is not in [0, ", size, ")");
  auto connected = connectPerPeerDevices(store, prefix, rank, size, config);
  auto comm = std::make_unique<Communicator>(rank, size, std::move(connected.device), std::move(connected.peers),
                                             makeCpuReducer());
  comm->perPeer_ = config;
  comm->setHostIds(connected.hostIds);
  return comm;
}

namespace {

// Deletes "rf/inc<k>/" for the incarnations k < `incarnation` not deleted yet (at most 64 back).
// Best effort: the keys are garbage, so a store error here is logged, not thrown.
void deleteEarlierIncarnations(rendezvous::Store& store, int incarnation) {
  const std::string marker = "rf/incarnations/deleted";
  try {
    const int64_t done = store.add(marker, 0);
    const int64_t first = std::max<int64_t>({1, done + 1, incarnation - 64});
    int64_t removed = 0;
    for (int64_t k = first; k < incarnation; ++k) removed += store.deletePrefix("rf/inc" + std::to_string(k) + "/");
    if (first < incarnation) store.add(marker, incarnation - 1 - done);
    RF_LOG(kDebug) << "deleted " << removed << " store keys of incarnations " << first << ".." << incarnation - 1;
  } catch (const std::exception& e) {
    RF_LOG(kWarning) << "could not delete the store keys of earlier incarnations: " << e.what();
  }
}

}  // namespace

std::unique_ptr<Communicator> Communicator::fromEnvironment(int incarnation) {
  rendezvous::BootstrapInfo info = rendezvous::bootstrapFromEnvironment();
  setLogRank(info.rank);
  testhook::stopAt("store", info.rank);
  auto job = std::make_shared<rendezvous::JobStore>(rendezvous::openJobStore(info));
  // A single process talks to nobody: unless a transport was asked for, skip io_uring.
  const std::string transportName =
      info.size == 1 && !params::kTransport.isSet() ? "loopback" : params::kTransport.str();
  const std::string prefix = incarnation > 0 ? "rf/inc" + std::to_string(incarnation) : "rf";
  transport::DeviceConfig config;
  config.storeAddress = info.storeAddr;
  auto comm = transportName == "tcp_uring" || transportName == "tcp" || transportName == "rdma"
                  ? connectPerPeer(*job->store, info.rank, info.size, config, prefix)
                  : connect(*job->store, info.rank, info.size, transport::createDevice(transportName, config), prefix);
  comm->setStore(std::shared_ptr<rendezvous::Store>(job, job->store.get()), prefix);
  comm->keepAlive(std::move(job));
  if (incarnation > 1 && comm->rank() == 0) deleteEarlierIncarnations(*comm->store_, incarnation);
  // The model's constants (even with one algorithm forced, the model sizes its tree segments
  // and ring chunks).
  if (comm->size() > 1) comm->setModel(coll::calibrate(*comm));
  return comm;
}

Communicator::Communicator(int rank, int size, std::unique_ptr<transport::Device> device,
                           std::vector<std::unique_ptr<transport::Connection>> peers,
                           std::unique_ptr<Reducer> reducer)
    : rank_(rank),
      size_(size),
      device_(std::move(device)),
      peers_(std::move(peers)),
      reducer_(std::move(reducer)),
      timeout_(params::kTimeout.asSeconds()),
      segmentBytes_(0) {
  RF_ENFORCE(size_ >= 1 && rank_ >= 0 && rank_ < size_, "rank ", rank_, " is not in [0, ", size_, ")");
  RF_ENFORCE(device_ != nullptr && reducer_ != nullptr, "a communicator needs a device and a reducer");
  RF_ENFORCE_EQ(peers_.size(), static_cast<size_t>(size_), "one connection slot per rank");
  for (int r = 0; r < size_; ++r) {
    RF_ENFORCE((peers_[r] == nullptr) == (r == rank_), "connection to rank ", r);
  }
  RF_ENFORCE(timeout_.count() > 0, params::kTimeout.name, " must be positive");
  setSegmentBytes(params::kSegmentBytes.asBytes());
  setTuning(tuningFromParams());
  model_ = std::make_unique<coll::ModelConstants>();
}

Communicator::~Communicator() = default;

transport::Connection& Communicator::peer(int r) {
  RF_ENFORCE(r >= 0 && r < size_ && r != rank_, "rank ", rank_, " has no connection to rank ", r);
  return *peers_[r];
}

void Communicator::setSegmentBytes(size_t bytes) {
  if (bytes == 0) RF_THROW(InvalidArgument, params::kSegmentBytes.name, " must be at least 1 byte");
  segmentBytes_ = bytes;
  chooser_.reset();
}

void Communicator::setTuning(CollectiveTuning tuning) {
  coll::AlgorithmSet::parse(tuning.allreduceAlgorithm);  // throws naming RINGFOLD_ALGO
  tuning_ = std::move(tuning);
  chooser_.reset();
}

void Communicator::setHostIds(const std::vector<std::string>& ids) {
  RF_ENFORCE(ids.empty() || ids.size() == static_cast<size_t>(size_), "one host id per rank");
  std::map<std::string, int> index;
  hostOf_.clear();
  int hosts = 0;
  for (const std::string& id : ids) {
    if (id == "-") {
      hostOf_.push_back(hosts++);
      continue;
    }
    auto [it, fresh] = index.emplace(id, hosts);
    if (fresh) ++hosts;
    hostOf_.push_back(it->second);
  }
  chooser_.reset();
}

HostSplit& Communicator::hostSplit() {
  if (hostSplit_) return *hostSplit_;
  RF_ENFORCE(!hostOf_.empty(), "this communicator does not know its ranks' hosts");
  std::vector<std::string> ids(size_);
  for (int r = 0; r < size_; ++r) ids[r] = "host" + std::to_string(hostOf_[r]);
  hostSplit_ = std::make_unique<HostSplit>(splitByHost(*this, ids[rank_], "hosts"));
  hostSplit_->local->followAborts(*this);
  hostSplit_->cross->followAborts(*this);
  return *hostSplit_;
}

void Communicator::followAborts(Communicator& parent) {
  RF_ENFORCE(&parent != this && parent.upstream_ != this, "followAborts: a communicator cannot follow itself");
  upstream_ = &parent;
  installWaitHook();
  // This group's WAITING notices reach `parent`'s peers too, and blame here follows what a rank
  // said there (a rank waiting in the other group of a hierarchical allreduce is alive).
  auto mine = device_->liveness();
  auto outer = parent.device_->liveness();
  if (mine == nullptr || outer == nullptr || mine == outer) return;
  std::vector<int> there(size_);
  for (int r = 0; r < size_; ++r) {
    int p = 0;
    while (p < parent.size_ && parent.jobRank(p) != jobRank(r)) ++p;
    if (p == parent.size_) return;  // not a group of `parent`'s ranks: nothing to relay to
    there[r] = p;
  }
  mine->setOuter(std::move(outer), std::move(there), parent.jobRanks_);
}

void Communicator::watchAbortRequests() { installWaitHook(); }

void Communicator::requestAbort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(abortRequest_->mu);
  if (abortRequest_->requested.load()) return;  // the first reason stands
  abortRequest_->reason = reason;
  abortRequest_->requested.store(true);
}

void Communicator::throwIfAbortRequested() const {
  for (const Communicator* c = this; c != nullptr; c = c->upstream_) {
    if (c->abortRequest_->requested.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(c->abortRequest_->mu);
      throw IoError(-1, c->abortRequest_->reason);
    }
  }
}

void Communicator::installWaitHook() {
  if (waitHook_) return;
  waitHook_ = true;
  device_->setWaitHook([this] { onWait(); });
}

// Called from inside this device's waits, at every turn and at least every 200 us.
void Communicator::onWait() {
  throwIfAbortRequested();
  if (upstream_ == nullptr) return;
  // The parent's device is driven at most every millisecond (its progress is a syscall-free
  // peek on every backend, but not free).
  const auto now = std::chrono::steady_clock::now();
  if (now < nextUpstreamPoll_) return;
  nextUpstreamPoll_ = now + std::chrono::milliseconds(1);
  upstream_->device().progress();
  if (std::exception_ptr reason = upstreamAbort()) std::rethrow_exception(reason);
}

std::exception_ptr Communicator::upstreamAbort() const {
  if (upstream_ == nullptr || !upstream_->device().aborted()) return nullptr;
  std::exception_ptr reason = upstream_->device().abortReason();
  return reason ? reason : makeError(transport::ErrorKind::kIo, -1, "the enclosing communicator was aborted");
}

void Communicator::setModel(const coll::ModelConstants& model) {
  *model_ = model;
  chooser_.reset();
}

coll::AllreduceChooser& Communicator::allreduceChooser() {
  if (!chooser_) {
    coll::AllreduceChooser::Rules rules;
    rules.allowed = coll::AlgorithmSet::parse(tuning_.allreduceAlgorithm);
    rules.directMaxBytes = tuning_.directMaxBytes;
    rules.hierarchical = tuning_.hierarchical;
    rules.knobs = {segmentBytes_, tuning_.ringChunkBytes};
    chooser_ = std::make_unique<coll::AllreduceChooser>(*model_, coll::jobShape(size_, hostOf_), rules);
  }
  return *chooser_;
}

void Communicator::setStore(std::shared_ptr<rendezvous::Store> store, std::string prefix) {
  store_ = std::move(store);
  storePrefix_ = std::move(prefix);
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& ranks, const std::string& name) {
  RF_ENFORCE(store_ != nullptr, "split: this communicator was built without a store");
  int newRank = -1;
  std::vector<bool> seen(size_, false);
  for (size_t i = 0; i < ranks.size(); ++i) {
    int r = ranks[i];
    if (r < 0 || r >= size_ || seen[r]) {
      RF_THROW(InvalidArgument, "split '", name, "': rank ", r,
               (r < 0 || r >= size_ ? " is out of range" : " appears twice"), " (group of ", size_, ")");
    }
    seen[r] = true;
    if (r == rank_) newRank = static_cast<int>(i);
  }
  if (newRank < 0) RF_THROW(InvalidArgument, "split '", name, "': rank ", rank_, " is not a member");
  const std::string prefix = storePrefix_ + "/split/" + name;
  const int newSize = static_cast<int>(ranks.size());
  std::unique_ptr<Communicator> comm;
  if (perPeer_) {
    comm = connectPerPeer(*store_, newRank, newSize, *perPeer_, prefix);
  } else {
    comm = connect(*store_, newRank, newSize, transport::createDevice(device_->name()), prefix);
  }
  comm->setStore(store_, prefix);
  comm->jobRanks_.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) comm->jobRanks_[i] = jobRank(ranks[i]);
  comm->setTimeout(timeout_);
  comm->segmentBytes_ = segmentBytes_;
  comm->tuning_ = tuning_;
  comm->setModel(*model_);
  if (!hostOf_.empty()) {
    std::vector<std::string> ids;
    for (int r : ranks) ids.push_back("host" + std::to_string(hostOf_[r]));
    comm->setHostIds(ids);
  }
  return comm;
}

int Communicator::jobRank(int r) const {
  return r >= 0 && r < static_cast<int>(jobRanks_.size()) ? jobRanks_[r] : r;
}

std::string Communicator::inJobRanks(const std::string& text) const {
  if (jobRanks_.empty()) return text;
  std::string out;
  out.reserve(text.size() + 16);
  size_t i = 0;
  while (i < text.size()) {
    // "rank N" or "rank (N)", "rank" a whole word ("ranks 0-3", "frank 1" are left alone), and
    // not "job rank N", which is in the job's numbers already (liveness::Monitor's outer blame)
    const bool word = text.compare(i, 5, "rank ") == 0 &&
                      (i == 0 || !(std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_')) &&
                      !(i >= 4 && text.compare(i - 4, 4, "job ") == 0);
    if (!word) {
      out += text[i++];
      continue;
    }
    size_t j = i + 5;
    const bool paren = j < text.size() && text[j] == '(';
    if (paren) ++j;
    size_t k = j;
    while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k])) && k - j < 9) ++k;
    const bool number = k > j && (k == text.size() || !std::isalnum(static_cast<unsigned char>(text[k])));
    if (!number || (paren && (k == text.size() || text[k] != ')'))) {
      out.append(text, i, 5);
      i += 5;
      continue;
    }
    out.append(text, i, j - i);
    out += std::to_string(jobRank(std::stoi(text.substr(j, k - j))));
    i = k;
  }
  return out;
}

int64_t Communicator::deleteStoreKeys() {
  if (store_ == nullptr || storePrefix_.empty()) return 0;
  return store_->deletePrefix(storePrefix_ + "/");
}

std::byte* Communicator::scratch(size_t bytes, int slot) {
  RF_ENFORCE(slot >= 0, "scratch slot ", slot);
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(slot + 1);
  auto& buffer = scratch_[slot];
  if (buffer.size() < bytes) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(bytes);
  }
  return buffer.data();
}

void Communicator::checkUsable(const char* collective) {
  if (error_) std::rethrow_exception(error_);
  if (device_->aborted()) {
    error_ = device_->abortReason();
    if (!error_) {
      error_ = makeError(transport::ErrorKind::kIo, -1,
                         detail::concat(collective, " on rank ", rank_, ": the communicator was aborted"));
    }
    std::rethrow_exception(error_);
  }
}

void Communicator::abort(transport::ErrorKind kind, const std::string& text) {
  if (failed()) return;
  try {
    device_->abort(kind, text);
  } catch (const std::exception& e) {
    RF_LOG(kWarning) << "abort failed: " << e.what();
  }
}

void Communicator::fail(const char* collective, std::exception_ptr error) {
  int peer = -1;
  std::string text;
  const transport::ErrorKind kind = transport::describeError(error, text, peer);
  const std::string original = text;
  std::exception_ptr final;
  if (device_->aborted()) {
    // Another rank aborted first; its reason is what every rank reports.
    final = device_->abortReason();
    if (!final || isLocalTransportFailure(final)) final = error;
  } else if (std::exception_ptr upstream = upstreamAbort()) {
    // The group this one runs inside was aborted: its reason, word for word, is what this
    // group's peers hear and what every rank reports.
    std::string reason;
    int culprit = -1;
    abort(transport::describeError(upstream, reason, culprit), reason);
    final = upstream;
  } else {
    // This rank's own words, in the job's rank numbers: the group's peers repeat them as they
    // are (what they receive was renamed once, here).
    std::string mine = inJobRanks(text);
    if (kind == transport::ErrorKind::kIo && std::string_view(text).rfind(collective, 0) != 0) {
      mine = detail::concat(collective, " failed on rank ", jobRank(rank_), ": ", mine);
    }
    peer = peer >= 0 ? jobRank(peer) : peer;
    abort(kind, mine);
    // On a group that aborts atomically (loopback) a concurrent abort may have won instead.
    std::exception_ptr winner = device_->abortReason();
    if (winner && !isLocalTransportFailure(winner)) {
      std::string w = messageOf(winner);
      if (w != mine && w != original) final = winner;
    }
    if (!final) final = makeError(kind, peer, mine);
  }
  inflight_.clear();
  error_ = final;
  RF_LOG(kDebug) << collective << " failed: " << messageOf(final);
  std::rethrow_exception(final);
}

}  // namespace ringfold
