// fabric_ofi: the Fabric (fabric.h) over libfabric reliable-datagram endpoints (FI_EP_RDM):
// tcp;ofi_rxm on any machine, efa or verbs;ofi_rxm on clusters.
//
// What open() sets up, and the choices it makes
//   * Provider: params::kOfiProvider (RINGFOLD_OFI_PROVIDER, alias FI_PROVIDER), libfabric's
//     names ("tcp;ofi_rxm", "efa"), a comma-separated list tried in order; empty: efa,
//     verbs;ofi_rxm, tcp;ofi_rxm. The first fi_info the provider returns is used (its first
//     domain/interface; libfabric's own FI_TCP_IFACE / FI_EFA_IFACE steer that). open() throws
//     Error listing, per candidate, why it did not fit.
//   * One endpoint, one completion queue, one address vector: lanes() == 1, and localAddress()
//     is the endpoint's name (fi_getname), the same for every peer.
//   * Who sent an immediate: where the provider carries 8 bytes of CQ data (tcp, shm, sockets)
//     the sender's rank + 1 travels in the upper 32 bits, the protocol's 32-bit immediate in
//     the lower ones. Where it carries only 4 (verbs, EFA) the source address (FI_SOURCE and
//     fi_cq_readfrom, mapped back through the ranks given to insertPeer) names the sender;
//     ofi_rxm fills in no source for remote writes, so verbs;ofi_rxm is refused with that reason
//     (the verbs fabric serves those machines).
//   * Memory: the mr_mode bits fi_getinfo returns are obeyed: FI_MR_PROV_KEY (the provider's
//     key, else ours from a counter), FI_MR_VIRT_ADDR (remoteBase = the address, else 0 and
//     peers name offsets), FI_MR_ENDPOINT (bind to the endpoint, enable). Posts always pass
//     fi_mr_desc (required under FI_MR_LOCAL / FI_MR_HMEM, harmless otherwise). kCuda memory
//     is registered with FI_HMEM_CUDA only when the provider reports FI_HMEM (requested from
//     hardware providers only); otherwise registerMemory throws InvalidArgument.
//   * Ordering: writesOrdered() is true when the provider offers FI_ORDER_WAW (the endpoint is
//     then opened with it) for writes of at least 64 KiB (ep_attr->max_order_waw_size), and
//     maxWriteBytes() is cut to that size: a write-with-imm is then placed after every earlier
//     write to the same peer. Otherwise false, and maxWriteBytes() is ep_attr->max_msg_size.
//   * Progress is manual: poll() reads the CQ (writes to this rank land only while it polls).
//     A post that meets -FI_EAGAIN (ofi_rxm connects lazily; a full queue) reads the CQ, keeps
//     what it returns for the next poll(), and retries a few times before returning -EAGAIN.
//   * Unreachable peers: ofi_rxm (1.17) reports a refused or lost connection to nobody; posts
//     to that peer just return -FI_EAGAIN for ever. So when posts to a peer have met nothing but
//     -EAGAIN for a while, the post is accepted and completes as kError naming the peer: after
//     5 s (at most RINGFOLD_TIMEOUT) when the peer was connected and none of our writes to it is
//     in flight (a lost connection), else after RINGFOLD_TIMEOUT (not connected yet: the peer
//     must poll to accept; or a full queue behind a peer that does not poll).
//   * Completion: writes complete when the provider says the local buffer is free; tcp;ofi_rxm
//     says so once the bytes are in the socket. A write the target rejects (a bad key) is then
//     kWriteDone at the poster: the target drops it and the connection, and the writes in flight
//     after it end in kError. After a kError for a peer, earlier kWriteDone writes to that peer
//     may not have landed: treat kError as the end of the pair.
//   * Immediates that consume receives (mode FI_RX_CQ_DATA): postImmReceives posts that many
//     zero-length fi_recv; otherwise it does nothing.
//   * Errors: fi_cq_readerr entries become kError naming the peer of the failed write, with
//     fi_strerror and fi_cq_strerror text. An error entry that belongs to no write (a receive of
//     FI_RX_CQ_DATA, or none at all) is reported as kError with peer -1 and context 0.
//   * Waiting: the CQ is opened with FI_WAIT_FD where the provider allows it (waitFd() is the
//     fd from FI_GETWAIT, armWait() is fi_trywait); otherwise FI_WAIT_NONE, waitFd() == -1, and
//     armWait() reads the CQ and is true only when nothing came.
//   * close() closes registrations, endpoint, CQ, AV, domain and fabric without waiting for
//     peers; deregister() after close() is a no-op.
#pragma once

#include <memory>
#include <string>

#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma::ofi {

// Opens the ofi fabric for `rank` of `size`; throws Error with the reason when no provider fits.
std::unique_ptr<Fabric> open(int rank, int size);

// Whether a provider name ("efa", "verbs;ofi_rxm", "tcp;ofi_rxm") drives RDMA hardware: true for
// efa, verbs, psm2/psm3, opx, cxi, usnic, ucx; false for tcp, sockets, udp, shm, net and names
// it does not know. Used to decide whether RDMA is chosen by default.
bool hardwareProvider(const std::string& providerName);

}  // namespace ringfold::transport::rdma::ofi
