// Who this process is, and on which host, in terms any backend (and the backend-per-peer
// selector) can compare between ranks. Backend-independent: read from /proc only.
#pragma once

#include <string>

namespace ringfold::transport {

// This host as seen by the abstract Unix-socket namespace: "<kernel boot id>.<network namespace
// device>:<inode>". Two processes with equal identities can reach each other's abstract sockets
// (that namespace belongs to the network namespace); ranks in different containers with their
// own network namespaces, or on different machines, differ. Empty when /proc does not tell.
std::string hostIdentity();

// This process as other ranks may check it: "<pid>@<kernel boot id>/<pid namespace>". A peer
// with the same text after '@' can look the pid up (kill(pid, 0), /proc/<pid>/stat). Empty when
// /proc does not tell.
std::string processIdentity();

// The pid in `peer` (a processIdentity()) when it names another process of this kernel and pid
// namespace than `mine` (this process's processIdentity()), else 0.
int localPid(const std::string& peer, const std::string& mine);

}  // namespace ringfold::transport
