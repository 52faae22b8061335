// RC queue pairs: creation, the ibv_modify_qp state machine with the IB spec's required and
// optional attribute masks (as the kernel's qp_state_table has them for RC), posting.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "nic.h"

#define VD_EXPORT extern "C" __attribute__((visibility("default")))

namespace vd {
namespace {

constexpr int kPathAttrs = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;

// Required and optional attributes of the move cur -> next for an RC QP; false: no such move.
bool transition(ibv_qp_state cur, ibv_qp_state next, int* req, int* opt) {
  *req = *opt = 0;
  if (next == IBV_QPS_RESET) return true;
  if (next == IBV_QPS_ERR) return cur != IBV_QPS_RESET;
  switch (cur) {
    case IBV_QPS_RESET:
      if (next != IBV_QPS_INIT) return false;
      *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return true;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return true;
      }
      if (next != IBV_QPS_RTR) return false;
      *req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER;
      *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      return true;
    case IBV_QPS_RTR:
      if (next != IBV_QPS_RTS) return false;
      *req = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      *opt = IBV_QP_CUR_STATE | kPathAttrs;
      return true;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS) {
        *opt = IBV_QP_CUR_STATE | kPathAttrs;
        return true;
      }
      if (next != IBV_QPS_SQD) return false;
      *opt = IBV_QP_EN_SQD_ASYNC_NOTIFY;
      return true;
    case IBV_QPS_SQD:
      if (next == IBV_QPS_RTS) {
        *opt = IBV_QP_CUR_STATE | kPathAttrs;
        return true;
      }
      if (next != IBV_QPS_SQD) return false;
      *opt = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PKEY_INDEX | kPathAttrs;
      return true;
    default:
      return false;  // SQE is not an RC state; ERR only leaves to RESET
  }
}

int checkAddress(const Nic* nic, const ibv_ah_attr& ah) {
  if (ah.port_num != 1) return EINVAL;  // as the kernel's modify_qp checks
  if (!nic->ib && !ah.is_global) return EINVAL;  // RoCE needs a GRH
  if (ah.is_global) {
    int i = ah.grh.sgid_index;
    if (i >= nic->gidLen || !nic->gidValid[i]) return EINVAL;
  }
  return 0;
}

int checkValues(const Qp* qp, const ibv_qp_attr* a, int mask) {
  const Nic* nic = qp->c->nic;
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != qp->qp.state) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_AV) && checkAddress(nic, a->ah_attr) != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_RQ_PSN) && a->rq_psn > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_SQ_PSN) && a->sq_psn > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  return 0;
}

void applyValues(Qp* qp, const ibv_qp_attr* a, int mask) {
  ibv_qp_attr& s = qp->attr;
  if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = a->pkey_index;
  if (mask & IBV_QP_PORT) s.port_num = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) s.qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_AV) s.ah_attr = a->ah_attr;
  if (mask & IBV_QP_ALT_PATH) {
    s.alt_ah_attr = a->alt_ah_attr;
    s.alt_pkey_index = a->alt_pkey_index;
    s.alt_port_num = a->alt_port_num;
    s.alt_timeout = a->alt_timeout;
  }
  if (mask & IBV_QP_PATH_MTU) s.path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) s.dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) s.rq_psn = a->rq_psn;
  if (mask & IBV_QP_SQ_PSN) s.sq_psn = a->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = a->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) s.timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_PATH_MIG_STATE) s.path_mig_state = a->path_mig_state;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) s.en_sqd_async_notify = a->en_sqd_async_notify;
}

void resetAttributes(Qp* qp) {
  ibv_qp_attr fresh{};
  fresh.qp_state = IBV_QPS_RESET;
  fresh.path_mtu = IBV_MTU_1024;
  fresh.path_mig_state = IBV_MIG_MIGRATED;
  qp->attr = fresh;
  qp->nextPsn = qp->expectedPsn = 0;
}

void flushCqe(Cq* cq, uint64_t wrId, ibv_wc_opcode opcode, uint32_t qpn) {
  ibv_wc wc{};
  wc.wr_id = wrId;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = opcode;
  wc.qp_num = qpn;
  pushCqe(cq, wc);
}

