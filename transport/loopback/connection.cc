#include "transport/loopback/connection.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.h"

namespace ringfold::transport::loopback {

namespace {

using Clock = std::chrono::steady_clock;

class DoneRequest final : public Request {
 public:
  bool test() override { return true; }
  void wait(std::chrono::milliseconds) override {}
};

class FailedRequest final : public Request {
 public:
  explicit FailedRequest(std::exception_ptr error) : error_(std::move(error)) {}
  bool test() override { std::rethrow_exception(error_); }
  void wait(std::chrono::milliseconds) override { std::rethrow_exception(error_); }

 private:
  std::exception_ptr error_;
};

// Removes a still-posted receive from its channel. Caller holds ep.mu.
void withdrawLocked(Endpoint& ep, const std::shared_ptr<RecvSlot>& slot) {
  auto it = ep.channels.find({slot->peer, slot->tag});
  if (it == ep.channels.end()) return;
  auto& posted = it->second.posted;
  for (auto p = posted.begin(); p != posted.end(); ++p) {
    if (*p == slot) {
      posted.erase(p);
      break;
    }
  }
  if (it->second.posted.empty() && it->second.unexpected.empty()) ep.channels.erase(it);
}

class RecvRequest final : public Request {
 public:
  RecvRequest(std::shared_ptr<Endpoint> self, std::shared_ptr<RecvSlot> slot)
      : self_(std::move(self)), slot_(std::move(slot)) {}

  ~RecvRequest() override {
    std::unique_lock<std::mutex> lock(self_->mu);
    if (slot_->state == RecvSlot::State::kPosted) withdrawLocked(*self_, slot_);
    self_->cv.wait(lock, [&] { return slot_->state != RecvSlot::State::kCopying; });
  }

  bool test() override {
    std::unique_lock<std::mutex> lock(self_->mu);
    return settledLocked();
  }

  void wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(self_->mu);
    const auto deadline = Clock::now() + timeout;
    while (!settledLocked()) {
      if (slot_->state == RecvSlot::State::kCopying) {
        self_->cv.wait(lock);  // a peer is copying into the region right now; it takes microseconds
        continue;
      }
      if (Clock::now() >= deadline) {
        withdrawLocked(*self_, slot_);
        auto error = std::make_exception_ptr(IoError(
            slot_->peer, detail::concat("rank ", self_->rank, " timed out after ",
                                        static_cast<double>(timeout.count()) / 1000.0,
                                        " s waiting for a message from rank ", slot_->peer,
                                        " (loopback, tag ", slot_->tag, ")")));
        slot_->state = RecvSlot::State::kFailed;
        slot_->error = error;
        if (!self_->failure) self_->failure = error;
        std::rethrow_exception(error);
      }
      if (!self_->waitHook) {
        self_->cv.wait_until(lock, deadline);
        continue;
      }
      self_->cv.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(1)));
      auto hook = self_->waitHook;
      lock.unlock();
      hook();  // may abort this device (a composite spreading a peer's abort)
      lock.lock();
    }
  }

 private:
  // True when done; throws when failed or poisoned. Caller holds the lock.
  bool settledLocked() {
    switch (slot_->state) {
      case RecvSlot::State::kDone: return true;
      case RecvSlot::State::kFailed: std::rethrow_exception(slot_->error);
      case RecvSlot::State::kCopying: return false;
      case RecvSlot::State::kPosted: break;
    }
    if (auto poison = self_->poisonLocked(slot_->peer)) {
      withdrawLocked(*self_, slot_);
      slot_->state = RecvSlot::State::kFailed;
      slot_->error = poison;
      std::rethrow_exception(poison);
    }
    return false;
  }

  std::shared_ptr<Endpoint> self_;
  std::shared_ptr<RecvSlot> slot_;
};

void checkBounds(const transport::MemoryRegion& region, size_t offset, size_t length) {
  if (offset > region.size() || length > region.size() - offset) {
    RF_THROW(InvalidArgument, "loopback: message [", offset, ", ", offset + length,
             ") lies outside its memory region of ", region.size(), " bytes");
  }
}

}  // namespace

bool Group::abort(ErrorKind k, const std::string& text, int origin) {
  std::vector<std::weak_ptr<Endpoint>> toWake;
  {
    std::unique_lock<std::mutex> lock(mu);
    if (mergedInto) {
      auto target = mergedInto;
      lock.unlock();
      return target->abort(k, text, origin);
    }
    if (aborted.load()) return false;
    kind = k;
    message = text;
    originRank = origin;
    aborted.store(true, std::memory_order_release);
    toWake = members;
  }
  for (auto& weak : toWake) {
    if (auto ep = weak.lock()) {
      { std::lock_guard<std::mutex> lock(ep->mu); }  // a waiter checks the flag under this lock
      ep->cv.notify_all();
    }
  }
  return true;
}

