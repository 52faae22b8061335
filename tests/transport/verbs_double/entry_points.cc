// libibverbs.so.1 test double: enough of rdma-core's ibverbs for ringfold's verbs fabric to move
// real data between processes (and threads) of one machine whose kernel has no RDMA support.
//
// Model. Each process that opens a device gets an emulated NIC for it: a thread plus a listening
// Unix-domain stream socket in the abstract namespace, named after a 16-bit node number that is
// unique among the live NICs of this user on this machine (claimed by bind). The node is the
// port's LID (InfiniBand flavour) and is encoded in every GID of its table (RoCE flavour:
//   index 0 fe80::276:64ff:fe<dev>:<node> RoCE v1, 1 the same GID RoCE v2,
//   index 2 ::ffff:127.<64+dev>.<node hi>.<node lo> RoCE v1, 3 the same RoCE v2,
//   indexes 4..15 empty; InfiniBand flavour: index 0 fe80::<port GUID>, 1..7 empty).
// An RC QP in RTS opens, at its first send, a stream to the NIC its dgid (RoCE) or dlid (IB)
// names and says which QP it is for; writes travel as {psn, remote address, rkey, length, imm}
// plus the bytes. The responder's NIC thread checks the PSN, the QP's remote-write access, the
// rkey (same PD, IBV_ACCESS_REMOTE_WRITE, in range), places the bytes, consumes a posted receive
// for an immediate (holding the message, RNR style, while none is posted), pushes the receive
// completion, then acknowledges; the requester completes its WR on the acknowledgement, in order.
// Errors follow the IB spec: bad rkey -> the requester gets IBV_WC_REM_ACCESS_ERR and the
// responder's QP goes to error with IBV_EVENT_QP_ACCESS_ERR; a QP in error flushes every WR with
// IBV_WC_WR_FLUSH_ERR; no acknowledgement (peer dead, frozen, QP gone, wrong GID/LID/QPN/PSN) ->
// IBV_WC_RETRY_EXC_ERR once 4.096 us * 2^timeout * (retry_cnt + 1) passed without any sign of
// life from the responder (clamped to [250 ms, VERBS_DOUBLE_RETRY_CAP_MS]); rnr_retry < 7 ->
// IBV_WC_RNR_RETRY_EXC_ERR after rnr_retry * the responder's min_rnr_timer.
//
// Differences from real hardware (see also the report in tests/transport/verbs_double/):
//   * A SIGSTOPped process's NIC stops too (real HCAs keep acknowledging for a stopped process),
//     so a frozen peer ends in RETRY_EXC_ERR here; that is why ringfold has its own timeout.
//   * A transport retry error also raises IBV_EVENT_QP_FATAL on the QP's context (mlx5 reports it
//     only through the completion): a fabric must not depend on that event.
//   * Data of a write-with-imm is placed before a receive is available (RNR only delays the
//     completion); only RDMA_WRITE[_WITH_IMM] are supported (other opcodes: EINVAL at post);
//     no SRQ, UD, AH, atomics, reads. ibv_destroy_qp/cq with unacknowledged events returns EBUSY
//     (real libibverbs blocks). Writes are copied from local memory when the NIC thread sends
//     them (soon after the post), not read by DMA up to the completion.
//   * ibv_reg_dmabuf_mr works for dma-buf fds that can be mmap()ed (udmabuf, memfd in tests);
//     otherwise it fails with EOPNOTSUPP and the caller must stage through host memory.
//   * Nothing is pinned: remote writes go through the registered virtual addresses, so memory
//     must stay mapped until ibv_dereg_mr / ibv_close_device (where a real HCA holds the pages).
//
// Files: objects.h (verbs objects), nic.h / nic.cc (the NIC, its thread, completions, errors),
// transfer.cc (the wire protocol), qp.cc (QPs, modify_qp, posting), events.cc (CQs, channels,
// async events, strings), compat.cc (inert symbols), libibverbs.map (exports and versions).
//
// Environment knobs (read when the device list is first built / a NIC starts):
//   VERBS_DOUBLE_DEVICES          comma-separated device names (default "mock0"; "" = no device);
//                                 a name may end in ":ib" or ":eth" to pick its link layer
//   VERBS_DOUBLE_LINK_LAYER       eth (RoCE, default) or ib
//   VERBS_DOUBLE_PORT_STATE       active (default) or down
//   VERBS_DOUBLE_MTU              active MTU in bytes, 256..4096 (default 1024 eth, 4096 ib)
//   VERBS_DOUBLE_RETRY_CAP_MS     cap of the emulated transport retry time (default 10000)
//   VERBS_DOUBLE_PORT_DOWN_AFTER_MS  the port goes down this long after the NIC starts
//                                 (IBV_EVENT_PORT_ERR on every context; traffic stops)
// and one test hook, verbs_double_port_down() (hook.h): the same, now, at a point a test picks.
//
// Besides the ibv_* calls the fabric uses, the library exports inert versions of every other
// symbol that libfabric, librdmacm and libefa (all linked with BIND_NOW) import from
// libibverbs.so.1, with rdma-core's symbol versions, so that a process linked to libfabric still
// starts when LD_LIBRARY_PATH puts this double first (compat.cc).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nic.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define VD_EXPORT extern "C" __attribute__((visibility("default")))

