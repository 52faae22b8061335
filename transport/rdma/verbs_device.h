// verbs_device: which device and port the verbs fabric uses (the first that RINGFOLD_IB_HCA
// allows, ACTIVE, with an InfiniBand or Ethernet link; otherwise the reasons, port by port), and
// libcuda's dma-buf export for registering GPU memory. Used by fabric_verbs.cc.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "transport/rdma/verbs_api.h"
#include "transport/rdma/verbs_config.h"

namespace ringfold::transport::rdma::verbs {

inline std::string errnoText(int err) { return std::strerror(err); }
// Verbs calls return 0 or a positive errno; a few providers return -1 and set errno.
inline std::string rcText(int rc) { return errnoText(rc > 0 ? rc : errno); }

const char* portStateName(int state);

struct PortPick {
  std::string device;
  int port = 0;
  ibv_context* context = nullptr;
  ibv_device_attr deviceAttr{};
  ibv_port_attr portAttr{};
};

// The first (device, port) the spec allows that is ACTIVE with an InfiniBand or Ethernet link;
// its context stays open when keepOpen. False with the reason otherwise.
bool findPort(const Api& api, const HcaSpec& spec, bool keepOpen, PortPick& out, std::string& why);

// libcuda.so.1's cuMemGetHandleForAddressRange, loaded once; null with the reason in `why`.
using CuGetHandle = int (*)(void* handle, unsigned long long address, size_t size, int type, unsigned long long flags);
constexpr int kCuRangeHandleDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
CuGetHandle cudaDmaBufExport(std::string& why);

}  // namespace ringfold::transport::rdma::verbs
