// PairLink of the rdma backend (pair.h): DeviceState's start-up steps carried over one socket.
#include "transport/rdma/pair.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

#include "common/error.h"
#include "transport/liveness/monitor.h"
#include "transport/rdma/device_state.h"
#include "transport/rdma/peer.h"

namespace ringfold::transport::rdma {

namespace {

using Clock = std::chrono::steady_clock;

// A start-up frame: 4 bytes of length (little endian), then the bytes. Blobs are a few hundred
// bytes; anything past this is not a ringfold peer.
constexpr uint32_t kMaxFrameBytes = 1 << 20;
constexpr const char* kReady = "ready";
// The heartbeat reads the socket at most this often (NCCL calls test() in a tight loop).
constexpr auto kWatchEvery = std::chrono::milliseconds(1);

}  // namespace

PairLink::PairLink(int fd, int rank, std::chrono::milliseconds timeout, const Options& options)
    : fd_(fd), rank_(rank), deadline_(Clock::now() + timeout), timeout_(timeout) {
  RF_ENFORCE(rank == 0 || rank == 1, "PairLink: rank ", rank, " is not 0 or 1");
  RF_ENFORCE(fd >= 0, "PairLink: no socket");
  state_ = std::make_shared<DeviceState>(options);
  queue(state_->begin(rank, 2, {1 - rank}));
}

PairLink::~PairLink() { state_->shutdown(); }

void PairLink::queue(const std::string& frame) {
  const uint32_t n = static_cast<uint32_t>(frame.size());
  const unsigned char length[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                   static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  out_.append(reinterpret_cast<const char*>(length), 4);
  out_ += frame;
}

bool PairLink::pump() {
  while (!out_.empty()) {
    const ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // 0: the peer closed; another error: the connection broke
  }
}

bool PairLink::nextFrame(std::string& frame) {
  if (in_.size() < 4) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(in_.data());
  const uint32_t n = b[0] | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  if (n > kMaxFrameBytes) {
    RF_THROW(Error, "rdma pair: rank ", 1 - rank_, " sent a start-up frame of ", n,
             " bytes (at most ", kMaxFrameBytes, "): not a ringfold rdma peer");
  }
  if (in_.size() < 4 + size_t{n}) return false;
  frame = in_.substr(4, n);
  in_.erase(0, 4 + size_t{n});
  return true;
}

bool PairLink::poll() {
  if (stage_ == Stage::kUp) return true;
  const int peer = 1 - rank_;
  if (state_->poisoned()) state_->throwPoison();
  if (!pump()) {
    throw IoError(peer, detail::concat("rdma pair: rank ", peer, " closed the connection during the rdma start-up"));
  }
  std::string frame;
  if (stage_ == Stage::kAddress && nextFrame(frame)) {
    state_->insert(peer, frame);
    state_->linked();
    queue(kReady);
    pump();
    stage_ = Stage::kReady;
  }
  if (stage_ == Stage::kReady && nextFrame(frame)) {
    RF_ENFORCE(frame == kReady, "rdma pair: rank ", peer, " sent '", frame.substr(0, 32),
               "' where its start-up says ready");
    state_->greet(peer);
    stage_ = Stage::kHello;
  }
  if (stage_ == Stage::kHello) {
    state_->progress();
    if (state_->poisoned()) state_->throwPoison();
    if (state_->greeted(peer)) {
      stage_ = Stage::kUp;
      state_->logConnected(1);
      return true;
    }
  }
  if (Clock::now() >= deadline_) {
    throw IoError(peer, detail::concat("rdma pair: rank ", peer, " did not finish the rdma start-up within ",
                                       liveness::seconds(timeout_), " s"));
  }
  return false;
}

std::unique_ptr<RdmaRequest> PairLink::start(void* data, size_t length, uint64_t tag, bool isSend) {
  RF_ENFORCE(stage_ == Stage::kUp, isSend ? "isend" : "irecv", ": the rdma link is not up yet (poll() it)");
  RF_ENFORCE(data != nullptr || length == 0, isSend ? "isend" : "irecv", ": null buffer of ", length, " bytes");
  if (state_->poisoned()) state_->throwPoison();
  auto req = std::make_unique<RdmaRequest>(state_);
  req->state().upTo = !isSend;
  prepareRequest(*state_, state_->peer(1 - rank_), req->state(), isSend, static_cast<std::byte*>(data), length, tag,
                 0, nullptr);
  return req;
}

std::unique_ptr<RdmaRequest> PairLink::isend(const void* data, size_t length, uint64_t tag) {
  auto req = start(const_cast<void*>(data), length, tag, true);
  state_->peer(1 - rank_)->postSend(req->state());
  if (state_->poisoned()) state_->throwPoison();
  return req;
}

std::unique_ptr<RdmaRequest> PairLink::irecv(void* data, size_t capacity, uint64_t tag) {
  auto req = start(data, capacity, tag, false);
  state_->peer(1 - rank_)->postRecv(req->state());
  if (state_->poisoned()) state_->throwPoison();
  return req;
}

void PairLink::heartbeat() {
  if (stage_ != Stage::kUp) return;
  const Clock::time_point now = Clock::now();
  if (!closed_) {
    if (now - lastWatch_ < kWatchEvery) return;
    lastWatch_ = now;
    char buf[64];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return;
    closed_ = true;
    closedAt_ = now;
  }
  if (now - closedAt_ >= kClosedGrace && !state_->poisoned()) {
    const int peer = 1 - rank_;
    state_->poisonIo(peer, detail::concat("rank ", peer, " closed its rdma connection (its process exited, crashed "
                                          "or closed the comm)"));
  }
}

void PairLink::progress() {
  if (stage_ != Stage::kUp) return;
  if (!state_->poisoned()) state_->progress();
  heartbeat();
}

bool PairLink::failed() const { return state_->poisoned(); }

std::exception_ptr PairLink::error() const { return state_->poisonError(); }

std::string PairLink::describe() const {
  Fabric* f = state_->fabricIfOpen();
  return f == nullptr ? std::string() : detail::concat(f->kind(), " ", f->describe());
}

Stats PairLink::stats() const { return state_->stats(); }

}  // namespace ringfold::transport::rdma