namespace vd {
namespace {

std::mutex& devicesMu() {
  static auto* mu = new std::mutex;
  return *mu;
}

std::vector<Device*>& devices() {
  static auto* list = new std::vector<Device*>;
  return *list;
}

void buildDevices() {
  if (!devices().empty()) return;
  const char* names = std::getenv("VERBS_DOUBLE_DEVICES");
  std::string spec = names ? names : "mock0";
  const char* ll = std::getenv("VERBS_DOUBLE_LINK_LAYER");
  bool ibDefault = ll && std::strcmp(ll, "ib") == 0;
  size_t pos = 0;
  while (pos <= spec.size() && !spec.empty()) {
    size_t comma = spec.find(',', pos);
    std::string name = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (name.empty()) continue;
    auto* d = new Device;
    std::memset(&d->dev, 0, sizeof d->dev);
    d->ib = ibDefault;
    size_t colon = name.find(':');
    if (colon != std::string::npos) {
      d->ib = name.substr(colon + 1) == "ib";
      name.resize(colon);
    }
    d->index = static_cast<int>(devices().size());
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d->dev.name, sizeof d->dev.name, "%s", name.c_str());
    std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", d->index);
    std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d", d->index);
    std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s", d->dev.name);
    devices().push_back(d);
  }
  if (devices().empty()) devices().push_back(nullptr);  // marks "built, none"
}

Device* ourDevice(ibv_device* device) {
  std::lock_guard<std::mutex> g(devicesMu());
  for (Device* d : devices())
    if (d && &d->dev == device) return d;
  return nullptr;
}

int failWith(int err) {
  errno = err;
  return err;
}

template <class T>
T* nullWith(int err) {
  errno = err;
  return nullptr;
}

Mr* registerMemory(ibv_pd* ibpd, void* ptr, size_t len, uint64_t iova, int access) {
  if (!ibpd || len == 0 || len > kMaxMrSize) return nullWith<Mr>(EINVAL);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return nullWith<Mr>(EINVAL);  // the verbs rule: remote write needs local write
  long page = sysconf(_SC_PAGESIZE);
  auto start = reinterpret_cast<uintptr_t>(ptr) & ~static_cast<uintptr_t>(page - 1);
  size_t span = reinterpret_cast<uintptr_t>(ptr) + len - start;
  if (!ptr || msync(reinterpret_cast<void*>(start), span, MS_ASYNC) != 0) return nullWith<Mr>(EFAULT);
  auto* pd = reinterpret_cast<Pd*>(ibpd);
  Nic* nic = pd->c->nic;
  auto* mr = new Mr;
  std::memset(&mr->mr, 0, sizeof mr->mr);
  std::lock_guard<std::mutex> g(nic->mu);
  uint32_t n = ++nic->nextKey;
  mr->mr.context = &pd->c->v.context;
  mr->mr.pd = ibpd;
  mr->mr.addr = reinterpret_cast<void*>(iova);
  mr->mr.length = len;
  mr->mr.handle = n;
  mr->mr.lkey = (n << 8) | 0x11;  // distinct from every rkey, so a mix-up fails visibly
  mr->mr.rkey = (n << 8) | 0x22;
  mr->pd = pd;
  mr->iova = iova;
  mr->ptr = static_cast<char*>(ptr);
  mr->len = len;
  mr->access = access;
  nic->lkeys[mr->mr.lkey] = mr;
  nic->rkeys[mr->mr.rkey] = mr;
  ++pd->users;
  return mr;
}

}  // namespace

uint32_t mtuBytes(ibv_mtu mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0; }

}  // namespace vd

using namespace vd;

