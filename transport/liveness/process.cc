// /proc lookups of a peer's process (process.h).
#include "transport/liveness/process.h"

#include <fstream>
#include <string>
#include <thread>

namespace ringfold::transport::liveness {

namespace {

ProcessState lookUp(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return ProcessState::kExited;  // no such process (reaped)
  const auto paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return ProcessState::kUnknown;
  switch (text[paren + 2]) {
    case 'Z':
    case 'X':
    case 'x':
      return ProcessState::kExited;
    case 'T':
    case 't':
      return ProcessState::kStopped;
    default:
      return ProcessState::kRunning;
  }
}

}  // namespace

ProcessState processState(int pid, std::chrono::milliseconds settle) {
  if (pid <= 0) return ProcessState::kUnknown;
  const auto until = std::chrono::steady_clock::now() + settle;
  for (;;) {
    const ProcessState s = lookUp(pid);
    if (s != ProcessState::kRunning || std::chrono::steady_clock::now() >= until) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace ringfold::transport::liveness
