// verbs_device (verbs_device.h): choosing the device and port, and libcuda's dma-buf export.
#include "transport/rdma/verbs_device.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "common/params.h"

namespace ringfold::transport::rdma::verbs {

const char* portStateName(int state) {
  switch (state) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT (no subnet manager?)";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "in an unknown state";
  }
}

bool findPort(const Api& api, const HcaSpec& spec, bool keepOpen, PortPick& out, std::string& why) {
  int count = 0;
  errno = 0;
  ibv_device** list = api.getDeviceList(&count);
  if (list == nullptr || count <= 0) {
    int err = errno;
    if (list != nullptr) api.freeDeviceList(list);
    why = "no RDMA devices found (";
    if (list != nullptr || err == 0) {
      why += api.library + " lists none)";
    } else {
      why += "ibv_get_device_list of " + api.library + ": " + errnoText(err) +
             (err == ENOSYS ? "; this kernel has no RDMA support)" : ")");
    }
    return false;
  }
  std::vector<std::string> all, reasons;
  bool found = false;
  for (int d = 0; d < count && !found; ++d) {
    std::string name = api.getDeviceName(list[d]) ? api.getDeviceName(list[d]) : "?";
    errno = 0;
    ibv_context* ctx = api.openDevice(list[d]);
    if (ctx == nullptr) {
      all.push_back(name);
      reasons.push_back(name + " cannot be opened (" + errnoText(errno) + ")");
      continue;
    }
    ibv_device_attr deviceAttr{};
    int rc = api.queryDevice(ctx, &deviceAttr);
    if (rc != 0) {
      all.push_back(name);
      reasons.push_back(name + " cannot be queried (" + rcText(rc) + ")");
      api.closeDevice(ctx);
      continue;
    }
    for (int port = 1; port <= deviceAttr.phys_port_cnt && !found; ++port) {
      std::string where = name + ":" + std::to_string(port);
      all.push_back(where);
      if (!spec.allows(name, port)) continue;
      ibv_port_attr portAttr;
      std::memset(&portAttr, 0, sizeof(portAttr));
      rc = api.queryPort(ctx, static_cast<uint8_t>(port),
                         reinterpret_cast<_compat_ibv_port_attr*>(&portAttr));
      if (rc != 0) {
        reasons.push_back(where + " cannot be queried (" + rcText(rc) + ")");
      } else if (portAttr.state != IBV_PORT_ACTIVE) {
        reasons.push_back(where + " is " + portStateName(portAttr.state));
      } else if (portAttr.link_layer != IBV_LINK_LAYER_INFINIBAND && portAttr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        reasons.push_back(where + " has link layer " + std::to_string(portAttr.link_layer) +
                          " (neither InfiniBand nor Ethernet)");
      } else {
        out.device = name;
        out.port = port;
        out.deviceAttr = deviceAttr;
        out.portAttr = portAttr;
        found = true;
      }
    }
    if (found && keepOpen) {
      out.context = ctx;
    } else {
      api.closeDevice(ctx);
    }
  }
  api.freeDeviceList(list);
  if (found) return true;
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (reasons.empty() && !spec.entries.empty()) {
    auto source = params::kIbHca.lookup();
    why = "no device matches " + (source ? source->second : std::string(params::kIbHca.name)) + "=" + spec.text +
          " (this host has " + join(all) + ")";
  } else {
    why = "no usable RDMA port: " + join(reasons);
  }
  return false;
}

CuGetHandle cudaDmaBufExport(std::string& why) {
  static std::once_flag once;
  static CuGetHandle fn = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      reason = std::string("libcuda.so.1 not found") + (err ? std::string(": ") + err : std::string());
      return;
    }
    fn = reinterpret_cast<CuGetHandle>(dlsym(lib, "cuMemGetHandleForAddressRange"));
    if (fn == nullptr) reason = "libcuda.so.1 lacks cuMemGetHandleForAddressRange (driver older than CUDA 11.7)";
  });
  why = reason;
  return fn;
}

}  // namespace ringfold::transport::rdma::verbs
