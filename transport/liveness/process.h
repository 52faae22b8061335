// The state of a peer's process, where this process can look it up (/proc). Best effort, never
// throws; backend-independent (the pid comes from transport::processIdentity, host_identity.h).
#pragma once

#include <chrono>

namespace ringfold::transport::liveness {

enum class ProcessState { kUnknown, kRunning, kStopped, kExited };

// The state of process `pid` from /proc/<pid>/stat: kExited when it is gone or a zombie,
// kStopped when stopped (SIGSTOP) or traced. A process being killed closes its sockets before it
// becomes a zombie, so after a closed connection the caller passes `settle`: a running process is
// looked at again until it has exited or `settle` has passed.
ProcessState processState(int pid, std::chrono::milliseconds settle = std::chrono::milliseconds(0));

}  // namespace ringfold::transport::liveness