VD_EXPORT ibv_device** ibv_get_device_list(int* num) {
  std::lock_guard<std::mutex> g(devicesMu());
  buildDevices();
  auto** list = static_cast<ibv_device**>(std::calloc(devices().size() + 1, sizeof(ibv_device*)));
  if (!list) return nullWith<ibv_device*>(ENOMEM);
  int n = 0;
  for (Device* d : devices())
    if (d) list[n++] = &d->dev;
  if (num) *num = n;
  return list;
}

VD_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

VD_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device ? device->name : nullptr; }

VD_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  Device* d = ourDevice(device);
  return d ? htobe64(0x027664fffe000000ull | (uint64_t(d->index) << 16)) : 0;
}

VD_EXPORT int ibv_get_device_index(ibv_device* device) {
  Device* d = ourDevice(device);
  return d ? d->index : -1;
}

VD_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = ourDevice(device);
  if (!d) return nullWith<ibv_context>(ENODEV);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  Nic* nic = nicAcquire(d);
  if (!nic) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    return nullWith<ibv_context>(err);
  }
  auto* c = new Context;
  std::memset(&c->v, 0, sizeof c->v);
  c->v.sz = sizeof c->v;
  c->nic = nic;
  c->v.context.device = device;
  c->v.context.cmd_fd = -1;
  c->v.context.async_fd = fds[0];
  c->asyncWrite = fds[1];
  c->v.context.num_comp_vectors = kCompVectors;
  pthread_mutex_init(&c->v.context.mutex, nullptr);
  c->v.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->v.context.ops.poll_cq = pollCq;
  c->v.context.ops.req_notify_cq = reqNotifyCq;
  c->v.context.ops.post_send = postSend;
  c->v.context.ops.post_recv = postRecv;
  std::lock_guard<std::mutex> g(nic->mu);
  nic->contexts.push_back(c);
  return &c->v.context;
}

VD_EXPORT int ibv_close_device(ibv_context* ctx) {
  auto* c = contextOf(ctx);
  Nic* nic = c->nic;
  {
    // What the caller left open is released, as the kernel does when the device fd closes.
    std::lock_guard<std::mutex> g(nic->mu);
    std::vector<Qp*> qps;
    for (auto& [num, qp] : nic->qps)
      if (qp->c == c) qps.push_back(qp);
    for (Qp* qp : qps) destroyQpLocked(qp);
    for (auto it = nic->lkeys.begin(); it != nic->lkeys.end();) {
      Mr* mr = it->second;
      if (mr->pd->c != c) {
        ++it;
        continue;
      }
      nic->rkeys.erase(mr->mr.rkey);
      it = nic->lkeys.erase(it);
      if (mr->map) munmap(mr->map, mr->mapLen);
      delete mr;
    }
    std::erase(nic->contexts, c);
  }
  nicRelease(nic);  // the NIC no longer reaches this context (its QPs are gone): no lock needed
  for (Cq* cq : c->cqs) {
    pthread_mutex_destroy(&cq->cq.mutex);
    pthread_cond_destroy(&cq->cq.cond);
    delete cq;
  }
  for (Channel* ch : c->channels) {
    close(ch->ch.fd);
    close(ch->writeFd);
    delete ch;
  }
  for (Pd* pd : c->pds) delete pd;
  close(c->v.context.async_fd);
  close(c->asyncWrite);
  pthread_mutex_destroy(&c->v.context.mutex);
  delete c;
  return 0;
}

VD_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* a) {
  Nic* nic = nicOf(ctx);
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "1.0.0 (verbs double)");
  a->node_guid = htobe64(nic->guid);
  a->sys_image_guid = htobe64(nic->guid);
  a->max_mr_size = kMaxMrSize;
  a->page_size_cap = 0xfffff000;
  a->max_qp = 1 << 17;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_CHANGE_PHY_PORT;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = 1 << 17;
  a->max_cqe = kMaxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 20;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = 16 << 17;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = 1;
  return 0;
}

// The exported symbol takes the pre-1.1 struct name but, as in rdma-core, fills a whole
// struct ibv_port_attr (what every caller passes).
VD_EXPORT int ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* out) {
  if (port != 1) return failWith(EINVAL);
  Nic* nic = nicOf(ctx);
  auto* a = reinterpret_cast<ibv_port_attr*>(out);
  std::memset(a, 0, sizeof *a);
  std::lock_guard<std::mutex> g(nic->mu);
  a->state = nic->portActive ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = nic->mtu;
  a->gid_tbl_len = nic->gidLen;
  a->port_cap_flags = nic->ib ? (IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP | IBV_PORT_VENDOR_CLASS_SUP)
                              : (IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS);
  a->max_msg_sz = kMaxMessage;
  a->pkey_tbl_len = 1;
  a->lid = nic->ib ? nic->node : 0;
  a->sm_lid = nic->ib ? 1 : 0;
  a->max_vl_num = nic->ib ? 4 : 1;
  a->subnet_timeout = 18;
  a->active_width = 2;   // 4x
  a->active_speed = 64;  // HDR
  a->phys_state = nic->portActive ? 5 : 3;  // LinkUp / Disabled
  a->link_layer = nic->ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  return 0;
}

