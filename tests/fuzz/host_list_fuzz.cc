// Fuzz target: ringfoldrun's -H and hostfile parsers (launcher/host_list.h), which read what
// users type.
//
// Checks: each parser returns or throws UsageError (an InvalidArgument); what it returns has
// at least one host, every host non-empty, not starting with '-', listed once, with 1 to
// 1000000 slots; and a -H list built back from an accepted result parses to the same result.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "launcher/host_list.h"

namespace la = ringfold::launcher;
namespace fz = ringfold::fuzz;

namespace {

constexpr const char* kTarget = "host_list_fuzz";

void checkHosts(const std::vector<la::HostSlots>& hosts) {
  if (hosts.empty()) fz::fail(kTarget, "an accepted list without hosts");
  std::set<std::string> seen;
  for (const la::HostSlots& h : hosts) {
    if (h.host.empty() || h.host[0] == '-') fz::fail(kTarget, "an empty host name or one that starts with '-'");
    if (h.slots < 1 || h.slots > 1000000) fz::fail(kTarget, "a slot count out of range");
    if (!seen.insert(h.host).second) fz::fail(kTarget, "a host listed twice");
  }
}

std::string asDashH(const std::vector<la::HostSlots>& hosts) {
  std::string text;
  for (const la::HostSlots& h : hosts) {
    if (!text.empty()) text += ',';
    text += h.host + ':' + std::to_string(h.slots);
  }
  return text;
}

bool sameHosts(const std::vector<la::HostSlots>& a, const std::vector<la::HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<la::HostSlots> hosts;
  const bool hostfile = data[0] & 1;
  if (!fz::acceptsOrRejects(kTarget, [&] {
        hosts = hostfile ? la::parseHostfile(text, "fuzz-hostfile") : la::parseHosts(text);
      })) {
    return 0;
  }
  checkHosts(hosts);
  std::vector<la::HostSlots> again;
  // A host name the hostfile accepts may hold characters -H gives a meaning to (',', ':');
  // only names free of them must survive the trip through -H.
  const std::string dashH = asDashH(hosts);
  bool plain = true;
  for (const la::HostSlots& h : hosts) plain = plain && h.host.find_first_of(",:") == std::string::npos;
  if (!plain) return 0;
  if (!fz::acceptsOrRejects(kTarget, [&] { again = la::parseHosts(dashH); }) || !sameHosts(hosts, again)) {
    fz::fail(kTarget, "an accepted host list does not parse back from its -H form");
  }
  return 0;
}
