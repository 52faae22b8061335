// Host and process identities from /proc (see host_identity.h).
#include "transport/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/error.h"

namespace ringfold::transport {

namespace {

// "<kernel boot id><separator><device>:<inode>" of this process's namespace `ns` (/proc/self/ns/),
// or empty when /proc does not tell.
std::string namespaceIdentity(const char* ns, const char* separator) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!(in >> boot) || boot.empty()) return "";
  struct stat id {};
  if (::stat((std::string("/proc/self/ns/") + ns).c_str(), &id) != 0) return "";
  return detail::concat(boot, separator, static_cast<unsigned long long>(id.st_dev), ":",
                        static_cast<unsigned long long>(id.st_ino));
}

}  // namespace

std::string hostIdentity() { return namespaceIdentity("net", "."); }

std::string processIdentity() {
  const std::string pidns = namespaceIdentity("pid", "/");
  return pidns.empty() ? "" : detail::concat(static_cast<long long>(::getpid()), "@", pidns);
}

int localPid(const std::string& peer, const std::string& mine) {
  const auto at = peer.find('@'), myAt = mine.find('@');
  if (at == std::string::npos || myAt == std::string::npos || peer.substr(at) != mine.substr(myAt)) return 0;
  const long long pid = std::atoll(peer.c_str());
  return pid > 0 && pid != ::getpid() ? static_cast<int>(pid) : 0;
}

}  // namespace ringfold::transport
