#include "transport/rdma/ofi_api.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "transport/rdma/kept_signals.h"

namespace ringfold::transport::rdma::ofi {
namespace {

constexpr const char* kLibrary = "libfabric.so.1";

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

// Resolves `symbol` at `version` (null: the library's default) into `slot`.
template <typename Fn>
bool resolve(void* handle, const char* symbol, const char* version, Fn& slot, std::string& why) {
  dlerror();
  void* address = version != nullptr ? dlvsym(handle, symbol, version) : dlsym(handle, symbol);
  if (address == nullptr) {
    const char* err = dlerror();
    why = std::string(kLibrary) + " lacks " + symbol + (version != nullptr ? std::string("@") + version : "") +
          (err != nullptr ? std::string(": ") + err : std::string());
    return false;
  }
  slot = reinterpret_cast<Fn>(address);
  return true;
}

// The versions cmake/dependencies.cmake found; null: the library's default.
#ifndef RF_OFI_VER_getinfo
#define RF_OFI_VER_getinfo nullptr
#endif
#ifndef RF_OFI_VER_dupinfo
#define RF_OFI_VER_dupinfo nullptr
#endif
#ifndef RF_OFI_VER_freeinfo
#define RF_OFI_VER_freeinfo nullptr
#endif
#ifndef RF_OFI_VER_fabric
#define RF_OFI_VER_fabric nullptr
#endif
#ifndef RF_OFI_VER_strerror
#define RF_OFI_VER_strerror nullptr
#endif
#ifndef RF_OFI_VER_tostr
#define RF_OFI_VER_tostr nullptr
#endif

// libfabric's first fi_getinfo registers its providers (dlopen()ing the ones built as plugins,
// whose constructors run then): done here, inside load()'s KeptSignals, with a hint that matches
// no provider so that nothing is probed.
void registerProviders(const Api& a) {
  fi_info* hints = a.dupinfo(nullptr);
  if (hints == nullptr || hints->fabric_attr == nullptr) {
    if (hints != nullptr) a.freeinfo(hints);
    return;
  }
  hints->fabric_attr->prov_name = strdup("ringfold-registers-providers");
  fi_info* info = nullptr;
  if (a.getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &info) == 0 &&
      info != nullptr) {
    a.freeinfo(info);
  }
  a.freeinfo(hints);
}

void load(Loaded& out) {
  // Loading libfabric runs its providers' libraries' constructors, and Debian's psm providers
  // install signal handlers there (kept_signals.h): the process keeps its own.
  KeptSignals kept(kLibrary);
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    out.why = std::string(kLibrary) + " not found (no libfabric here)" +
              (err != nullptr ? std::string(": ") + err : std::string());
    return;
  }
  Api& a = out.api;
  out.ok = resolve(handle, "fi_getinfo", RF_OFI_VER_getinfo, a.getinfo, out.why) &&
           resolve(handle, "fi_dupinfo", RF_OFI_VER_dupinfo, a.dupinfo, out.why) &&
           resolve(handle, "fi_freeinfo", RF_OFI_VER_freeinfo, a.freeinfo, out.why) &&
           resolve(handle, "fi_fabric", RF_OFI_VER_fabric, a.fabric, out.why) &&
           resolve(handle, "fi_strerror", RF_OFI_VER_strerror, a.strerror, out.why) &&
           resolve(handle, "fi_tostr", RF_OFI_VER_tostr, a.tostr, out.why);
  if (!out.ok) {
    a = Api{};  // a half-filled table is never handed out; the library stays mapped
    return;
  }
  registerProviders(a);
}

}  // namespace

const Api* ofiApi(std::string* why) {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] { load(loaded); });
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace ringfold::transport::rdma::ofi
