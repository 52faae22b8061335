// MemoryRegion of the tcp_uring backend: plain memory.
//
// TCP needs no registration: sends and receives name user memory directly. io_uring fixed
// buffers (io_uring_register_buffers) would only save the per-op page pinning of zero-copy
// sends, and only for buffers registered ahead of time; regions here are arbitrary caller
// memory (registering per call costs more than it saves), and zero-copy is off on loopback,
// where the kernel copies anyway. So a region is just the span.
#pragma once

#include "transport/memory_region.h"

namespace ringfold::transport::tcp_uring {

using TcpMemoryRegion = PlainMemoryRegion;

}  // namespace ringfold::transport::tcp_uring