VD_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  Nic* nic = nicOf(ctx);
  if (port != 1 || index < 0 || index >= nic->gidLen) return -1;
  *gid = nic->gids[index];  // an empty entry reads as zeros, as in rdma-core
  return 0;
}

VD_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                                uint32_t flags, size_t entrySize) {
  Nic* nic = nicOf(ctx);
  if (port != 1 || flags != 0 || entrySize < sizeof(ibv_gid_entry) || index >= uint32_t(nic->gidLen))
    return EINVAL;
  if (!nic->gidValid[index]) return ENODATA;
  std::memset(entry, 0, sizeof *entry);
  entry->gid = nic->gids[index];
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = nic->gidType[index];
  entry->ndev_ifindex = nic->ib ? 0 : 1;  // "lo"
  return 0;
}

VD_EXPORT int ibv_query_pkey(ibv_context*, uint8_t port, int index, __be16* pkey) {
  if (port != 1 || index != 0) return -1;
  *pkey = htobe16(0xffff);
  return 0;
}

VD_EXPORT int ibv_get_pkey_index(ibv_context*, uint8_t port, __be16 pkey) {
  return port == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

VD_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new Pd;
  pd->pd.context = ctx;
  pd->c = contextOf(ctx);
  std::lock_guard<std::mutex> g(pd->c->nic->mu);
  pd->pd.handle = ++pd->c->nic->nextKey;
  pd->c->pds.push_back(pd);
  return &pd->pd;
}

VD_EXPORT int ibv_dealloc_pd(ibv_pd* ibpd) {
  auto* pd = reinterpret_cast<Pd*>(ibpd);
  {
    std::lock_guard<std::mutex> g(pd->c->nic->mu);
    if (pd->users > 0) return EBUSY;
    std::erase(pd->c->pds, pd);
  }
  delete pd;
  return 0;
}

VD_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  Mr* mr = registerMemory(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access);
  return mr ? &mr->mr : nullptr;
}

VD_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  Mr* mr = registerMemory(pd, addr, length, iova, static_cast<int>(access));
  return mr ? &mr->mr : nullptr;
}

VD_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  long page = sysconf(_SC_PAGESIZE);
  uint64_t base = offset & ~static_cast<uint64_t>(page - 1);
  size_t mapLen = length + (offset - base);
  void* map = mmap(nullptr, mapLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(base));
  if (map == MAP_FAILED) return nullWith<ibv_mr>(EOPNOTSUPP);
  Mr* mr = registerMemory(pd, static_cast<char*>(map) + (offset - base), length, iova, access);
  if (!mr) {
    int err = errno;
    munmap(map, mapLen);
    return nullWith<ibv_mr>(err);
  }
  std::lock_guard<std::mutex> g(mr->pd->c->nic->mu);
  mr->map = map;
  mr->mapLen = mapLen;
  return &mr->mr;
}

VD_EXPORT int ibv_dereg_mr(ibv_mr* ibmr) {
  auto* mr = reinterpret_cast<Mr*>(ibmr);
  Nic* nic = mr->pd->c->nic;
  {
    std::lock_guard<std::mutex> g(nic->mu);
    nic->lkeys.erase(mr->mr.lkey);
    nic->rkeys.erase(mr->mr.rkey);
    --mr->pd->users;
  }
  if (mr->map) munmap(mr->map, mr->mapLen);
  delete mr;
  return 0;
}

// Test hook, not an ibverbs call: every device this process has open loses its port now
// (IBV_EVENT_PORT_ERR on every context; traffic stops), as VERBS_DOUBLE_PORT_DOWN_AFTER_MS does
// on a timer. A test calls it at a chosen point of a job (dlsym on the loaded double), where a
// timer from the NIC's start could fire during connection set-up on a loaded machine. Returns
// how many NICs went down.
VD_EXPORT int verbs_double_port_down(void) { return vd::nicPortDownNow(); }
