// The start-up mesh of the tcp_uring backend: every rank connected to every peer it is given,
// by socketsPerPeer TCP sockets (Family::kTcp) or one Unix-domain socket (Family::kUnix).
//
// Each rank listens (TCP: on the address the caller chose, see interfaces.h; Unix: on a
// stream socket in the abstract namespace under a random name) and publishes
// "ip:port token host unix-name process" under "<prefix>/addr/<rank>" (token: a fresh
// rendezvous::generateSecret() per mesh; ip:port "-" for a Unix mesh, unix-name "-" for a TCP
// one; host (transport::hostIdentity) and process (processIdentity) "-" when unknown). The
// lower rank of every pair connects. A Unix stream carries the same frames as a TCP one; only
// the kernel's work per byte differs (no TCP/IP stack: 0.08 vs 0.34 s of CPU per GB moved on
// the development machine).
//
// Each connecting socket sends a Hello {magic, rank, size, socket index, sockets per peer, the
// acceptor's token}; the accepting side drops a hello without its own token (a process that
// could not read the store, which only holders of the job secret can, is not a rank of this
// job), routes it by rank and index, and answers with an Ack carrying its rank and the
// connector's token, which the connector checks in turn. So both ends know the socket is the
// right one, of this job, before any data flows. Nothing in a hello is believed before its token
// matches: a stranger's connection (forged hello, garbage, a partial hello, silence) is dropped
// and counted in a rate-limited log, and cannot end or stall the start-up (mesh.cc says how).
//
// Unreachable Unix peers: a Unix connect that fails for good (a security module forbids it, or
// the identities matched by accident) is not retried: the connecting rank records why under
// "<prefix>/unix-unreachable/<lower>/<higher>", the accepting rank sees that key, and both leave
// the peer out (`unreachable`), so the caller can join the pair another way (TCP).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/host_identity.h"
#include "transport/tcp_uring/socket.h"

namespace ringfold::rendezvous {
class Store;
}

namespace ringfold::transport::tcp_uring {

// The set-up messages on a mesh socket (host byte order: both ends run this code).
namespace wire {
constexpr uint32_t kHelloMagic = 0x52464832;  // "RFH2" (RFH1 had no tokens)
constexpr size_t kTokenBytes = 64;  // rendezvous::generateSecret()'s length: 32 random bytes in hex
struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  int32_t socketIndex;
  int32_t socketsPerPeer;
  int32_t reserved;
  char token[kTokenBytes];  // the accepting rank's token, read from the store
};
struct Ack {
  uint32_t magic;
  int32_t rank;
  char token[kTokenBytes];  // the connecting rank's token, read from the store
};
}  // namespace wire

struct MeshOptions {
  std::string prefix;
  int rank = 0;
  int size = 1;
  int socketsPerPeer = 1;
  Family family = Family::kTcp;
  std::string listenAddress;  // TCP: the IPv4 address to listen on
  std::string hostId = hostIdentity();
  std::string processId = processIdentity();
  std::chrono::milliseconds timeout{60000};
  std::vector<bool> peers;  // by rank: connect it; empty: every peer
  bool wants(int peer) const { return peer != rank && (peers.empty() || peers[peer]); }
};

// Connects this rank to every other that options.wants(); returns sockets[peer][index] (empty
// at `rank`, at peers not wanted, and at unreachable Unix peers): socketsPerPeer TCP sockets,
// or one Unix socket, per peer. Blocking mode, options not yet set. Throws IoError naming the
// first rank that did not publish its address, could not be reached, or never connected within
// the timeout. With `peerPids`, fills it by rank with each peer's pid where this process can
// check it (the same kernel and pid namespace, another process), else 0. With `unreachable`,
// fills it by rank with why a Unix peer could not be reached ("" for the others).
std::vector<std::vector<Socket>> connectMesh(rendezvous::Store& store, const MeshOptions& options,
                                             std::vector<int>* peerPids = nullptr,
                                             std::vector<std::string>* unreachable = nullptr);

}  // namespace ringfold::transport::tcp_uring