void Group::absorb(const std::shared_ptr<Group>& self, const std::shared_ptr<Group>& other) {
  if (other == self) return;
  std::vector<std::weak_ptr<Endpoint>> moved;
  bool otherAborted = false;
  ErrorKind otherKind = ErrorKind::kIo;
  std::string otherMessage;
  int otherOrigin = -1;
  {
    std::lock_guard<std::mutex> lock(other->mu);
    moved.swap(other->members);
    other->mergedInto = self;
    otherAborted = other->aborted.load();
    otherKind = other->kind;
    otherMessage = other->message;
    otherOrigin = other->originRank;
  }
  for (auto& weak : moved) {
    if (auto ep = weak.lock()) {
      std::lock_guard<std::mutex> lock(ep->mu);
      ep->group = self;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    members.insert(members.end(), moved.begin(), moved.end());
  }
  if (otherAborted) abort(otherKind, otherMessage, otherOrigin);
}

std::exception_ptr Endpoint::poisonLocked(int peer) const {
  if (group && group->aborted.load(std::memory_order_acquire)) {
    const int blame = group->originRank == rank ? peer : group->originRank;
    try {
      throwError(group->kind, blame, group->message);
    } catch (...) {
      return std::current_exception();
    }
  }
  return failure;
}

void Endpoint::fail(std::exception_ptr error) {
  if (!failure) failure = std::move(error);
}

Connection::Connection(std::shared_ptr<Endpoint> self, std::shared_ptr<Endpoint> peer, int peerRank)
    : self_(std::move(self)), peer_(std::move(peer)), peerRank_(peerRank) {}

std::unique_ptr<Request> Connection::isend(const transport::MemoryRegion& region, size_t offset,
                                           size_t length, uint64_t tag, uint64_t check) {
  checkBounds(region, offset, length);
  {
    std::lock_guard<std::mutex> lock(self_->mu);
    if (auto poison = self_->poisonLocked(peerRank_)) return std::make_unique<FailedRequest>(poison);
  }
  const auto* src = static_cast<const std::byte*>(region.data()) + offset;
  Endpoint& dst = *peer_;
  std::unique_lock<std::mutex> lock(dst.mu);
  auto key = std::make_pair(self_->rank, tag);
  auto& channel = dst.channels[key];
  if (channel.posted.empty()) {
    Endpoint::Message message;
    message.bytes.assign(src, src + length);
    message.check = check;
    channel.unexpected.push_back(std::move(message));
    return std::make_unique<DoneRequest>();
  }
  auto slot = channel.posted.front();
  channel.posted.pop_front();
  if (channel.posted.empty() && channel.unexpected.empty()) dst.channels.erase(key);
  if (slot->length != length || slot->check != check) {
    slot->error = std::make_exception_ptr(
        CheckMismatch(self_->rank, tag, slot->length, length, slot->check, check));
    slot->state = RecvSlot::State::kFailed;
    dst.fail(slot->error);
    lock.unlock();
    dst.cv.notify_all();
    return std::make_unique<DoneRequest>();
  }
  slot->state = RecvSlot::State::kCopying;
  lock.unlock();
  if (length > 0) std::memcpy(slot->data, src, length);
  lock.lock();
  slot->state = RecvSlot::State::kDone;
  lock.unlock();
  dst.cv.notify_all();
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> Connection::irecv(transport::MemoryRegion& region, size_t offset,
                                           size_t length, uint64_t tag, uint64_t check) {
  checkBounds(region, offset, length);
  auto* dst = static_cast<std::byte*>(region.data()) + offset;
  std::unique_lock<std::mutex> lock(self_->mu);
  if (auto poison = self_->poisonLocked(peerRank_)) return std::make_unique<FailedRequest>(poison);
  auto key = std::make_pair(peerRank_, tag);
  auto& channel = self_->channels[key];
  if (!channel.unexpected.empty()) {
    Endpoint::Message message = std::move(channel.unexpected.front());
    channel.unexpected.pop_front();
    if (channel.posted.empty() && channel.unexpected.empty()) self_->channels.erase(key);
    if (message.bytes.size() != length || message.check != check) {
      auto error = std::make_exception_ptr(
          CheckMismatch(peerRank_, tag, length, message.bytes.size(), check, message.check));
      self_->fail(error);
      return std::make_unique<FailedRequest>(error);
    }
    lock.unlock();
    if (length > 0) std::memcpy(dst, message.bytes.data(), length);
    return std::make_unique<DoneRequest>();
  }
  auto slot = std::make_shared<RecvSlot>();
  slot->data = dst;
  slot->length = length;
  slot->tag = tag;
  slot->check = check;
  slot->peer = peerRank_;
  channel.posted.push_back(slot);
  return std::make_unique<RecvRequest>(self_, std::move(slot));
}

}  // namespace ringfold::transport::loopback
