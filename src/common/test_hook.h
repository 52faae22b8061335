// Test hook of the fault matrix (tests/faults/matrix.py): RINGFOLD_TEST_STOP_AT=RANK:PHASE makes
// the process of that rank stop itself (SIGSTOP) on entering PHASE, once per process, after
// printing one line to stderr:
//   "RINGFOLD_TEST_STOP_AT: rank R (pid P) stopped itself at PHASE"
// so that the driver can SIGKILL it, leave it frozen or SIGCONT it in exactly that phase instead of
// racing a timer. Phases: store (before the rank connects to the rendezvous store), mesh (tcp_uring:
// its address is published, before it answers or dials any peer), first (the engine's first
// operation, agreed by every rank, before its data moves), shutdown (entering Engine::shutdown).
// Unset (the default), or another rank or phase: nothing happens. Never set it in production.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/params.h"

namespace ringfold::testhook {

inline void stopAt(const char* phase, int rank) {
  // Read once: the engine passes here on every batch it runs.
  static const std::string want = params::kTestStopAt.isSet() ? params::kTestStopAt.str() : std::string();
  if (want.empty()) return;
  const std::string mine = std::to_string(rank) + ":" + phase;
  if (want != mine) return;
  static std::atomic<bool> done{false};  // one stop per process (a second listen, a re-entry)
  if (done.exchange(true)) return;
  std::fprintf(stderr, "RINGFOLD_TEST_STOP_AT: rank %d (pid %d) stopped itself at %s\n", rank,
               static_cast<int>(::getpid()), phase);
  std::fflush(stderr);
  ::kill(::getpid(), SIGSTOP);
}

}  // namespace ringfold::testhook
