// Communicator: a group of `size` ranks, this process being `rank`, with one Connection to each
// peer, a Reducer, and what every collective shares.
//
// Vocabulary
//   sequence : every collective call takes the next sequence number. All ranks call collectives
//              in the same order, so equal calls get equal numbers; tags are built from it, so
//              messages of consecutive collectives never pair up by mistake.
//   check    : the collective's arguments (kind, count, dtype, op, root) packed into the
//              transport's 64-bit check word; a rank that disagrees is caught by the receiver.
//   guarded  : each collective body runs inside guarded(): on any error it aborts the device
//              with a readable message, so every rank fails with the same message instead of
//              some of them hanging, and then throws it. After that the communicator is
//              unusable (as an NCCL communicator after ncclCommAbort): every later call throws
//              the same error at once.
//   in flight: the memory regions and requests of the running collective live in inflight(),
//              not on the collective's stack, so that on failure guarded() aborts the device
//              *before* releasing them: no transport op is left touching a caller's buffer.
//
// Contract: one thread at a time uses a communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "reduce/reducer.h"
#include "transport/connection.h"
#include "transport/device.h"

namespace ringfold {

namespace rendezvous {
class Store;
}
struct HostSplit;
namespace coll {
struct ModelConstants;
class AllreduceChooser;
}

// Settings the collectives read once per communicator (from params at construction).
struct CollectiveTuning {
  std::string allreduceAlgorithm = "auto";     // RINGFOLD_ALGO: auto, or NCCL_ALGO's list syntax
  std::optional<uint64_t> directMaxBytes;      // RINGFOLD_DIRECT_MAX_BYTES; unset: the model decides
  uint64_t ringChunkBytes = 256 << 10;         // RINGFOLD_RING_CHUNK_BYTES; 0: one round
  std::optional<bool> hierarchical;            // RINGFOLD_HIERARCHICAL_ALLREDUCE; unset: the model decides
};

class Communicator {
 public:
  // Connects `device` to every other rank through `store` (keys under `prefix`), waiting at most
  // RINGFOLD_START_TIMEOUT.
  static std::unique_ptr<Communicator> connect(rendezvous::Store& store, int rank, int size,
                                               std::unique_ptr<transport::Device> device,
                                               const std::string& prefix = "rf");

  // Connects each peer through the backend that suits it (transport/per_peer: the local backend
  // to ranks of this host, the remote one to the others), waiting at most RINGFOLD_START_TIMEOUT.
  // `config` reaches every backend's device; split() connects the same way.
  static std::unique_ptr<Communicator> connectPerPeer(rendezvous::Store& store, int rank, int size,
                                                      const transport::DeviceConfig& config,
                                                      const std::string& prefix = "rf");

  // Everything from the environment: rank and size from any supported launcher's variables,
  // the TCP store (hosted by this process when it is rank 0 and nobody else hosts it), and the
  // transport named by RINGFOLD_TRANSPORT (loopback for a single process when it is unset;
  // tcp_uring, the default, means a backend per peer as in connectPerPeer, told the store's
  // address so that TCP listens on the interface that reaches it).
  // Errors name the variable that is wrong.
  // `incarnation` > 0 puts every store key under "rf/inc<N>", so that a job that shuts down and
  // starts again (same store, same ranks) never meets the previous incarnation's addresses.
  // Once incarnation N has met, its rank 0 deletes the keys of the incarnations before it (up
  // to 64 back; "rf/incarnations/deleted" records how far that has gone): every rank has left
  // them, as all of them met in N.
  static std::unique_ptr<Communicator> fromEnvironment(int incarnation = 0);