int checkSend(const Qp* qp, const ibv_send_wr* wr, uint64_t* length) {
  auto s = qp->qp.state;
  if (s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR) return EINVAL;
  if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
  if (wr->num_sge < 0 || uint32_t(wr->num_sge) > qp->cap.max_send_sge) return EINVAL;
  if (wr->num_sge > 0 && !wr->sg_list) return EINVAL;
  uint64_t total = 0;
  for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
  if (total > kMaxMessage) return EINVAL;
  if ((wr->send_flags & IBV_SEND_INLINE) && total > qp->cap.max_inline_data) return EINVAL;
  if (qp->sq.size() >= qp->cap.max_send_wr) return ENOMEM;
  *length = total;
  return 0;
}

}  // namespace

void destroyQpLocked(Qp* qp) {
  Nic* nic = qp->c->nic;
  qpDropTraffic(qp);
  nic->qps.erase(qp->qp.qp_num);
  // Its queued events go (their pipe bytes stay: a read that finds no event reads on).
  std::erase_if(qp->c->async, [&](const ibv_async_event& e) {
    return e.event_type != IBV_EVENT_CQ_ERR && e.element.qp == &qp->qp;
  });
  --qp->scq->qps;
  --qp->rcq->qps;
  --qp->pd->users;
  pthread_mutex_destroy(&qp->qp.mutex);
  pthread_cond_destroy(&qp->qp.cond);
  delete qp;
}

int postSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* qp = reinterpret_cast<Qp*>(ibqp);
  Nic* nic = qp->c->nic;
  int err = 0;
  {
    std::lock_guard<std::mutex> g(nic->mu);
    for (; wr; wr = wr->next) {
      uint64_t length = 0;
      err = checkSend(qp, wr, &length);
      if (err) break;
      if (qp->qp.state == IBV_QPS_ERR) {
        flushCqe(qp->scq, wr->wr_id, IBV_WC_RDMA_WRITE, ibqp->qp_num);
        continue;
      }
      SendWr s;
      s.wrId = wr->wr_id;
      s.signaled = qp->sigAll || (wr->send_flags & IBV_SEND_SIGNALED);
      s.withImm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
      s.solicited = wr->send_flags & IBV_SEND_SOLICITED;
      s.imm = wr->imm_data;
      s.raddr = wr->wr.rdma.remote_addr;
      s.rkey = wr->wr.rdma.rkey;
      s.length = static_cast<uint32_t>(length);
      s.isInline = wr->send_flags & IBV_SEND_INLINE;
      for (int i = 0; i < wr->num_sge; ++i) {
        const ibv_sge& sge = wr->sg_list[i];
        if (s.isInline)
          s.inlined.append(reinterpret_cast<const char*>(static_cast<uintptr_t>(sge.addr)), sge.length);
        else
          s.sges.push_back(sge);
      }
      qp->sq.push_back(std::move(s));
    }
    if (err && bad) *bad = wr;
  }
  nicWake(nic);
  return err;
}

int postRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* qp = reinterpret_cast<Qp*>(ibqp);
  Nic* nic = qp->c->nic;
  int err = 0;
  {
    std::lock_guard<std::mutex> g(nic->mu);
    for (; wr; wr = wr->next) {
      if (qp->qp.state == IBV_QPS_RESET || wr->num_sge < 0 || uint32_t(wr->num_sge) > qp->cap.max_recv_sge)
        err = EINVAL;
      else if (qp->rq.size() >= qp->cap.max_recv_wr)
        err = ENOMEM;
      if (err) break;
      if (qp->qp.state == IBV_QPS_ERR)
        flushCqe(qp->rcq, wr->wr_id, IBV_WC_RECV, ibqp->qp_num);
      else
        qp->rq.push_back(wr->wr_id);
    }
    if (err && bad) *bad = wr;
  }
  nicWake(nic);  // a held write-with-imm may now complete
  return err;
}

}  // namespace vd

using namespace vd;

