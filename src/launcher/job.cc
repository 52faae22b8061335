#include "launcher/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "common/params.h"
#include "launcher/failure_cause.h"
#include "launcher/rank_environment.h"
#include "launcher/rank_process.h"
#include "launcher/remote_rank.h"
#include "launcher/store_address.h"
#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"

namespace ringfold::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// After SIGKILL, how long to wait for ranks to be reaped before giving up on them (a process in
// uninterruptible sleep cannot be hurried, an unreachable host cannot be told), and for output
// pipes to drain at the end.
constexpr auto kReapAfterKill = std::chrono::seconds(5);
constexpr auto kOutputDrain = std::chrono::seconds(2);

std::string joinArgv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + shellQuote(a);
  return s;
}

}  // namespace

Job::Job(LaunchOptions options) : options_(std::move(options)) {}

void Job::say(const std::string& line) const { sayLine(line); }

void Job::verbose(const std::string& line) const {
  if (options_.verbose) say(line);
}

double Job::secondsSinceLaunch() const {
  return std::chrono::duration<double>(Clock::now() - launchedAt_).count();
}

int Job::runningCount() const {
  int n = 0;
  for (const auto& r : ranks_) n += r.running ? 1 : 0;
  return n;
}

std::vector<int> Job::openOutputFiles() {
  std::vector<int> fds;
  if (options_.outputDir.empty()) return fds;
  // rank.N with N zero-padded to the width of the largest rank (horovodrun's layout), so the
  // directories sort in rank order.
  const size_t width = std::to_string(std::max(0, options_.numProc - 1)).size();
  for (const auto& r : ranks_) {
    std::string n = std::to_string(r.slot.rank);
    n.insert(0, width - std::min(width, n.size()), '0');
    std::vector<int> pair;
    try {
      pair = openLogFiles(options_.outputDir + "/rank." + n);
    } catch (const Error&) {
      for (int f : fds) close(f);
      throw;
    }
    fds.insert(fds.end(), pair.begin(), pair.end());
  }
  return fds;
}

bool Job::startRanks(const std::string& program, const std::string& ssh,
                     const std::vector<Start>& starts, std::vector<OutputForwarder::Source>& outputs) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    RankProcess p;
    try {
      if (r.slot.local) {
        p = spawnRank(r.slot.rank, program, options_.command, starts[i].env, false, starts[i].cpus);
      } else {
        p = startRemoteRank(r.slot.rank, ssh, starts[i].sshArgv, currentEnvironment(), starts[i].script);
      }
    } catch (const SpawnError& e) {
      say(e.what());
      exitCode_ = kCannotExecuteExitCode;
      return false;
    }
    r.pid = p.pid;
    r.running = true;
    r.stdinFd = p.stdinFd;
    r.started = r.slot.local;
    const std::string tag = "[" + std::to_string(r.slot.rank) + "]";
    r.stdoutSource = outputs.size();
    outputs.push_back({p.stdoutFd, STDOUT_FILENO, tag + "<stdout>:"});
    outputs.push_back({p.stderrFd, STDERR_FILENO, tag + "<stderr>:"});
    if (!r.slot.local) outputs[r.stdoutSource].handshake = startedMarker(nonce_);
    verbose("started rank " + std::to_string(r.slot.rank) + " (pid " + std::to_string(r.pid) +
            ") on " + r.slot.host + (r.slot.local ? "" : " via ssh") +
            (starts[i].cpus.empty() ? "" : ", CPUs " + cpuListText(starts[i].cpus)));
  }
  return true;
}

void Job::signalRank(Rank& r, int sig) { signalChild(r, sig); }

void Job::beginStop(int sig, const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  killAt_ = Clock::now() + toDuration(options_.gracePeriodSeconds);
  int n = runningCount();
  if (n > 0) {
    say(why + "stopping " + std::to_string(n) + " remaining rank(s) with " + signalName(sig));
  }
  for (auto& r : ranks_) signalRank(r, sig);
}