  Communicator(int rank, int size, std::unique_ptr<transport::Device> device,
               std::vector<std::unique_ptr<transport::Connection>> peers,
               std::unique_ptr<Reducer> reducer);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  transport::Connection& peer(int rank);
  transport::Device& device() { return *device_; }
  // The transport as configured: for backends chosen per peer "rdma" when an rdma device joins
  // any peer, else "tcp_uring" (whatever device() is: unix_uring, tcp_uring or both); otherwise
  // device().name(). Names that users see (timeline activities) use this, so a socket job's
  // names do not depend on where its peers run.
  std::string transportName() const {
    if (!perPeer_) return device_->name();
    return std::string(device_->name()).find("rdma") != std::string::npos ? "rdma" : "tcp_uring";
  }
  // The default reducer (CPU), for collectives whose Options name none.
  Reducer& reducer() { return *reducer_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }
  size_t segmentBytes() const { return segmentBytes_; }
  void setSegmentBytes(size_t bytes);
  const CollectiveTuning& tuning() const { return tuning_; }
  // Throws InvalidArgument naming RINGFOLD_ALGO if its algorithm list is not understood.
  void setTuning(CollectiveTuning tuning);

  // Which host each rank runs on (host numbers in order of their lowest rank), or empty when
  // unknown (a communicator built by hand: one host as far as the model is concerned).
  // connectPerPeer() fills it from the host identities the backends were chosen by.
  const std::vector<int>& hostOf() const { return hostOf_; }
  // Sets hostOf() from every rank's host id (equal ids: one host; "-": a host of its own).
  void setHostIds(const std::vector<std::string>& ids);
  // The communicators of this rank's host and of its local rank across hosts (collective over
  // every rank, built on first use with split(); needs hostOf() and the store). Both follow
  // this communicator's aborts (followAborts).
  HostSplit& hostSplit();

  // For a group whose collectives run inside `parent`'s (hostSplit's): its blocking waits also
  // drive `parent`'s device (about every millisecond), and once `parent` is aborted they fail
  // with `parent`'s reason, which this group's peers are told word for word. So an abort on
  // the job's communicator reaches a rank waiting in a phase of a hierarchical allreduce at
  // once, not at that phase's timeout. The group's WAITING notices are relayed to `parent`'s
  // peers, and its blame follows what a rank said there (liveness::Monitor::setOuter), so a rank
  // waiting in another group of the allreduce is not blamed for the rank it waits on.
  // `parent` must outlive this communicator.
  void followAborts(Communicator& parent);

  // Aborts from another thread (ncclCommAbort). After watchAbortRequests() (called once, before
  // the communicator is used: it makes its blocking waits wake every 200 us), requestAbort()
  // may be called from any thread: a blocking wait of this communicator, or of a group that
  // follows it (followAborts), then fails within about a millisecond with IoError(`reason`),
  // and so does its next collective; the failing collective's guard tells every peer.
  void watchAbortRequests();
  void requestAbort(const std::string& reason);

  // The allreduce cost model's constants (allreduce_model.h): measured by fromEnvironment(),
  // defaults otherwise; split() passes them on.
  const coll::ModelConstants& model() const { return *model_; }
  void setModel(const coll::ModelConstants& model);
  // The allreduce algorithm chooser for this communicator's model, hosts and tuning (rebuilt
  // when one of them changes).
  coll::AllreduceChooser& allreduceChooser();

  uint64_t nextSequence() { return sequence_++; }

  // Scratch memory owned by the communicator, grown on demand and reused: steady state
  // allocates nothing. Distinct slots are distinct buffers.
  std::byte* scratch(size_t bytes, int slot = 0);

  // The store the group met through, and its key prefix; split() needs them. fromEnvironment()
  // sets them; code that builds a communicator by hand calls this.
  void setStore(std::shared_ptr<rendezvous::Store> store, std::string prefix);

  // A communicator over `ranks` (ranks of this one, distinct; the new rank i is ranks[i]),
  // with fresh devices of the same backends (chosen per peer again if this one's were), connected through this group's store under
  // "<prefix>/split/<name>". Every rank in `ranks` calls it with the same arguments; other
  // ranks do not call it. `name` must be new for this group. Timeout, segment size and tuning
  // are inherited. Throws InvalidArgument if this rank is not in `ranks` or a rank is out of
  // range or repeated. The new group's errors name ranks as the job does (jobRank()).
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string& name);

