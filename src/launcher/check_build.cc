#include "launcher/check_build.h"

#include <dirent.h>
#include <dlfcn.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "transport/rdma/fabric.h"

#ifndef RF_CB_URING
#define RF_CB_URING 0
#endif
#ifndef RF_CB_CUDA
#define RF_CB_CUDA 0
#endif
#ifndef RF_CB_IBVERBS
#define RF_CB_IBVERBS 0
#endif
#ifndef RF_CB_LIBFABRIC
#define RF_CB_LIBFABRIC 0
#endif
#ifndef RF_CB_NCCL_API
#define RF_CB_NCCL_API 0
#endif
#ifndef RF_CB_NCCL_NET
#define RF_CB_NCCL_NET 0
#endif

namespace ringfold::launcher {

namespace {

std::string line(bool yes, const std::string& name, const std::string& note) {
  std::string s = std::string("    [") + (yes ? "X" : " ") + "] " + name;
  if (!note.empty()) s += std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') + "(" + note + ")";
  return s + "\n";
}

bool ioUringUsable() {
#ifdef __NR_io_uring_setup
  io_uring_params p;
  std::memset(&p, 0, sizeof p);
  long fd = syscall(__NR_io_uring_setup, 2, &p);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
#else
  return false;
#endif
}

std::vector<std::string> listDir(const char* path) {
  std::vector<std::string> names;
  DIR* d = opendir(path);
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

// `file` beside the libringfold this process runs (its directory, or the build tree's nccl/
// folder), or empty.
std::string besideLibrary(const std::string& file) {
  Dl_info info{};
  void* symbol = dlsym(RTLD_DEFAULT, "ringfold_version");
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  std::string dir = info.dli_fname;
  dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  for (const std::string& at : {dir + "/" + file, dir + "/nccl/" + file}) {
    if (access(at.c_str(), R_OK) != 0) continue;
    char* real = realpath(at.c_str(), nullptr);
    const std::string path = real != nullptr ? real : at;
    free(real);
    return path;
  }
  return "";
}

// The NCCL drop-ins: built or not, where they are, and how each is used.
void ncclDropIns(std::ostringstream& r) {
  r << "\nAvailable NCCL drop-ins:\n";
  if (RF_CB_NCCL_API) {
    const std::string at = besideLibrary("libnccl.so.2");
    r << line(!at.empty(), "libnccl.so.2",
              at.empty() ? "built, but not found beside libringfold"
                         : "NCCL's C API over ringfold: LD_PRELOAD=" + at + " (docs/nccl.md)");
  } else {
    r << line(false, "libnccl.so.2", "not built: nccl.h was not found (RINGFOLD_WITH_NCCL_API)");
  }
  if (RF_CB_NCCL_NET) {
    const std::string at = besideLibrary("libnccl-net-ringfold.so");
    r << line(!at.empty(), "NCCL net plugin",
              at.empty() ? "built, but not found beside libringfold"
                         : "NCCL_NET_PLUGIN=ringfold with " + at.substr(0, at.rfind('/')) +
                               " on LD_LIBRARY_PATH (docs/nccl_net.md)");
  } else {
    r << line(false, "NCCL net plugin", "not built: it needs the io_uring transport (RINGFOLD_WITH_NCCL_API)");
  }
}

// Lines "name found submodule" from python3, or the error text.
std::string probePython(bool& ran) {
  const char* script =
      "import importlib.util as u\n"
      "try:\n"
      "  s = u.find_spec('ringfold')\n"
      "except Exception as e:\n"
      "  s = None\n"
      "print('ringfold', 1 if s else 0, s.origin if s else '-')\n"
      "for m in ('torch', 'tensorflow', 'keras'):\n"
      "  try:\n"
      "    sub = 1 if s and u.find_spec('ringfold.' + m) else 0\n"
      "  except Exception:\n"
      "    sub = 0\n"
      "  print(m, sub, 1 if u.find_spec(m) else 0)\n";
  std::string cmd = "timeout 20 python3 -c \"$RF_CB_SCRIPT\" 2>/dev/null";
  setenv("RF_CB_SCRIPT", script, 1);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p != nullptr) {
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ran = pclose(p) == 0;
  }
  unsetenv("RF_CB_SCRIPT");
  return out;
}

}  // namespace

std::string checkBuildReport(const std::string& version) {
  std::ostringstream r;
  r << "ringfold v" << version << ":\n\nAvailable transports:\n";
  if (RF_CB_URING) {
    r << line(true, "tcp_uring", ioUringUsable() ? "io_uring usable on this kernel"
                                                 : "built, but this kernel refuses io_uring");
  } else {
    r << line(false, "tcp_uring", "not built: liburing was not found");
  }
  r << line(true, "loopback", "ranks as threads in one process, for tests");
  // rdma: which fabric a rank started here would use (transport/rdma/fabric.h's probes).
  auto ib = listDir("/sys/class/infiniband");
  std::string hwWhy;
  const std::string hw = transport::rdma::hardwareFabric(hwWhy);
  // "auto" without probing the hardware again: it is usable when the probe found some, else when
  // a libfabric provider opens.
  std::string ofiWhy;
  const bool usable = !hw.empty() || transport::rdma::fabricUsable("ofi", ofiWhy);
  const std::string anyWhy = hwWhy + "; " + ofiWhy;
  r << line(usable, "rdma",
            !hw.empty() ? "RDMA hardware: the " + hw + " fabric; used by default between hosts"
            : usable    ? "no RDMA hardware (" + hwWhy + "); RINGFOLD_TRANSPORT=rdma runs libfabric's software provider"
                        : "no fabric usable: " + anyWhy);
  if (RF_CB_IBVERBS) {
    r << line(hw == "verbs", "  ibverbs", ib.empty() ? "built (dlopened); no RDMA device here" : "built; devices: " + ib[0]);
  } else {
    r << line(false, "  ibverbs", std::string("not built") + (ib.empty() ? "" : "; this machine has " + ib[0]));
  }
  r << line(RF_CB_LIBFABRIC && usable && hw != "verbs", "  libfabric",
            RF_CB_LIBFABRIC ? "built; provider from RINGFOLD_OFI_PROVIDER / FI_PROVIDER or the first that fits"
                            : "not built: libfabric-dev was not found");

  r << "\nAvailable reducers:\n";
  r << line(true, "CPU", "");
  bool gpu = access("/proc/driver/nvidia", F_OK) == 0;
  if (RF_CB_CUDA) {
    r << line(true, "CUDA", gpu ? "NVIDIA driver present" : "built; no NVIDIA driver here");
  } else {
    r << line(false, "CUDA", std::string("not built (no CUDA toolkit, or no CUDA kernels, at build time)") +
                                 (gpu ? "; this machine has an NVIDIA driver" : ""));
  }

  r << "\nAvailable framework plugins:\n";
  using VersionFn = const char* (*)();
  auto fn = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "ringfold_version"));
  r << line(fn != nullptr, "C ABI",
            fn != nullptr ? std::string("bindings/c, ringfold.h: ringfold_version() = ") + fn()
                          : "not in this libringfold");
  bool ran = false;
  std::istringstream py(probePython(ran));
  std::string name, found, extra;
  bool any = false;
  while (py >> name >> found >> extra) {
    any = true;
    if (name == "ringfold") {
      r << line(found == "1", "Python ringfold",
                found == "1" ? "imports from " + extra
                             : "not importable by python3; add bindings/python to PYTHONPATH");
    } else {
      std::string plugin = "ringfold." + name;
      r << line(found == "1", plugin,
                std::string(found == "1" ? "present" : "absent") + ", " + name +
                    (extra == "1" ? " installed" : " not installed"));
    }
  }
  if (!any) r << line(false, "Python ringfold", ran ? "no answer from python3" : "python3 did not run");
  ncclDropIns(r);
  return r.str();
}

}  // namespace ringfold::launcher
