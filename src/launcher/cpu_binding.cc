#include "launcher/cpu_binding.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>

namespace ringfold::launcher {

namespace {

// The integer in `path`, or -1 if it cannot be read.
int readInt(const std::string& path) {
  std::ifstream in(path);
  int v = -1;
  if (!(in >> v)) return -1;
  return v;
}

}  // namespace

std::vector<Core> machineCores(const std::vector<int>& allowed, const std::string& sysfsCpuDir) {
  // (package, core id) -> its hardware threads; a CPU without readable topology is keyed by
  // its own number, after every known core.
  constexpr int kUnknown = std::numeric_limits<int>::max();
  std::map<std::tuple<int, int, int>, Core> byKey;
  for (int cpu : allowed) {
    const std::string topo = sysfsCpuDir + "/cpu" + std::to_string(cpu) + "/topology/";
    const int package = readInt(topo + "physical_package_id");
    const int core = readInt(topo + "core_id");
    const bool known = package >= 0 && core >= 0;
    byKey[known ? std::tuple{package, core, 0} : std::tuple{kUnknown, kUnknown, cpu}].push_back(cpu);
  }
  std::vector<Core> cores;
  cores.reserve(byKey.size());
  for (auto& [key, threads] : byKey) {
    std::sort(threads.begin(), threads.end());
    cores.push_back(std::move(threads));
  }
  return cores;
}

std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::vector<int> cpusForRank(const std::vector<Core>& cores, int localRank, int localSize) {
  const size_t c = cores.size();
  if (c == 0 || localSize < 1 || localRank < 0 || localRank >= localSize) return {};
  const size_t n = static_cast<size_t>(localSize), i = static_cast<size_t>(localRank);
  size_t first = i % c, last = first + 1;  // more ranks than cores: round robin
  if (n <= c) {
    first = i * c / n;
    last = (i + 1) * c / n;
  }
  std::vector<int> cpus;
  for (size_t k = first; k < last; ++k) cpus.insert(cpus.end(), cores[k].begin(), cores[k].end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::vector<int> bindingFor(BindPolicy policy, const std::vector<Core>& cores, int localRank, int localSize,
                            bool polling) {
  const size_t n = static_cast<size_t>(std::max(localSize, 0));
  const bool bindAuto = n > cores.size() || (polling && n > 1 && n == cores.size());
  if (policy == BindPolicy::kNone || (policy == BindPolicy::kAuto && !bindAuto)) return {};
  return cpusForRank(cores, localRank, localSize);
}

bool localTransportPolls(const std::vector<std::string>& env) {
  std::string local = "shm";  // RINGFOLD_LOCAL_TRANSPORT's default
  for (const auto& e : env) {
    if (e.rfind("RINGFOLD_LOCAL_TRANSPORT=", 0) == 0) local = e.substr(e.find('=') + 1);
    if (e == "RINGFOLD_TRANSPORT=loopback") return false;
  }
  return local.empty() || local == "shm";
}

std::string cpuListText(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

cpu_set_t cpuSetOf(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return set;
}

}  // namespace ringfold::launcher
