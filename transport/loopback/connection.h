// loopback Connection: messages between ranks that are threads of one process.
//
// Vocabulary
//   endpoint : one device's mailbox. It holds, per (source rank, tag), the receives posted here
//              and the messages that arrived before their receive (copied into a buffer).
//   group    : the devices joined by connectAll, directly or through each other (connectAll
//              merges the groups of the peers it connects into its own). It holds the abort
//              reason: the first abort in the group wins and poisons every member.
//   failure  : a local error (timeout, check mismatch) poisons only this endpoint; later
//              requests here throw it. An abort reason, when there is one, takes precedence.
//
// Sends never block: a send copies straight into the first matching posted receive (outside
// the lock, after claiming it) or into a buffer, and is then complete. A receive completes when
// a sender has copied into it. Waits sleep on the endpoint's condition variable (no spinning).
// Destroying a pending receive withdraws it, so no peer writes into its region afterwards.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/connection.h"
#include "transport/device.h"

namespace ringfold::transport::loopback {

struct Endpoint;

struct Group {
  std::mutex mu;
  std::atomic<bool> aborted{false};
  ErrorKind kind = ErrorKind::kIo;
  std::string message;  // written once, before `aborted` is set
  int originRank = -1;
  std::vector<std::weak_ptr<Endpoint>> members;
  std::shared_ptr<Group> mergedInto;  // set once merged: aborts go there

  // First abort wins; wakes every member's waiters. Returns false if already aborted.
  bool abort(ErrorKind kind, const std::string& message, int originRank);
  // Moves every member of `other` into this group (its abort, if any, comes along). Callers
  // serialise merges (the device registry's lock).
  void absorb(const std::shared_ptr<Group>& self, const std::shared_ptr<Group>& other);
};

// One posted receive.
struct RecvSlot {
  enum class State { kPosted, kCopying, kDone, kFailed };
  std::byte* data = nullptr;
  size_t length = 0;
  uint64_t tag = 0;
  uint64_t check = 0;
  int peer = -1;
  State state = State::kPosted;
  std::exception_ptr error;
};

struct Endpoint {
  std::string address;
  int rank = -1;
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Group> group;   // replaced when connectAll merges groups
  std::exception_ptr failure;     // first local failure (see above)
  std::function<void()> waitHook;  // Device::setWaitHook: called unlocked, every ~1 ms of a wait

  struct Message {
    std::vector<std::byte> bytes;
    uint64_t check = 0;
  };
  struct Channel {
    std::deque<Message> unexpected;
    std::deque<std::shared_ptr<RecvSlot>> posted;
  };
  std::map<std::pair<int, uint64_t>, Channel> channels;  // (source rank, tag)

  // The error a request towards/from `peer` must throw now, or null. Caller holds `mu`.
  std::exception_ptr poisonLocked(int peer) const;
  void fail(std::exception_ptr error);  // records the first local failure
};

class Connection final : public transport::Connection {
 public:
  Connection(std::shared_ptr<Endpoint> self, std::shared_ptr<Endpoint> peer, int peerRank);
  int peerRank() const override { return peerRank_; }
  std::unique_ptr<Request> isend(const transport::MemoryRegion& region, size_t offset,
                                 size_t length, uint64_t tag, uint64_t check) override;
  std::unique_ptr<Request> irecv(transport::MemoryRegion& region, size_t offset, size_t length,
                                 uint64_t tag, uint64_t check) override;

 private:
  std::shared_ptr<Endpoint> self_;
  std::shared_ptr<Endpoint> peer_;
  int peerRank_;
};

}  // namespace ringfold::transport::loopback