  // The job's number for rank `r` of this group (split()'s groups of groups included): the
  // numbering every error this communicator throws uses, so that a failure seen inside a
  // sub-group (a hierarchical allreduce's, a process set's) names the rank the user knows.
  int jobRank(int r) const;
  // `text` (a transport's words, in this group's numbers) with each "rank N" / "rank (N)" of
  // this group renamed to the job's number ("job rank N" is left alone); unchanged for a group
  // that is the job.
  std::string inJobRanks(const std::string& text) const;

  // Deletes the store keys this group met under ("<prefix>/", split()'s groups of it included)
  // and returns how many there were; 0 when it has no store. Call it on one member only, once
  // no member reads them any more (every member has finished connecting, as when the group
  // has run a collective or agreed on anything after split() returned). The prefix must not be
  // used again.
  int64_t deleteStoreKeys();

  // Keeps `resource` alive as long as the communicator (e.g. the store and its server).
  void keepAlive(std::shared_ptr<void> resource) { keepAlive_.push_back(std::move(resource)); }

  // Requests and regions of the running collective (see "in flight" above).
  struct InFlight {
    std::vector<std::unique_ptr<transport::MemoryRegion>> regions;
    std::vector<std::unique_ptr<transport::Request>> requests;
    void clear() {
      requests.clear();
      regions.clear();
    }
  };
  InFlight& inflight() { return inflight_; }

  template <typename Body>
  void guarded(const char* collective, Body&& body) {
    checkUsable(collective);
    try {
      throwIfAbortRequested();  // requestAbort() on an idle communicator: fail, telling every peer
      body();
    } catch (...) {
      fail(collective, std::current_exception());
    }
    inflight_.clear();
  }

  // True once a collective failed here or the device was aborted by a peer.
  bool failed() const { return error_ != nullptr || device_->aborted(); }

  // Aborts the device with `text`, telling every peer, unless the communicator failed already
  // (its own reason then stands). An abort that itself fails is logged, not thrown: callers
  // are reporting a failure already.
  void abort(transport::ErrorKind kind, const std::string& text);

 private:
  void checkUsable(const char* collective);
  // Aborts the device with the error's kind and message, releases what is in flight, and
  // throws the error every rank of the group throws.
  [[noreturn]] void fail(const char* collective, std::exception_ptr error);
  // The reason `parent` (followAborts) was aborted with; null while it was not (or no parent).
  std::exception_ptr upstreamAbort() const;
  // What this device's wait hook does (followAborts, watchAbortRequests); installs it once.
  void installWaitHook();
  void onWait();
  // Throws the requested abort's IoError, if requestAbort() was called here or upstream.
  void throwIfAbortRequested() const;

  std::vector<std::shared_ptr<void>> keepAlive_;  // first member: destroyed last
  std::shared_ptr<rendezvous::Store> store_;
  std::string storePrefix_;
  int rank_;
  int size_;
  std::vector<int> jobRanks_;  // jobRank() of each rank; empty: the same numbers
  std::unique_ptr<transport::Device> device_;
  std::optional<transport::DeviceConfig> perPeer_;  // set when the backends were chosen per peer
  std::vector<std::unique_ptr<transport::Connection>> peers_;
  std::unique_ptr<Reducer> reducer_;
  std::chrono::milliseconds timeout_;
  size_t segmentBytes_;
  CollectiveTuning tuning_;
  std::vector<int> hostOf_;
  std::unique_ptr<HostSplit> hostSplit_;
  std::unique_ptr<coll::ModelConstants> model_;
  std::unique_ptr<coll::AllreduceChooser> chooser_;
  uint64_t sequence_ = 0;
  std::vector<std::vector<std::byte>> scratch_;
  InFlight inflight_;
  std::exception_ptr error_;  // the error this communicator failed with
  Communicator* upstream_ = nullptr;  // followAborts(): the group this one runs inside
  std::chrono::steady_clock::time_point nextUpstreamPoll_{};
  bool waitHook_ = false;
  // requestAbort(): `requested` is read by the waiting thread without the lock; `reason` is
  // written once, under it, before `requested` is set.
  struct AbortRequest {
    std::atomic<bool> requested{false};
    std::mutex mu;
    std::string reason;
  };
  std::unique_ptr<AbortRequest> abortRequest_ = std::make_unique<AbortRequest>();
};

}  // namespace ringfold