VD_EXPORT ibv_qp* ibv_create_qp(ibv_pd* ibpd, ibv_qp_init_attr* init) {
  if (!ibpd || !init || !init->send_cq || !init->recv_cq) {
    errno = EINVAL;
    return nullptr;
  }
  if (init->qp_type != IBV_QPT_RC || init->srq) {
    errno = EOPNOTSUPP;  // the double has RC QPs only, without SRQ
    return nullptr;
  }
  const ibv_qp_cap& cap = init->cap;
  if (cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInline || init->send_cq->context != ibpd->context ||
      init->recv_cq->context != ibpd->context) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = reinterpret_cast<Pd*>(ibpd);
  Nic* nic = pd->c->nic;
  auto* qp = new Qp;
  std::memset(&qp->qp, 0, sizeof qp->qp);
  qp->c = pd->c;
  qp->pd = pd;
  qp->scq = reinterpret_cast<Cq*>(init->send_cq);
  qp->rcq = reinterpret_cast<Cq*>(init->recv_cq);
  qp->cap = cap;
  qp->sigAll = init->sq_sig_all != 0;
  resetAttributes(qp);
  qp->qp.context = ibpd->context;
  qp->qp.qp_context = init->qp_context;
  qp->qp.pd = ibpd;
  qp->qp.send_cq = init->send_cq;
  qp->qp.recv_cq = init->recv_cq;
  qp->qp.state = IBV_QPS_RESET;
  qp->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&qp->qp.mutex, nullptr);
  pthread_cond_init(&qp->qp.cond, nullptr);
  std::lock_guard<std::mutex> g(nic->mu);
  do {
    nic->nextQpn = (nic->nextQpn + 1) & 0xffffff;
  } while (nic->nextQpn < 2 || nic->qps.count(nic->nextQpn));  // QP 0 and 1 are special
  qp->qp.qp_num = qp->qp.handle = nic->nextQpn;
  nic->qps[qp->qp.qp_num] = qp;
  ++qp->scq->qps;
  ++qp->rcq->qps;
  ++pd->users;
  return &qp->qp;
}

VD_EXPORT int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  auto* qp = reinterpret_cast<Qp*>(ibqp);
  Nic* nic = qp->c->nic;
  {
    std::lock_guard<std::mutex> g(nic->mu);
    ibv_qp_state cur = (mask & IBV_QP_CUR_STATE) ? attr->cur_qp_state : qp->qp.state;
    ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    int req = 0, opt = 0;
    if (!transition(cur, next, &req, &opt)) return EINVAL;
    if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS && cur != IBV_QPS_SQD &&
        cur != IBV_QPS_SQE)
      return EINVAL;
    if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE))) return EINVAL;
    if (int err = checkValues(qp, attr, mask)) return err;
    if (next == IBV_QPS_RESET) {
      qpDropTraffic(qp);
      resetAttributes(qp);
    } else if (next == IBV_QPS_ERR) {
      qpEnterError(qp);
    } else {
      applyValues(qp, attr, mask);
      if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) qp->expectedPsn = qp->attr.rq_psn;
      if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR) qp->nextPsn = qp->attr.sq_psn;
      if (next == IBV_QPS_SQD) qp->sqdNotified = false;
    }
    qp->qp.state = next;
    qp->attr.qp_state = next;
  }
  nicWake(nic);
  return 0;
}

VD_EXPORT int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  auto* qp = reinterpret_cast<Qp*>(ibqp);
  std::lock_guard<std::mutex> g(qp->c->nic->mu);
  *attr = qp->attr;
  attr->qp_state = attr->cur_qp_state = qp->qp.state;
  attr->cap = qp->cap;
  attr->sq_draining = 0;
  if (init) {
    std::memset(init, 0, sizeof *init);
    init->qp_context = qp->qp.qp_context;
    init->send_cq = qp->qp.send_cq;
    init->recv_cq = qp->qp.recv_cq;
    init->cap = qp->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = qp->sigAll;
  }
  return 0;
}

VD_EXPORT int ibv_destroy_qp(ibv_qp* ibqp) {
  auto* qp = reinterpret_cast<Qp*>(ibqp);
  Nic* nic = qp->c->nic;
  {
    std::lock_guard<std::mutex> g(nic->mu);
    if (qp->asyncFetched != qp->asyncAcked) {
      std::fprintf(stderr, "verbs double: ibv_destroy_qp(%u) with %u async events not acknowledged "
                   "(real libibverbs blocks here)\n", ibqp->qp_num, qp->asyncFetched - qp->asyncAcked);
      return EBUSY;
    }
    destroyQpLocked(qp);
  }
  nicWake(nic);
  return 0;
}
