// The libfabric entry points the ofi fabric calls by name, resolved at run time from
// libfabric.so.1, so that ringfold does not load libfabric (and, through it, every provider's
// libraries: psm's constructor alone sleeps ~0.2 s and installs signal handlers) into processes
// that never open the ofi fabric. Everything else the fabric calls (fi_domain, fi_write,
// fi_cq_read, ...) is a static inline in libfabric's headers that calls through the objects'
// ops tables, so these six are the whole link-time surface.
//
// Contract
//   * ofiApi(why) dlopen()s libfabric.so.1 (RTLD_NOW | RTLD_LOCAL), resolves every symbol and
//     lets libfabric register its providers, once per process (thread-safe; the handle is never
//     closed, so the pointers stay valid). Signal handlers the providers' libraries install
//     meanwhile are undone (kept_signals.h).
//     It returns null and sets `why` when the library is absent ("libfabric.so.1 not found:
//     ...") or lacks a symbol. The result, good or bad, is cached.
//   * Each symbol is taken at the version the linker would have bound at build time (the
//     library's default version then, found by cmake/dependencies.cmake and passed in as
//     RF_OFI_VER_<NAME>): libfabric versions fi_getinfo and friends by the layout of struct
//     fi_info, which must match the headers this file was compiled with. Without a recorded
//     version the library's default is used.
//   * fi_allocinfo() is fi_dupinfo(nullptr): call api->dupinfo(nullptr).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace ringfold::transport::rdma::ofi {

struct Api {
  int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags, const fi_info* hints,
                 fi_info** info) = nullptr;
  fi_info* (*dupinfo)(const fi_info* info) = nullptr;
  void (*freeinfo)(fi_info* info) = nullptr;
  int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context) = nullptr;
  const char* (*strerror)(int errnum) = nullptr;
  char* (*tostr)(const void* data, enum fi_type datatype) = nullptr;
};

const Api* ofiApi(std::string* why);

}  // namespace ringfold::transport::rdma::ofi