void Job::beginFailureGrace(const Rank& failed) {
  // A remote rank that never started cannot have met a peer; when ssh lost its host, no rank was
  // seen to die (the others would notice a lost host only after RINGFOLD_TIMEOUT): nothing for
  // the others to see within a grace.
  const bool seenToDie = failed.local || (failed.started && exitCodeOf(failed.status) != kSshFailed);
  if (failureGraceSeconds_ <= 0 || !seenToDie || runningCount() == 0) {
    beginStop(SIGTERM, "");
    return;
  }
  failing_ = true;
  stopAt_ = Clock::now() + toDuration(failureGraceSeconds_);
  verbose("the other " + std::to_string(runningCount()) + " rank(s) have " +
          formatSeconds(failureGraceSeconds_, "%g") + " s to fail and exit on their own (--failure-grace)");
}

void Job::killAll() {
  killed_ = true;
  giveUpAt_ = Clock::now() + kReapAfterKill;
  for (auto& r : ranks_) signalRank(r, SIGKILL);
}

void Job::abandonRemote() {
  for (auto& r : ranks_) {
    if (r.running && !r.slot.local) signalGroup(r.pid, SIGKILL);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (runningCount() > 0 && Clock::now() < deadline) {
    reapExited();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Job::onRankExit(Rank& r) {
  const int code = exitCodeOf(r.status);
  const std::string what = describeExit(r, "rank " + std::to_string(r.slot.rank), forwarder_);
  bool failed = code != 0;
  if (failed) {
    // A rank that dies of the signal the launcher sent it was stopped; any other failure is
    // its own (failure_cause.h), in the order the launcher saw them.
    const bool stoppedHere = stopping_ && (code == 128 + SIGTERM || code == 128 + SIGKILL ||
                                           code == 128 + SIGINT || code == 128 + SIGHUP);
    if (stoppedHere) {
      r.stopped = true;
    } else {
      r.failedSeq = failedCount_++;
    }
  }
  if (!failed || stopping_ || failing_) {  // not the first failure: it said what happened
    verbose(what);
    return;
  }
  say(what);
  exitCode_ = code;
  firstFailed_ = r.slot.rank;
  firstFailureNs_ = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  beginFailureGrace(r);
}

void Job::reportCause(const OutputForwarder& forwarder) {
  if (firstFailed_ < 0) return;
  std::vector<RankOutcome> outcomes;
  for (const auto& r : ranks_) {
    ErrorLines e = forwarder.errorLines(r.stdoutSource + 1);
    outcomes.push_back({r.slot.rank, r.failedSeq, r.stopped || r.running, e.errorLine(), e.raised(),
                        e.raisedAtNs()});
  }
  const int size = static_cast<int>(ranks_.size());
  const Cause cause = chooseCause(outcomes, size, firstFailureNs_);
  if (cause.rank < 0) return;
  std::string victims;
  int victimCount = 0;
  for (const auto& o : outcomes) {
    if (o.rank == cause.rank || (o.failedSeq < 0 && !o.stopped)) continue;
    if (!blameOf(o.errorLine, o.rank, size).peer) continue;
    victims += (victimCount++ == 0 ? "" : ", ") + std::to_string(o.rank);
  }
  if (cause.rank == firstFailed_ && victimCount == 0) return;  // its exit line said it all
  size_t at = 0;
  while (outcomes[at].rank != cause.rank) ++at;  // chooseCause names one of them
  const RankOutcome& c = outcomes[at];
  say("the failure started at rank " + std::to_string(cause.rank) +
      (c.errorLine.empty() ? "" : ": " + c.errorLine) +
      (victimCount == 0 ? ""
                        : " (rank" + std::string(victimCount > 1 ? "s " : " ") + victims +
                              (victimCount > 1 ? " report" : " reports") + " a failed peer)"));
  if (cause.rule == 1) exitCode_ = exitCodeOf(ranks_[at].status);
}

bool Job::reapExited() {
  for (auto& r : ranks_) {
    if (reapIfExited(r)) onRankExit(r);
  }
  return runningCount() > 0;
}

void Job::checkStarted(const OutputForwarder& forwarder) {
  if (allStarted_) return;
  bool all = true;
  for (auto& r : ranks_) {
    if (!r.started && forwarder.started(r.stdoutSource)) {
      r.started = true;
      double after = std::chrono::duration<double>(
                         Clock::duration(std::chrono::nanoseconds(forwarder.startedAtNs(r.stdoutSource))) -
                         launchedAt_.time_since_epoch())
                         .count();
      verbose("rank " + std::to_string(r.slot.rank) + " started on " + r.slot.host + " " +
              formatSeconds(after) + " s after launch");
    }
    all = all && r.started;
  }
  if (all) {
    allStarted_ = true;
    verbose("all " + std::to_string(ranks_.size()) + " ranks started " +
            formatSeconds(secondsSinceLaunch()) + " s after launch");
    return;
  }
  if (stopping_ || failing_ || Clock::now() < startDeadline_) return;
  for (const auto& r : ranks_) {
    if (r.started || !r.running) continue;
    std::string said = forwarder.lastLine(r.stdoutSource + 1);
    say("host " + r.slot.host + " did not start rank " + std::to_string(r.slot.rank) + " within " +
        formatSeconds(startTimeoutSeconds_, "%g") + " s (--start-timeout)" +
        (said.empty() ? "" : ": " + said));
    exitCode_ = kStartFailedExitCode;
    beginStop(SIGTERM, "");
    return;
  }
}

int Job::run() {
  launchedAt_ = Clock::now();
  int sigFd = blockJobSignals();
  std::unique_ptr<int, void (*)(int*)> sigFdCloser(&sigFd, [](int* fd) { close(*fd); });

  // Where each rank runs.
  std::vector<bool> localFlags = localHostFlags(options_.hosts, thisHostname(), localAddresses());
  std::vector<RankSlot> layout = computeRankLayout(options_.hosts, options_.numProc);
  markLocalSlots(layout, options_.hosts, localFlags);
  bool anyLocal = false;
  std::optional<std::string> firstRemote;
  for (const auto& s : layout) {
    if (s.local) anyLocal = true;
    if (!s.local && !firstRemote) firstRemote = s.host;
  }

  const std::vector<std::string> base = currentEnvironment();
  // Found before anything starts, on the PATH the ranks will have (-x PATH=... counts).
  std::string program;
  if (anyLocal) {
    auto found = resolveProgram(options_.command[0],
                                buildRankEnvironment(base, options_, layout[0], StoreEndpoint{}));
    if (!found) {
      say("cannot execute '" + options_.command[0] + "': command not found");
      return kCannotExecuteExitCode;
    }
    program = *found;
  }
  std::string ssh;
  if (firstRemote) {
    auto found = resolveProgram("ssh", base);
    if (!found) {
      say("cannot execute 'ssh': command not found (remote hosts such as " + *firstRemote +
          " are started over ssh: install openssh-client)");
      return kCannotExecuteExitCode;
    }
    ssh = *found;
    for (size_t h = 0; h < options_.hosts.size(); ++h) {  // every remote host has a route
      if (localFlags[h]) continue;
      try {
        routeSourceAddress(resolveIPv4(options_.hosts[h].host));
      } catch (const Error& e) {
        say("host " + options_.hosts[h].host + ": " + e.what());
        return kStartFailedExitCode;
      }
    }
  }
  startTimeoutSeconds_ = options_.startTimeoutSeconds
                             ? *options_.startTimeoutSeconds
                             : std::chrono::duration<double>(params::kStartTimeout.asSeconds()).count();
  startDeadline_ = launchedAt_ + toDuration(startTimeoutSeconds_);
  failureGraceSeconds_ = options_.failureGraceSeconds
                             ? *options_.failureGraceSeconds
                             : std::chrono::duration<double>(params::kFailureGrace.asSeconds()).count();

  // The store: in this process, with a fresh secret, where every rank can reach it.
  const std::string storeAddr = chooseStoreAddress(options_.networkInterfaces, firstRemote);
  const std::string secret = rendezvous::generateSecret();
  rendezvous::TcpStoreServer store(storeAddr, 0, secret);
  StoreEndpoint endpoint{storeAddr, store.port(), secret};
  verbose("rendezvous store listening on " + endpoint.addr + ":" + std::to_string(endpoint.port));

  nonce_ = newNonce();
  SshSettings sshSettings{options_.sshPort, options_.sshIdentityFile, options_.sshOptions,
                          startTimeoutSeconds_};
  std::string cwd = std::filesystem::current_path().string();
  std::vector<Start> starts;
  const std::vector<Core> cores =
      options_.bindTo != BindPolicy::kNone ? machineCores(allowedCpus()) : std::vector<Core>{};
  for (const auto& slot : layout) {
    Start s;
    if (slot.local) {
      s.env = buildRankEnvironment(base, options_, slot, endpoint);
      s.cpus = bindingFor(options_.bindTo, cores, slot.localRank, slot.localSize, localTransportPolls(s.env));
    } else {
      s.sshArgv = sshArgv(ssh, sshSettings, slot.host, nonce_);
      s.script = remoteScript({buildRemoteEnvironment(base, options_, slot, endpoint), cwd,
                               options_.command, slot.host, options_.gracePeriodSeconds, nonce_});
      if (slot.host == *firstRemote && slot.localRank == 0) {
        verbose("remote ranks start with: " + joinArgv(s.sshArgv) + " (environment on stdin)");
      }
    }
    starts.push_back(std::move(s));
    Rank rank;
    rank.slot = slot;
    rank.local = slot.local;
    rank.host = slot.host;
    ranks_.push_back(std::move(rank));
  }
  std::vector<int> files = openOutputFiles();

  std::vector<OutputForwarder::Source> outputs;
  bool started = startRanks(program, ssh, starts, outputs);
  for (size_t i = 0; i < outputs.size() && i < files.size(); ++i) outputs[i].copyFd = files[i];
  for (size_t i = outputs.size(); i < files.size(); ++i) close(files[i]);  // ranks never started
  OutputForwarder forwarder(std::move(outputs));
  forwarder_ = &forwarder;
  if (!started) beginStop(SIGTERM, "");
  checkStarted(forwarder);

  while (reapExited()) {
    checkStarted(forwarder);
    int timeoutMs = -1;
    if (stopping_) {
      timeoutMs = msUntil(killed_ ? giveUpAt_ : killAt_);
    } else if (failing_) {
      timeoutMs = msUntil(stopAt_);
    } else if (!allStarted_ && Clock::now() < startDeadline_) {
      timeoutMs = msUntil(startDeadline_);
    }
    pollfd pfd[2] = {{sigFd, POLLIN, 0}, {forwarder.eventFd(), POLLIN, 0}};
    int r = poll(pfd, 2, timeoutMs);
    if (r < 0 && errno != EINTR) RF_CHECK_ERRNO(r, "poll on the signalfd");
    if (r > 0 && pfd[1].revents != 0) forwarder.drainEvents();
    if (r > 0 && pfd[0].revents != 0) {
      signalfd_siginfo si;
      while (read(sigFd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {  // non-blocking
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped at the top of the loop
        if (!stopping_) {
          if (!failing_) exitCode_ = 128 + sig;  // else the failed rank's status stands
          beginStop(sig, "received " + signalName(sig) + ", ");
        } else if (!killed_) {
          say("received " + signalName(sig) + " again, killing the ranks");
          killAll();
        }
      }
    }
    if (failing_ && !stopping_ && Clock::now() >= stopAt_ && runningCount() > 0) {
      beginStop(SIGTERM, formatSeconds(failureGraceSeconds_, "%g") + " s after rank " +
                             std::to_string(firstFailed_) + " failed (--failure-grace), ");
    } else if (stopping_ && !killed_ && Clock::now() >= killAt_ && runningCount() > 0) {
      say(std::to_string(runningCount()) + " rank(s) still running after the " +
          formatSeconds(options_.gracePeriodSeconds, "%g") + " s grace period, sending SIGKILL");
      killAll();
    } else if (killed_ && Clock::now() >= giveUpAt_ && runningCount() > 0) {
      abandonRemote();
      if (runningCount() > 0) {
        say("giving up on " + std::to_string(runningCount()) +
            " rank(s) that did not exit after SIGKILL");
      }
      break;
    }
  }
  forwarder.stop(kOutputDrain);
  forwarder_ = nullptr;
  reportCause(forwarder);
  return exitCode_;
}

}  // namespace ringfold::launcher
