// Completion queues, completion channels, asynchronous events and the status strings of the
// libibverbs.so.1 test double. A channel and a context's async_fd are pipes carrying one byte per
// queued event, so poll(2), O_NONBLOCK (EAGAIN) and blocking reads behave as on the real fds.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "nic.h"

#define VD_EXPORT extern "C" __attribute__((visibility("default")))

namespace vd {
namespace {

template <class T>
T* nullWith(int err) {
  errno = err;
  return nullptr;
}

const char* const kWcStatus[] = {
    "success", "local length error", "local QP operation error", "local EE context operation error",
    "local protection error", "Work Request Flushed Error", "memory management operation error",
    "bad response error", "local access error", "remote invalid request error", "remote access error",
    "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
    "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
    "invalid EE context state", "fatal error", "response timeout error", "general error", "TM error",
    "TM software rendezvous"};

const char* const kEvents[] = {
    "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
    "local access violation work queue error", "communication established", "send queue drained",
    "path migrated", "path migration request error", "local catastrophic error", "port active",
    "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
    "last WQE reached", "client reregistration", "GID table change", "WQ fatal"};

}  // namespace

int pollCq(ibv_cq* ibcq, int n, ibv_wc* wc) {
  auto* cq = reinterpret_cast<Cq*>(ibcq);
  std::lock_guard<std::mutex> g(cq->c->nic->mu);
  int got = 0;
  while (got < n && !cq->ring.empty()) {
    wc[got++] = cq->ring.front();
    cq->ring.pop_front();
  }
  return got;
}

int reqNotifyCq(ibv_cq* ibcq, int solicitedOnly) {
  auto* cq = reinterpret_cast<Cq*>(ibcq);
  std::lock_guard<std::mutex> g(cq->c->nic->mu);
  cq->armed = solicitedOnly ? 2 : 1;
  return 0;
}

}  // namespace vd

using namespace vd;

VD_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  auto* ch = new Channel;
  ch->ch.context = ctx;
  ch->ch.fd = fds[0];
  ch->ch.refcnt = 0;
  ch->c = contextOf(ctx);
  ch->writeFd = fds[1];
  std::lock_guard<std::mutex> g(ch->c->nic->mu);
  ch->c->channels.push_back(ch);
  return &ch->ch;
}

VD_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* ibch) {
  auto* ch = reinterpret_cast<Channel*>(ibch);
  {
    std::lock_guard<std::mutex> g(ch->c->nic->mu);
    if (ch->cqs > 0) return EBUSY;
    std::erase(ch->c->channels, ch);
  }
  close(ch->ch.fd);
  close(ch->writeFd);
  delete ch;
  return 0;
}

VD_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel, int vector) {
  if (cqe < 1 || cqe > kMaxCqe || vector < 0 || vector >= kCompVectors) return nullWith<ibv_cq>(EINVAL);
  if (channel && channel->context != ctx) return nullWith<ibv_cq>(EINVAL);
  auto* cq = new Cq;
  std::memset(&cq->cq, 0, sizeof cq->cq);
  size_t cap = 1;
  while (cap < size_t(cqe) + 1) cap <<= 1;  // like mlx5: a power of two, one slot kept free
  cq->cap = cap - 1;
  cq->cq.context = ctx;
  cq->cq.channel = channel;
  cq->cq.cq_context = cqContext;
  cq->cq.cqe = static_cast<int>(cq->cap);
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  cq->c = contextOf(ctx);
  cq->channel = reinterpret_cast<Channel*>(channel);
  std::lock_guard<std::mutex> g(cq->c->nic->mu);
  cq->cq.handle = ++cq->c->nic->nextKey;
  if (cq->channel) ++cq->channel->cqs;
  cq->c->cqs.push_back(cq);
  return &cq->cq;
}

