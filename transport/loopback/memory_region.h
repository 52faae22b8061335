// loopback MemoryRegion: plain memory. Ranks are threads of one process, so a peer copies
// straight from or into the region's bytes; there is nothing to register.
#pragma once

#include "transport/memory_region.h"

namespace ringfold::transport::loopback {

using MemoryRegion = PlainMemoryRegion;

}  // namespace ringfold::transport::loopback
