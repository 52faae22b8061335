// tcp_uring backend: ranks are processes; each pair is joined by RINGFOLD_SOCKETS_PER_PEER TCP
// sockets driven by one io_uring per device. See connection.h in this folder for the wire
// format and ring_loop.h for the completion loop.
#pragma once

#include <memory>

#include "transport/device.h"

namespace ringfold::transport::tcp_uring {

// Throws Error explaining why if io_uring cannot be used here (kernel too old, disabled by
// sysctl kernel.io_uring_disabled, or blocked by seccomp).
std::unique_ptr<Device> createDevice();

}  // namespace ringfold::transport::tcp_uring