VD_EXPORT int ibv_destroy_cq(ibv_cq* ibcq) {
  auto* cq = reinterpret_cast<Cq*>(ibcq);
  {
    std::lock_guard<std::mutex> g(cq->c->nic->mu);
    if (cq->qps > 0) return EBUSY;
    if (cq->compFetched != cq->compAcked || cq->asyncFetched != cq->asyncAcked) {
      std::fprintf(stderr, "verbs double: ibv_destroy_cq with %u completion and %u async events not acknowledged "
                   "(real libibverbs blocks here)\n", cq->compFetched - cq->compAcked, cq->asyncFetched - cq->asyncAcked);
      return EBUSY;
    }
    if (cq->channel) {
      for (Cq*& e : cq->channel->events)
        if (e == cq) e = nullptr;
      --cq->channel->cqs;
    }
    // Its queued events go (their pipe bytes stay: a read that finds no event reads on).
    std::erase_if(cq->c->async, [&](const ibv_async_event& e) {
      return e.event_type == IBV_EVENT_CQ_ERR && e.element.cq == ibcq;
    });
    std::erase(cq->c->cqs, cq);
  }
  pthread_mutex_destroy(&cq->cq.mutex);
  pthread_cond_destroy(&cq->cq.cond);
  delete cq;
  return 0;
}

VD_EXPORT int ibv_get_cq_event(ibv_comp_channel* ibch, ibv_cq** cqOut, void** cqContext) {
  auto* ch = reinterpret_cast<Channel*>(ibch);
  for (;;) {
    char byte;
    ssize_t r = read(ch->ch.fd, &byte, 1);  // blocks unless the caller made the fd O_NONBLOCK
    if (r != 1) {
      if (r == 0) errno = EIO;
      return -1;
    }
    std::lock_guard<std::mutex> g(ch->c->nic->mu);
    if (ch->events.empty()) continue;
    Cq* cq = ch->events.front();
    ch->events.pop_front();
    if (!cq) continue;  // its CQ was destroyed meanwhile
    ++cq->compFetched;
    *cqOut = &cq->cq;
    *cqContext = cq->cq.cq_context;
    return 0;
  }
}

VD_EXPORT void ibv_ack_cq_events(ibv_cq* ibcq, unsigned int n) {
  auto* cq = reinterpret_cast<Cq*>(ibcq);
  std::lock_guard<std::mutex> g(cq->c->nic->mu);
  cq->compAcked += n;
}

VD_EXPORT int ibv_get_async_event(ibv_context* ctx, ibv_async_event* event) {
  auto* c = contextOf(ctx);
  for (;;) {
    char byte;
    ssize_t r = read(ctx->async_fd, &byte, 1);
    if (r != 1) {
      if (r == 0) errno = EIO;
      return -1;
    }
    std::lock_guard<std::mutex> g(c->nic->mu);
    if (c->async.empty()) continue;
    ibv_async_event e = c->async.front();
    c->async.pop_front();
    switch (e.event_type) {
      case IBV_EVENT_CQ_ERR:
        ++reinterpret_cast<Cq*>(e.element.cq)->asyncFetched;
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        ++reinterpret_cast<Qp*>(e.element.qp)->asyncFetched;
        break;
      default:
        ++c->asyncFetched;
    }
    *event = e;
    return 0;
  }
}

VD_EXPORT void ibv_ack_async_event(ibv_async_event* e) {
  switch (e->event_type) {
    case IBV_EVENT_CQ_ERR: {
      auto* cq = reinterpret_cast<Cq*>(e->element.cq);
      std::lock_guard<std::mutex> g(cq->c->nic->mu);
      ++cq->asyncAcked;
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      auto* qp = reinterpret_cast<Qp*>(e->element.qp);
      std::lock_guard<std::mutex> g(qp->c->nic->mu);
      ++qp->asyncAcked;
      return;
    }
    default:
      return;  // unaffiliated events carry no object to account on
  }
}

VD_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  size_t i = static_cast<size_t>(status);
  return i < sizeof kWcStatus / sizeof *kWcStatus ? kWcStatus[i] : "unknown";
}

VD_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  size_t i = static_cast<size_t>(event);
  return i < sizeof kEvents / sizeof *kEvents ? kEvents[i] : "unknown";
}

VD_EXPORT const char* ibv_node_type_str(ibv_node_type type) {
  switch (type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    default: return "unknown";
  }
}

VD_EXPORT const char* ibv_port_state_str(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP: return "PORT_NOP";
    case IBV_PORT_DOWN: return "PORT_DOWN";
    case IBV_PORT_INIT: return "PORT_INIT";
    case IBV_PORT_ARMED: return "PORT_ARMED";
    case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
    default: return "invalid state";
  }
}
