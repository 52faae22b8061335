#include "launcher/elastic_events.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "launcher/subprocess.h"

namespace ringfold::launcher::testing {

using Clock = std::chrono::steady_clock;

std::vector<std::string> readEvents(const std::string& dir) {
  std::ifstream f(dir + "/events");
  std::stringstream ss;
  ss << f.rdbuf();
  return splitLines(ss.str());
}

std::vector<std::string> waitForEvents(const std::string& dir, const std::string& prefix, size_t n,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<std::string> hits;
    for (const auto& e : readEvents(dir)) {
      if (e.rfind(prefix, 0) == 0) hits.push_back(e);
    }
    if (hits.size() >= n || Clock::now() > deadline) return hits;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::map<int, std::string> membersOf(const std::string& dir, int inc, size_t size, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::map<int, std::string> m;
    for (const auto& e : readEvents(dir)) {
      std::istringstream f(e);
      std::string kind, id, incField, rankField;
      f >> kind >> id >> incField >> rankField;
      if (kind == "join" && incField == "inc=" + std::to_string(inc) && rankField.rfind("rank=", 0) == 0) {
        m[std::stoi(rankField.substr(5))] = id;
      }
    }
    if (m.size() >= size || Clock::now() > deadline) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

pid_t workerPid(const std::string& dir, const std::string& id) {
  std::ifstream f(dir + "/pid." + id);
  pid_t p = -1;
  f >> p;
  return p;
}

}  // namespace ringfold::launcher::testing
