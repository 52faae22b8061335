#include "transport/rdma/verbs_api.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

#include "common/params.h"
#include "transport/rdma/kept_signals.h"

namespace ringfold::transport::rdma::verbs {
namespace {

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

// Resolves `symbol` into `slot`; a required symbol that is missing fails the whole table.
template <typename Fn>
bool resolve(void* handle, const char* symbol, Fn& slot, bool required, Loaded& out) {
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    if (required) {
      const char* err = dlerror();
      out.why = out.api.library + " lacks " + symbol + (err != nullptr ? std::string(": ") + err : std::string());
      return false;
    }
    slot = nullptr;
    return true;
  }
  slot = reinterpret_cast<Fn>(address);
  return true;
}

void load(Loaded& out) {
  KeptSignals kept(out.api.library);  // a vendor library's constructor may take signals (kept_signals.h)
  void* handle = dlopen(out.api.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    out.why =
        out.api.library + " not found (no ibverbs here)" + (err != nullptr ? std::string(": ") + err : std::string());
    return;
  }
  Api& a = out.api;
  bool ok = resolve(handle, "ibv_get_device_list", a.getDeviceList, true, out) &&
            resolve(handle, "ibv_free_device_list", a.freeDeviceList, true, out) &&
            resolve(handle, "ibv_get_device_name", a.getDeviceName, true, out) &&
            resolve(handle, "ibv_open_device", a.openDevice, true, out) &&
            resolve(handle, "ibv_close_device", a.closeDevice, true, out) &&
            resolve(handle, "ibv_query_device", a.queryDevice, true, out) &&
            resolve(handle, "ibv_query_port", a.queryPort, true, out) &&
            resolve(handle, "ibv_query_gid", a.queryGid, true, out) &&
            resolve(handle, "ibv_alloc_pd", a.allocPd, true, out) &&
            resolve(handle, "ibv_dealloc_pd", a.deallocPd, true, out) &&
            resolve(handle, "ibv_reg_mr", a.regMr, true, out) &&
            resolve(handle, "ibv_dereg_mr", a.deregMr, true, out) &&
            resolve(handle, "ibv_create_comp_channel", a.createCompChannel, true, out) &&
            resolve(handle, "ibv_destroy_comp_channel", a.destroyCompChannel, true, out) &&
            resolve(handle, "ibv_create_cq", a.createCq, true, out) &&
            resolve(handle, "ibv_destroy_cq", a.destroyCq, true, out) &&
            resolve(handle, "ibv_get_cq_event", a.getCqEvent, true, out) &&
            resolve(handle, "ibv_ack_cq_events", a.ackCqEvents, true, out) &&
            resolve(handle, "ibv_create_qp", a.createQp, true, out) &&
            resolve(handle, "ibv_modify_qp", a.modifyQp, true, out) &&
            resolve(handle, "ibv_query_qp", a.queryQp, true, out) &&
            resolve(handle, "ibv_destroy_qp", a.destroyQp, true, out) &&
            resolve(handle, "ibv_get_async_event", a.getAsyncEvent, true, out) &&
            resolve(handle, "ibv_ack_async_event", a.ackAsyncEvent, true, out) &&
            resolve(handle, "ibv_event_type_str", a.eventTypeStr, true, out) &&
            resolve(handle, "ibv_wc_status_str", a.wcStatusStr, true, out) &&
            resolve(handle, "ibv_reg_dmabuf_mr", a.regDmabufMr, false, out) &&
            resolve(handle, "_ibv_query_gid_ex", a.queryGidEx, false, out);
  if (!ok) {
    // The half-filled table is never handed out; keep the library mapped (dlclose of a library
    // that registered providers is not worth the risk) but drop every pointer.
    std::string library = a.library;
    a = Api{};
    a.library = library;
    return;
  }
  out.ok = true;
}

}  // namespace

const Api* verbsApi(const std::string& library, std::string& why) {
  // Never destroyed: the tables are used by fabrics that static destructors may still close.
  static auto* mutex = new std::mutex;
  static auto* loaded = new std::map<std::string, std::unique_ptr<Loaded>>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = loaded->find(library);
  if (it == loaded->end()) {
    auto entry = std::make_unique<Loaded>();
    entry->api.library = library;
    load(*entry);
    it = loaded->emplace(library, std::move(entry)).first;
  }
  if (!it->second->ok) {
    why = it->second->why;
    return nullptr;
  }
  return &it->second->api;
}

const Api* verbsApi(std::string& why) { return verbsApi(params::kIbverbsLibrary.str(), why); }

}  // namespace ringfold::transport::rdma::verbs
