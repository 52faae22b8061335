// PairLink (pair.h), and DeviceState::adopt, the part of DeviceState::connect after the mesh.
#include "transport/tcp_uring/pair.h"

#include "common/error.h"
#include "common/logging.h"
#include "transport/tcp_uring/device_state.h"
#include "transport/tcp_uring/peer_link.h"
#include "transport/tcp_uring/uring_loop.h"

namespace ringfold::transport::tcp_uring {

std::vector<PeerLink*> DeviceState::adopt(int rank, std::vector<std::vector<Socket>> sockets) {
  const int size = static_cast<int>(sockets.size());
  RF_ENFORCE(rank >= 0 && rank < size, "adopt: rank ", rank, " of ", size);
  RF_ENFORCE(!connected_, "connectAll() or adopt() may be called once per device");
  RF_ENFORCE(!closed_, "the device was destroyed");
  connected_ = true;
  rank_ = rank;
  std::vector<PeerLink*> links(size, nullptr);
  peers_.resize(size);
  for (int p = 0; p < size; ++p) {
    if (p == rank || sockets[p].empty()) continue;
    for (Socket& s : sockets[p]) {
      RF_ENFORCE(s.valid(), "adopt: an invalid socket for rank ", p);
      setDataSocketOptions(s.fd(), tuning_.timeout, tuning_.socketBufferBytes);
    }
    uint32_t first = static_cast<uint32_t>(sockets_.size());
    for (size_t i = 0; i < sockets[p].size(); ++i) sockets_.push_back({nullptr, static_cast<uint32_t>(i)});
    peers_[p] = std::make_unique<PeerLink>(*this, p, std::move(sockets[p]), first);
    for (size_t i = 0; i < peers_[p]->socketCount(); ++i) sockets_[first + i].peer = peers_[p].get();
    links[p] = peers_[p].get();
  }
  std::vector<bool> linked(size, false);
  for (int p = 0; p < size; ++p) linked[p] = peers_[p] != nullptr;
  monitor_->attach(*this, rank, size, linked);
  for (auto& p : peers_) {
    if (p) p->start();
  }
  uring_->submit();
  return links;
}

PairLink::PairLink(std::vector<Socket> sockets, int rank) {
  RF_ENFORCE(rank == 0 || rank == 1, "PairLink: rank ", rank, " is not 0 or 1");
  RF_ENFORCE(!sockets.empty(), "PairLink: no sockets");
  Options options;
  options.family = Family::kTcp;
  state_ = std::make_shared<DeviceState>(options);
  std::vector<std::vector<Socket>> byRank(2);
  byRank[1 - rank] = std::move(sockets);
  link_ = state_->adopt(rank, std::move(byRank))[1 - rank];
}

PairLink::~PairLink() { state_->shutdown(); }

std::unique_ptr<TcpRequest> PairLink::start(void* data, size_t length, uint64_t tag, bool isSend, bool upTo) {
  RF_ENFORCE(data != nullptr || length == 0, isSend ? "isend" : "irecv", ": null buffer of ", length, " bytes");
  if (state_->poisoned()) state_->throwPoison();
  auto req = std::make_unique<TcpRequest>(state_);
  RequestState& r = req->state();
  r.isSend = isSend;
  r.peer = link_;
  r.data = static_cast<std::byte*>(data);
  r.length = length;
  r.tag = tag;
  r.upTo = upTo;
  return req;
}

std::unique_ptr<TcpRequest> PairLink::isend(const void* data, size_t length, uint64_t tag) {
  auto req = start(const_cast<void*>(data), length, tag, true, false);
  link_->postSend(req->state());
  if (state_->poisoned()) state_->throwPoison();
  state_->uring().submit();
  return req;
}

std::unique_ptr<TcpRequest> PairLink::irecv(void* data, size_t capacity, uint64_t tag) {
  auto req = start(data, capacity, tag, false, true);
  link_->postRecv(req->state());
  if (state_->poisoned()) state_->throwPoison();
  return req;
}

void PairLink::progress() {
  if (!state_->poisoned()) state_->progress();
}

bool PairLink::failed() const { return state_->poisoned(); }

std::exception_ptr PairLink::error() const { return state_->poisonError(); }

size_t PairLink::socketCount() const { return link_->socketCount(); }

}  // namespace ringfold::transport::tcp_uring
