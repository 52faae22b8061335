// openFabric and the availability probes: which Fabric RINGFOLD_RDMA_FABRIC names, and whether
// this machine has one (fabric.h).
#include "transport/rdma/fabric.h"

#include <dirent.h>

#include <cstring>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/rdma/fabric_fake.h"
#ifdef RINGFOLD_HAVE_LIBFABRIC
#include "transport/rdma/fabric_ofi.h"
#endif
#ifdef RINGFOLD_HAVE_IBVERBS
#include "transport/rdma/fabric_verbs.h"
#endif

namespace ringfold::transport::rdma {

namespace {

#ifdef RINGFOLD_HAVE_LIBFABRIC
// Whether ofi::open would find a provider: opens one endpoint and closes it.
bool ofiOpens(std::string& why) {
  try {
    ofi::open(0, 1)->close();
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}
// A hardware provider: the one named if it is one (efa, verbs), else efa when the kernel lists an
// EFA device (/sys/class/infiniband/efa*; EFA has no RC queue pairs, so the verbs fabric skips
// it). A plain machine is not probed by opening endpoints at every start-up.
bool ofiHardware(std::string& why) {
  const std::string named = params::kOfiProvider.str();
  if (!named.empty()) {
    if (!ofi::hardwareProvider(named)) {
      why = named + " is a software provider";
      return false;
    }
    return ofiOpens(why);
  }
  bool efa = false;
  if (DIR* d = opendir("/sys/class/infiniband")) {
    while (dirent* e = readdir(d)) efa = efa || std::strncmp(e->d_name, "efa", 3) == 0;
    closedir(d);
  }
  if (!efa) {
    why = "no EFA device";
    return false;
  }
  return ofiOpens(why);
}
#endif

std::unique_ptr<Fabric> openOfi(int rank, int size) {
#ifdef RINGFOLD_HAVE_LIBFABRIC
  return ofi::open(rank, size);
#else
  (void)rank;
  (void)size;
  RF_THROW(Error, "the ofi fabric was not built (libfabric-dev was not found at build time)");
#endif
}

std::unique_ptr<Fabric> openVerbs(int rank, int size) {
#ifdef RINGFOLD_HAVE_IBVERBS
  return verbs::open(rank, size);
#else
  (void)rank;
  (void)size;
  RF_THROW(Error, "the verbs fabric was not built (infiniband/verbs.h was not found at build time)");
#endif
}

}  // namespace

std::unique_ptr<Fabric> openFabric(const std::string& which, int rank, int size) {
  if (which == "fake") return fake::open(rank, size);
  if (which == "ofi") return openOfi(rank, size);
  if (which == "verbs") return openVerbs(rank, size);
  if (which == "auto") {
    std::string why;
    if (hardwareFabric(why) == "verbs") return openVerbs(rank, size);
    return openOfi(rank, size);
  }
  RF_THROW(InvalidArgument, "RINGFOLD_RDMA_FABRIC='", which, "' is not a fabric; use auto, verbs, ofi or fake");
}

std::string hardwareFabric(std::string& why) {
  why.clear();
  std::string verbsWhy = "the verbs fabric was not built";
#ifdef RINGFOLD_HAVE_IBVERBS
  if (verbs::usable(verbsWhy)) return "verbs";
#endif
  std::string ofiWhy = "the ofi fabric was not built";
#ifdef RINGFOLD_HAVE_LIBFABRIC
  if (ofiHardware(ofiWhy)) return "ofi";
#endif
  why = "ibverbs: " + verbsWhy + "; libfabric: " + ofiWhy;
  return "";
}

bool fabricUsable(const std::string& which, std::string& why) {
  why.clear();
  if (which == "fake") return true;
  if (which == "verbs" || which == "auto") {
    const std::string hw = hardwareFabric(why);
    if (which == "verbs") return hw == "verbs";
    if (!hw.empty()) return true;
  }
#ifdef RINGFOLD_HAVE_LIBFABRIC
  std::string ofiWhy;
  if (ofiOpens(ofiWhy)) return true;
  why += (why.empty() ? "" : "; ") + ("libfabric: " + ofiWhy);
#else
  why += (why.empty() ? "" : "; ") + std::string("libfabric: the ofi fabric was not built");
#endif
  return false;
}

}  // namespace ringfold::transport::rdma
