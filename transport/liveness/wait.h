// liveness::waitFor: the one shape of every backend's blocking wait on a request, so that what a
// wait tells its peers and how it blames a rank is written once.
//
//   loop: call the wait hook; done -> withdraw the notice if one was sent, return; poisoned ->
//         the backend throws; progress made -> loop; else spin (yielding) up to `spin` calling
//         progress; half way to the deadline announce whom this rank waits for (then
//         afterAnnounce, e.g. to push the notices out) and loop; else block until the next of
//         the deadline and the announcement.
//   timeout: one last progress; then the text "timed out after T s sending|waiting for N bytes
//         (tag G) to|from rank P: " + the monitor's blame + which limit ran out, and the rank the
//         monitor blames, go to the backend's timedOut (which poisons and throws).
//
// The backend (B) provides: void hook(); bool done(); void throwIfPoisoned(); unsigned progress();
// void block(Clock::duration slice); void afterAnnounce(); void withdraw();
// [[noreturn]] void timedOut(int culprit, const std::string& what).
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/params.h"
#include "transport/liveness/monitor.h"

namespace ringfold::transport::liveness {

// What a request is, for the timeout's text.
struct Waited {
  int peer = -1;
  bool isSend = false;
  size_t length = 0;
  uint64_t tag = 0;
};

// A request's test(), the non-blocking twin of waitFor: a few rounds of the device's progress
// while they move something (a completion may queue work the backend can finish at once, such as
// a payload read after its header); true once `done`; throws the device's error. D provides
// bool poisoned(); [[noreturn]] void throwPoison(); unsigned progress().
template <class D>
bool testFor(D& device, const bool& done) {
  if (done) return true;
  if (device.poisoned()) device.throwPoison();
  for (int round = 0; round < 4 && !done && !device.poisoned(); ++round) {
    if (device.progress() == 0) break;
  }
  if (done) return true;
  if (device.poisoned()) device.throwPoison();
  return false;
}

template <class B>
void waitFor(B& backend, Monitor& monitor, const Waited& w, std::chrono::microseconds spin,
             std::chrono::milliseconds timeout, std::chrono::milliseconds configured) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  // Half way to the deadline, every peer hears which rank this one waits for.
  Clock::time_point noticeAt = start + timeout / 2;
  bool announced = false;
  for (;;) {
    backend.hook();
    if (backend.done()) {
      if (announced) backend.withdraw();  // a stale notice would misdirect blame
      return;
    }
    backend.throwIfPoisoned();
    if (backend.progress() > 0) continue;
    Clock::time_point now = Clock::now();
    const Clock::time_point spinEnd = std::min(now + spin, deadline);
    bool got = false;
    while (now < spinEnd) {
      backend.hook();
      if (backend.progress() > 0) {
        got = true;
        break;
      }
      // With more runnable threads than cores (the peer may be the one waiting for this core),
      // spinning without yielding only delays the message being waited for.
      sched_yield();
      now = Clock::now();
    }
    if (got) continue;
    if (now >= deadline) break;
    if (now >= noticeAt) {
      monitor.announce(w.peer, std::chrono::duration_cast<std::chrono::milliseconds>(now - start));
      backend.afterAnnounce();
      announced = true;
      noticeAt = Clock::time_point::max();
      continue;
    }
    backend.block(std::min(deadline, noticeAt) - now);
  }
  backend.progress();
  if (backend.done()) {
    if (announced) backend.withdraw();
    return;
  }
  backend.throwIfPoisoned();
  std::string what = detail::concat("timed out after ", seconds(Clock::now() - start), " s ",
                                    w.isSend ? "sending " : "waiting for ", w.length, " bytes (tag ", w.tag, ") ",
                                    w.isSend ? "to" : "from", " rank ", w.peer, ": ");
  const int culprit = monitor.blame(w.peer, what);
  // Name the setting only when it is the limit that ran out: a caller may pass its own (the
  // benches' -T, a test's communicator timeout).
  what += timeout == configured ? detail::concat(" (", params::kTimeout.name, " is ", seconds(timeout), " s)")
                                : detail::concat(" (the caller's limit is ", seconds(timeout), " s)");
  backend.timedOut(culprit, what);
}

}  // namespace ringfold::transport::liveness
