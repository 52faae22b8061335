// shm memory regions: plain memory (the rings are the backend's own; a sender's buffer is read
// by the peer through cross-memory attach, which needs no registration).
#pragma once

#include "transport/memory_region.h"

namespace ringfold::transport::shm {
using MemoryRegion = PlainMemoryRegion;
}  // namespace ringfold::transport::shm
