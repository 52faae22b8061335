// loopback backend: ranks are threads of one process; messages are copied between them in
// memory. For unit tests of everything above the transport. Devices find each other through the
// Store like any other backend (their address names an in-process mailbox).
#pragma once

#include <memory>

#include "transport/device.h"

namespace ringfold::transport::loopback {

std::unique_ptr<Device> createDevice();

}  // namespace ringfold::transport::loopback
