// KeptSignals: the process's signal dispositions, kept across loading a vendor library.
//
// Why: some RDMA stacks install signal handlers from their constructors. Debian's libfabric
// links the psm providers, whose libinfinipath.so.4 takes SIGINT, SIGTERM, SIGILL, SIGABRT,
// SIGBUS and SIGSEGV the moment libfabric.so.1 is loaded; its SIGTERM handler calls exit(1),
// which runs the process's destructors while ringfold's engine is mid-collective, so a rank
// that the launcher stops with SIGTERM hung until SIGKILL, and Python's and the user's own
// handlers were gone. ringfold loads those libraries itself (dlopen, ofi_api.h, verbs_api.h),
// so it puts back what the process had.
//
// Contract
//   * Construction records the disposition (sigaction) of each signal in kSignals.
//   * restore() puts back every one that changed since, and returns their names
//     ("SIGINT SIGTERM"; empty when none did). The destructor calls it if it has not run, and
//     logs at debug level what `who` (say, "libfabric.so.1") had changed.
//   * Process-wide state: use it where no other thread is installing handlers at the same time
//     (the libraries' first load, under their std::call_once).
#pragma once

#include <signal.h>

#include <cstring>
#include <string>
#include <utility>

#include "common/logging.h"

namespace ringfold::transport::rdma {

class KeptSignals {
 public:
  static constexpr int kSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGILL, SIGABRT, SIGBUS,
                                     SIGFPE, SIGSEGV, SIGPIPE, SIGTERM, SIGUSR1, SIGUSR2};

  explicit KeptSignals(std::string who) : who_(std::move(who)) {
    for (size_t i = 0; i < kCount; ++i) sigaction(kSignals[i], nullptr, &saved_[i]);
  }
  ~KeptSignals() {
    if (restored_) return;
    const std::string changed = restore();
    if (!changed.empty()) {
      RF_LOG(kDebug) << who_ << " installed handlers for " << changed << "; ringfold put back the process's own";
    }
  }
  KeptSignals(const KeptSignals&) = delete;
  KeptSignals& operator=(const KeptSignals&) = delete;

  std::string restore() {
    restored_ = true;
    std::string changed;
    for (size_t i = 0; i < kCount; ++i) {
      struct sigaction now {};
      sigaction(kSignals[i], nullptr, &now);
      if (same(now, saved_[i])) continue;
      sigaction(kSignals[i], &saved_[i], nullptr);
      if (!changed.empty()) changed += ' ';
      changed += std::string("SIG") + sigabbrev_np(kSignals[i]);
    }
    return changed;
  }

 private:
  static constexpr size_t kCount = sizeof(kSignals) / sizeof(kSignals[0]);
  static bool same(const struct sigaction& a, const struct sigaction& b) {
    const bool info = (a.sa_flags & SA_SIGINFO) != 0;
    if (info != ((b.sa_flags & SA_SIGINFO) != 0)) return false;
    return info ? a.sa_sigaction == b.sa_sigaction : a.sa_handler == b.sa_handler;
  }

  std::string who_;
  struct sigaction saved_[kCount] {};
  bool restored_ = false;
};

}  // namespace ringfold::transport::rdma
