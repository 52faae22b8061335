// Inert entry points. libfabric, librdmacm and libefa are linked with BIND_NOW against
// libibverbs.so.1, so a process that loads libfabric (libringfold does) only starts, with
// LD_LIBRARY_PATH putting this double first, when every symbol they import exists here (libefa's
// constructor even calls verbs_register_driver_34). None of them is on the path of ringfold's
// verbs fabric; each answers "not supported" the way the real call reports failure.
#include <cerrno>
#include <cstddef>

#include "nic.h"

#define VD_EXPORT extern "C" __attribute__((visibility("default")))

// Declared by verbs.h: the same signatures.
VD_EXPORT int ibv_fork_init(void) { return 0; }
VD_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

VD_EXPORT ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  errno = EOPNOTSUPP;  // no UD in the double
  return nullptr;
}
VD_EXPORT int ibv_destroy_ah(ibv_ah*) { return EOPNOTSUPP; }
VD_EXPORT ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
VD_EXPORT int ibv_destroy_srq(ibv_srq*) { return EOPNOTSUPP; }
VD_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
VD_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
VD_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
VD_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
VD_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) {
  errno = EOPNOTSUPP;  // QPs here are not extended QPs
  return nullptr;
}

// rdma-core's provider interface (infiniband/driver.h, not installed): what a provider library
// calls into libibverbs. No provider is ever driven by the double, so nothing reaches these
// beyond registration; the argument lists are irrelevant to the C calling convention used.
VD_EXPORT void verbs_register_driver_34(const void*) {}
VD_EXPORT void* _verbs_init_and_alloc_context(...) {
  errno = EOPNOTSUPP;
  return nullptr;
}
VD_EXPORT void verbs_set_ops(...) {}
VD_EXPORT void verbs_uninit_context(...) {}
VD_EXPORT void __verbs_log(...) {}
VD_EXPORT int ibv_cmd_alloc_pd(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_dealloc_pd(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_create_ah(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_destroy_ah(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_create_cq_ex(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_destroy_cq(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_create_qp_ex(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_modify_qp(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_query_qp(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_destroy_qp(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_reg_mr(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_reg_dmabuf_mr(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_dereg_mr(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_get_context(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_query_device_any(...) { return EOPNOTSUPP; }
VD_EXPORT int ibv_cmd_query_port(...) { return EOPNOTSUPP; }

// Kernel-structure copies for librdmacm (only ever fed by the kernel's rdma_cm, absent here).
VD_EXPORT void ibv_copy_ah_attr_from_kern(...) {}
VD_EXPORT void ibv_copy_qp_attr_from_kern(...) {}
VD_EXPORT void ibv_copy_path_rec_from_kern(...) {}

// sysfs helpers: there is no RDMA sysfs on this machine.
VD_EXPORT const char* ibv_get_sysfs_path(void) { return "/sys"; }
VD_EXPORT int ibv_read_sysfs_file(...) { return -1; }
