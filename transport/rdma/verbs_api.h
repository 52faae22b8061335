// The ibverbs entry points the verbs fabric uses, resolved at run time from the library that
// RINGFOLD_IBVERBS_LIBRARY names (default libibverbs.so.1), so that ringfold has no link-time
// dependency on rdma-core and loads on hosts without it. The test double of the library
// (tests/transport/verbs_double) implements exactly this list.
//
// Contract
//   * verbsApi(why) dlopen()s the library (RTLD_NOW | RTLD_LOCAL) and dlsym()s every symbol once
//     per process and library name (thread-safe; the handle is never closed, so the pointers
//     stay valid). It returns null and sets `why` when the library is absent ("libibverbs.so.1
//     not found: ...": no ibverbs here, not an error of the caller) or lacks a required symbol
//     ("libibverbs.so.1 lacks ibv_create_qp: ..."). The result, good or bad, is cached.
//   * Optional symbols (regDmabufMr, queryGidEx) are null when the library lacks them.
//   * The data-path calls that verbs.h implements as static inlines through the context's ops
//     table (ibv_poll_cq, ibv_req_notify_cq, ibv_post_send, ibv_post_recv) are the static
//     members below: they call cq->context->ops / qp->context->ops exactly as the header does.
//   * Member names differ from the C names on purpose: verbs.h defines function-like macros
//     named ibv_query_port and ibv_reg_mr that would rewrite `api->ibv_query_port(...)`.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringfold::transport::rdma::verbs {

struct Api {
  std::string library;  // the name it was loaded by

  // required
  ibv_device** (*getDeviceList)(int* count) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  // The exported ibv_query_port, with its exported type (struct _compat_ibv_port_attr*: calling
  // it through another function type is undefined, UBSan -fsanitize=function); the caller passes
  // a zeroed ibv_port_attr cast to it, as verbs.h's inline ibv_query_port does (the library may
  // fill only the fields of its compat layout).
  int (*queryPort)(ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_comp_channel* (*createCompChannel)(ibv_context* context) = nullptr;
  int (*destroyCompChannel)(ibv_comp_channel* channel) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  int (*getCqEvent)(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext) = nullptr;
  void (*ackCqEvents)(ibv_cq* cq, unsigned int count) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*queryQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  int (*getAsyncEvent)(ibv_context* context, ibv_async_event* event) = nullptr;
  void (*ackAsyncEvent)(ibv_async_event* event) = nullptr;
  const char* (*eventTypeStr)(ibv_event_type event) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;

  // optional (null when absent)
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) = nullptr;
  int (*queryGidEx)(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
                    size_t entrySize) = nullptr;

  // verbs.h's static inlines, through the provider's ops table. They return what the provider
  // returns: pollCq the number of completions or < 0; the others 0 or a positive errno.
  static int pollCq(ibv_cq* cq, int count, ibv_wc* wc) { return cq->context->ops.poll_cq(cq, count, wc); }
  static int reqNotifyCq(ibv_cq* cq, int solicitedOnly) { return cq->context->ops.req_notify_cq(cq, solicitedOnly); }
  static int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    return qp->context->ops.post_send(qp, wr, bad);
  }
  static int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return qp->context->ops.post_recv(qp, wr, bad);
  }
};

// The table for params::kIbverbsLibrary, loaded on first use; null (and `why`) when unusable.
const Api* verbsApi(std::string& why);

// The same for an explicit library name (tests).
const Api* verbsApi(const std::string& library, std::string& why);

}  // namespace ringfold::transport::rdma::verbs
