#include "launcher/elastic_job.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/params.h"
#include "launcher/job.h"
#include "launcher/rank_process.h"
#include "launcher/store_address.h"
#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"

namespace ringfold::launcher {

namespace {

using Clock = std::chrono::steady_clock;
// Ready keys are polled every 100 ms while an incarnation runs (the first one starts a
// transition: a worker's exit is seen at once), every 20 ms while a transition waits for them.
constexpr auto kReadyPoll = std::chrono::milliseconds(100);
constexpr auto kReadyPollDeciding = std::chrono::milliseconds(20);
constexpr auto kReapAfterKill = std::chrono::seconds(5);
constexpr auto kOutputDrain = std::chrono::seconds(2);
constexpr double kDecideSlackSeconds = 5;   // on top of RINGFOLD_TIMEOUT
constexpr double kLeftOutSlackSeconds = 5;  // on top of --grace-period

std::string incKey(int n, const std::string& rest) { return "elastic/inc" + std::to_string(n) + "/" + rest; }

double secondsOf(std::chrono::milliseconds ms) { return std::chrono::duration<double>(ms).count(); }

}  // namespace

ElasticJob::ElasticJob(LaunchOptions options) : options_(std::move(options)) {}

ElasticJob::~ElasticJob() = default;

int ElasticJob::runningCount() const {
  int n = 0;
  for (const auto& w : workers_) n += w->running ? 1 : 0;
  return n;
}

std::vector<ElasticJob::Worker*> ElasticJob::currentMembers() {
  std::vector<Worker*> m;
  for (auto& w : workers_) {
    if (w->memberOf == incarnation_ && incarnation_ > 0 && !w->leftOut) m.push_back(w.get());
  }
  std::sort(m.begin(), m.end(), [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
  return m;
}

double ElasticJob::rankTimeoutSeconds() const {
  // The workers' RINGFOLD_TIMEOUT: -x wins over the launcher's environment.
  for (const auto& x : options_.exports) {
    if ((x.name == "RINGFOLD_TIMEOUT" || x.name == "HOROVOD_GLOO_TIMEOUT_SECONDS") && x.value) {
      try {
        return std::stod(*x.value);
      } catch (const std::exception&) {
      }
    }
  }
  return secondsOf(params::kTimeout.asSeconds());
}

bool ElasticJob::hostListed(const std::string& host, int slot) const {
  if (blacklist_.count(host) != 0) return false;
  for (const auto& h : hosts_) {
    if (h.host == host) return slot < h.slots;
  }
  return false;
}

ElasticJob::Plan ElasticJob::plan(bool assumeAllSurvive) const {
  Plan p;
  const size_t maxSize = options_.maxNumProc ? static_cast<size_t>(*options_.maxNumProc) : SIZE_MAX;
  std::vector<const Worker*> members;
  for (const auto& w : workers_) {
    if (incarnation_ > 0 && w->memberOf == incarnation_ && !w->leftOut && w->running && !w->failed &&
        (w->ready || assumeAllSurvive) && hostListed(w->host, w->slot)) {
      members.push_back(w.get());
    }
  }
  std::sort(members.begin(), members.end(), [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
  for (const Worker* m : members) {
    if (p.size() >= maxSize) break;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].get() == m) p.survivors.push_back(i);
    }
  }
  for (const auto& h : hosts_) {
    if (blacklist_.count(h.host) != 0) continue;
    for (int s = 0; s < h.slots && p.size() < maxSize; ++s) {
      bool taken = false;
      for (const auto& w : workers_) taken = taken || (w->running && w->host == h.host && w->slot == s);
      if (!taken) p.newSlots.emplace_back(h.host, s);
    }
  }
  return p;
}

void ElasticJob::markFailed(Worker& w, const std::string& how) {
  if (w.failed) return;
  w.failed = true;
  if (blacklist_.insert(w.host).second) sayLine("blacklisting host " + w.host + ": " + how);
}

void ElasticJob::fail(const std::string& reason) {
  sayLine(reason);
  try {
    store_->setString("elastic/failed", reason);
  } catch (const Error& e) {
    sayLine("could not publish elastic/failed: " + std::string(e.what()));
  }
  exitCode_ = 1;
  // Every worker still running waits for a table: give them the grace period to read
  // elastic/failed and exit by themselves before SIGTERM.
  beginStop(SIGTERM, "", options_.gracePeriodSeconds);
}

void ElasticJob::beginStop(int sig, const std::string& why, double delaySeconds) {
  if (phase_ == Phase::kStopping && !done_) return;
  done_ = false;
  phase_ = Phase::kStopping;
  stopSignal_ = sig;
  stopWhy_ = why;
  signalAt_ = Clock::now() + toDuration(delaySeconds);
  signalSent_ = false;
  if (delaySeconds <= 0) sendStopSignal();
}

void ElasticJob::sendStopSignal() {
  signalSent_ = true;
  killAt_ = Clock::now() + toDuration(options_.gracePeriodSeconds);
  const int n = runningCount();
  if (n > 0) {
    sayLine(stopWhy_ + "stopping " + std::to_string(n) + " remaining worker(s) with " + signalName(stopSignal_));
  }
  for (auto& w : workers_) signalChild(*w, stopSignal_);
}

void ElasticJob::killAll() {
  killed_ = true;
  giveUpAt_ = Clock::now() + kReapAfterKill;
  for (auto& w : workers_) signalChild(*w, SIGKILL);
}

void ElasticJob::startWorker(size_t index, const RankSlot& slot, std::vector<OutputForwarder::Source>& outputs) {
  Worker& w = *workers_[index];
  std::vector<std::string> extra = {"RINGFOLD_ELASTIC=1", "RINGFOLD_ELASTIC_WORKER_ID=" + w.id,
                                    "RINGFOLD_INCARNATION=" + std::to_string(incarnation_),
                                    "RINGFOLD_ELASTIC_TIMEOUT=" + formatSeconds(elasticTimeout_, "%g")};
  std::vector<int> files;  // --output-filename: opened first, so a failure starts nothing
  if (!options_.outputDir.empty()) {
    try {
      files = openLogFiles(options_.outputDir + "/worker." + w.id);
    } catch (const Error& e) {
      fail(e.what());
      return;
    }
  }
  RankProcess p;
  try {
    if (w.local) {
      std::vector<std::string> env = buildRankEnvironment(base_, options_, slot, endpoint_);
      env.insert(env.end(), extra.begin(), extra.end());
      p = spawnRank(slot.rank, program_, options_.command, env);
    } else {
      std::vector<std::string> env = buildRemoteEnvironment(base_, options_, slot, endpoint_);
      env.insert(env.end(), extra.begin(), extra.end());
      p = startRemoteRank(slot.rank, ssh_, sshArgv(ssh_, sshSettings_, w.host, nonce_), base_,
                          remoteScript({env, cwd_, options_.command, w.host, options_.gracePeriodSeconds, nonce_}));
    }
  } catch (const SpawnError& e) {
    for (int f : files) close(f);
    fail(e.what());
    exitCode_ = kCannotExecuteExitCode;
    return;
  }
  w.pid = p.pid;
  w.running = true;
  w.stdinFd = p.stdinFd;
  w.started = w.local;
  w.startDeadline = Clock::now() + toDuration(sshSettings_.startTimeoutSeconds);
  const std::string tag = "[" + w.id + "]";
  w.stdoutSource = outputs.size();
  w.forwarder = forwarders_.size();  // the one publish() creates for this incarnation's new workers
  outputs.push_back({p.stdoutFd, STDOUT_FILENO, tag + "<stdout>:"});
  outputs.push_back({p.stderrFd, STDERR_FILENO, tag + "<stderr>:"});
  if (!w.local) outputs[w.stdoutSource].handshake = startedMarker(nonce_);
  outputs[w.stdoutSource].copyFd = files.empty() ? -1 : files[0];
  outputs[w.stdoutSource + 1].copyFd = files.empty() ? -1 : files[1];
  if (options_.verbose) {
    sayLine("started worker " + w.id + " (pid " + std::to_string(w.pid) + ") as rank " + std::to_string(slot.rank) +
            " of incarnation " + std::to_string(incarnation_) + " on " + w.host + (w.local ? "" : " via ssh"));
  }
}

void ElasticJob::publish(const Plan& p) {
  const int n = incarnation_ + 1;
  // The workers of n, in rank order: survivors, then new ones (created here).
  std::vector<size_t> order = p.survivors;
  for (const auto& [host, slot] : p.newSlots) {
    auto w = std::make_unique<Worker>();
    w->host = host;
    w->slot = slot;
    w->local = isLocalHost(host, hostname_, addresses_);
    w->id = host + ":" + std::to_string(slot) + ":" + std::to_string(serial_++);
    order.push_back(workers_.size());
    workers_.push_back(std::move(w));
  }
  std::vector<std::string> hostOfRank;
  for (size_t i : order) hostOfRank.push_back(workers_[i]->host);
  const std::vector<RankSlot> slots = assignTopology(hostOfRank);
  std::string table;
  for (size_t r = 0; r < order.size(); ++r) {
    const RankSlot& s = slots[r];
    table += workers_[order[r]]->id + " " + std::to_string(s.rank) + " " + std::to_string(s.size) + " " +
             std::to_string(s.localRank) + " " + std::to_string(s.localSize) + " " + std::to_string(s.crossRank) + " " +
             std::to_string(s.crossSize) + " " + s.host + "\n";
  }
  // Members of the old incarnation that are not in the new one exit by themselves.
  const auto now = Clock::now();
  for (auto& w : workers_) {
    if (w->memberOf == incarnation_ && incarnation_ > 0 && !w->leftOut &&
        std::find(p.survivors.begin(), p.survivors.end(), static_cast<size_t>(&w - &workers_[0])) ==
            p.survivors.end()) {
      w->leftOut = true;
      w->leftAt = now;
    }
  }
  // Incarnation n-2's keys (its table, update flag and ready reports) are read by no one now:
  // every worker of it has joined n-1 or left. Without this the store grows by a table per
  // incarnation for as long as the job lives.
  if (n >= 3) store_->deletePrefix(incKey(n - 2, ""));
  store_->setString(incKey(n, "table"), table);
  store_->setString("elastic/current", std::to_string(n));
  incarnation_ = n;
  updateSet_ = false;
  for (size_t r = 0; r < order.size(); ++r) {
    Worker& w = *workers_[order[r]];
    w.rank = static_cast<int>(r);
    w.memberOf = n;
    w.ready = false;
    w.readyFailed = false;
  }
  std::string hostsUsed;
  std::map<std::string, int> perHost;
  std::vector<std::string> hostOrder;
  for (const auto& h : hostOfRank) {
    if (perHost[h]++ == 0) hostOrder.push_back(h);
  }
  for (const auto& h : hostOrder) hostsUsed += (hostsUsed.empty() ? "" : ",") + h + ":" + std::to_string(perHost[h]);
  sayLine("incarnation " + std::to_string(n) + ": " + std::to_string(order.size()) + " worker(s) on " + hostsUsed +
          " (" + std::to_string(p.survivors.size()) + " kept, " + std::to_string(p.newSlots.size()) + " new)");
  if (options_.verbose && n > 1) {
    sayLine("incarnation " + std::to_string(n) + " published " +
            formatSeconds(std::chrono::duration<double>(Clock::now() - decideSince_).count()) +
            " s after incarnation " + std::to_string(n - 1) + " began to end");
  }
  phase_ = Phase::kRunning;
  publishedAt_ = Clock::now();
  std::vector<OutputForwarder::Source> outputs;
  for (size_t r = p.survivors.size(); r < order.size() && phase_ != Phase::kStopping; ++r) {
    startWorker(order[r], slots[r], outputs);
  }
  if (!outputs.empty()) forwarders_.push_back(std::make_unique<OutputForwarder>(std::move(outputs)));
}

void ElasticJob::beginTransition(const std::string& why) {
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kDeciding;
  nextReadyPoll_ = Clock::now();  // the others' ready keys, from now on every 20 ms
  // Workers still starting wait up to the start timeout for their peers (a peer that never
  // came): they are not silent before that.
  decideSince_ = Clock::now();
  decideUntil_ = std::max(decideSince_ + toDuration(rankTimeoutSeconds() + kDecideSlackSeconds),
                          publishedAt_ + toDuration(sshSettings_.startTimeoutSeconds + kDecideSlackSeconds));
  if (options_.verbose) sayLine("incarnation " + std::to_string(incarnation_) + " ends: " + why);
}

void ElasticJob::onWorkerExit(Worker& w) {
  const OutputForwarder* fwd = w.forwarder < forwarders_.size() ? forwarders_[w.forwarder].get() : nullptr;
  const int code = exitCodeOf(w.status);
  const std::string what = describeExit(w, "worker " + w.id, fwd);
  if (phase_ == Phase::kStopping || w.leftOut || w.memberOf != incarnation_) {
    if (options_.verbose) sayLine(what);
    return;
  }
  if (code == 0) {
    if (options_.verbose) sayLine(what);
    if (phase_ == Phase::kRunning) {
      bool allDone = true;
      for (Worker* m : currentMembers()) allDone = allDone && !m->running && exitCodeOf(m->status) == 0 && !m->failed;
      if (allDone) {
        done_ = true;
        phase_ = Phase::kStopping;  // nothing of the current incarnation is left to stop
        giveUpAt_ = Clock::now() + toDuration(2 * options_.gracePeriodSeconds + kLeftOutSlackSeconds) + kReapAfterKill;
      }
    }
    return;
  }
  if (w.failed) {  // killed here as silent: already said
    if (options_.verbose) sayLine(what);
    return;
  }
  sayLine(what + " (rank " + std::to_string(w.rank) + " of incarnation " + std::to_string(incarnation_) + ")");
  markFailed(w, what);
  beginTransition(what);
}

void ElasticJob::reapWorkers() {
  for (auto& w : workers_) {
    if (reapIfExited(*w)) onWorkerExit(*w);
  }
}

void ElasticJob::handleSignals(int sigFd) {
  signalfd_siginfo si;
  while (read(sigFd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;
    if (phase_ != Phase::kStopping || done_) {  // beginStop() ends a done_ phase too
      exitCode_ = 128 + sig;
      try {
        store_->setString("elastic/failed", "ringfoldrun received " + signalName(sig));
      } catch (const Error&) {
      }
      beginStop(sig, "received " + signalName(sig) + ", ");
    } else if (!signalSent_) {
      stopSignal_ = sig;
      stopWhy_ = "received " + signalName(sig) + ", ";
      sendStopSignal();
    } else if (!killed_) {
      sayLine("received " + signalName(sig) + " again, killing the workers");
      killAll();
    }
  }
}

void ElasticJob::onHostsChanged(std::vector<HostSlots> hosts) {
  if (options_.verbose) sayLine("host discovery: " + hostsText(hosts));
  hosts_ = std::move(hosts);
  if (phase_ != Phase::kRunning || updateSet_) return;
  // Interrupt the workers only if the membership would change.
  const Plan p = plan(/*assumeAllSurvive=*/true);
  size_t running = 0;
  for (Worker* m : currentMembers()) running += (m->running && !m->failed) ? 1 : 0;
  if (p.survivors.size() == running && p.newSlots.empty()) return;
  store_->setString(incKey(incarnation_, "update"), "1");
  updateSet_ = true;
  sayLine("hosts changed (" + hostsText(hosts_) + "): asking incarnation " + std::to_string(incarnation_) +
          " to reset at its next commit");
}

void ElasticJob::pollReadyKeys() {
  if (phase_ != Phase::kRunning && phase_ != Phase::kDeciding) return;
  if (Clock::now() < nextReadyPoll_) return;
  nextReadyPoll_ = Clock::now() + (phase_ == Phase::kDeciding ? kReadyPollDeciding : kReadyPoll);
  for (Worker* m : currentMembers()) {
    if (m->ready || !m->running || m->failed) continue;
    if (store_->check({incKey(incarnation_, "ready/" + m->id)})) {
      m->ready = true;
      m->readyFailed = store_->getString(incKey(incarnation_, "ready/" + m->id), std::chrono::seconds(1)) == "failed";
      beginTransition("worker " + m->id + " is ready for the next incarnation");
    }
  }
}

void ElasticJob::checkStarts() {
  const auto now = Clock::now();
  for (auto& w : workers_) {
    if (w->started || !w->running || w->forwarder >= forwarders_.size()) continue;
    if (forwarders_[w->forwarder]->started(w->stdoutSource)) {
      w->started = true;
      continue;
    }
    if (now < w->startDeadline || phase_ == Phase::kStopping) continue;
    const std::string said = forwarders_[w->forwarder]->lastLine(w->stdoutSource + 1);
    const std::string how = "host " + w->host + " did not start worker " + w->id + " within " +
                            formatSeconds(sshSettings_.startTimeoutSeconds, "%g") + " s (--start-timeout)" +
                            (said.empty() ? "" : ": " + said);
    sayLine(how);
    signalChild(*w, SIGKILL);
    w->startDeadline = Clock::time_point::max();  // said once; reaped soon
    if (!w->leftOut && w->memberOf == incarnation_) {
      markFailed(*w, how);
      beginTransition(how);
    }
  }
}

namespace {
// True for a process in state T (stopped by a signal) or t (traced), from /proc/<pid>/stat.
bool processStopped(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'T' || state == 't';
}
}  // namespace

bool ElasticJob::allPendingStopped(const std::vector<Worker*>& pending) {
  // A frozen worker need not be waited for once every other live member has left the
  // incarnation (one of them because of a failure: they noticed the silent peer) and it is
  // one of ours, stopped: it cannot be a slow worker still computing.
  bool sawFailed = false;
  for (Worker* m : currentMembers()) {
    if (!m->running || m->failed) continue;
    if (m->ready) {
      sawFailed = sawFailed || m->readyFailed;
    } else if (!m->local || !processStopped(m->pid)) {
      return false;
    }
  }
  return sawFailed && !pending.empty();
}

void ElasticJob::stepDeciding() {
  std::vector<Worker*> pending;
  for (Worker* m : currentMembers()) {
    if (m->running && !m->ready && !m->failed) pending.push_back(m);
  }
  if (!pending.empty() && Clock::now() < decideUntil_ && !allPendingStopped(pending)) return;
  for (Worker* m : pending) {
    const double waited = std::chrono::duration<double>(Clock::now() - decideSince_).count();
    const std::string how = "worker " + m->id + " (rank " + std::to_string(m->rank) +
                            (m->local && processStopped(m->pid)
                                 ? ") is stopped (SIGSTOP?) while its peers left the incarnation as failed"
                                 : ") neither exited nor became ready within " + formatSeconds(waited, "%.2g") +
                                       " s (RINGFOLD_TIMEOUT + 5 s, or the start timeout for a worker still starting)");
    sayLine(how + "; killing it");
    signalChild(*m, SIGKILL);
    markFailed(*m, how);
  }
  ++resets_;
  if (options_.resetLimit && resets_ > *options_.resetLimit) {
    fail("the job reset " + std::to_string(resets_) + " times, more than --reset-limit " +
         std::to_string(*options_.resetLimit) + " allows");
    return;
  }
  const Plan p = plan(false);
  if (p.survivors.empty()) {
    fail("no worker of incarnation " + std::to_string(incarnation_) +
         " is left to carry the training state; stopping the job");
    return;
  }
  phase_ = Phase::kWaitingForHosts;
  needed_ = static_cast<size_t>(options_.minNumProc);
  waitSince_ = Clock::now();
  waitUntil_ = waitSince_ + toDuration(elasticTimeout_);
  stepWaiting();
}

void ElasticJob::stepWaiting() {
  const Plan p = plan(false);
  if (incarnation_ > 0 && p.survivors.empty()) {
    fail("no worker of incarnation " + std::to_string(incarnation_) +
         " is left to carry the training state; stopping the job");
    return;
  }
  if (p.size() >= needed_) {
    publish(p);
    return;
  }
  if (Clock::now() < waitUntil_) return;
  const std::string waited = formatSeconds(elasticTimeout_, "%g");
  if (incarnation_ == 0) {
    fail("only " + std::to_string(p.size()) + " slot(s) found, fewer than -np " + std::to_string(needed_) +
         ", after waiting " + waited + " s (--elastic-timeout); hosts: " + hostsText(hosts_));
  } else {
    fail("only " + std::to_string(p.size()) + " workers left, fewer than --min-np " + std::to_string(needed_) +
         ", after waiting " + waited + " s");
  }
}

void ElasticJob::stepLeftOut() {
  const auto now = Clock::now();
  const auto grace = toDuration(options_.gracePeriodSeconds);
  for (auto& w : workers_) {
    if (!w->running || !w->leftOut) continue;
    if (!w->termSent && now >= w->leftAt + grace + toDuration(kLeftOutSlackSeconds)) {
      sayLine("worker " + w->id + ", left out of incarnation " + std::to_string(incarnation_) +
              ", is still running; sending SIGTERM");
      signalChild(*w, SIGTERM);
      w->termSent = true;
    } else if (w->termSent && now >= w->leftAt + grace + grace + toDuration(kLeftOutSlackSeconds)) {
      signalChild(*w, SIGKILL);
    }
  }
}

int ElasticJob::pollTimeoutMs() const {
  if (phase_ == Phase::kStopping && !done_) {
    return msUntil(!signalSent_ ? signalAt_ : killed_ ? giveUpAt_ : killAt_);
  }
  // Ready keys, deadlines, left-out workers.
  return static_cast<int>((phase_ == Phase::kDeciding ? kReadyPollDeciding : kReadyPoll).count());
}

int ElasticJob::run() {
  const auto launchedAt = Clock::now();
  int sigFd = blockJobSignals();
  std::unique_ptr<int, void (*)(int*)> sigFdCloser(&sigFd, [](int* fd) { close(*fd); });
  base_ = currentEnvironment();
  elasticTimeout_ =
      options_.elasticTimeoutSeconds ? *options_.elasticTimeoutSeconds : secondsOf(params::kElasticTimeout.asSeconds());
  hostname_ = thisHostname();
  addresses_ = localAddresses();

  // Before anything starts: the script, the command, the first hosts.
  const std::string scriptWord = options_.discoveryScript.substr(0, options_.discoveryScript.find_first_of(" \t"));
  if (scriptWord.find('/') == std::string::npos && !resolveProgram(scriptWord, base_)) {
    std::fprintf(stderr,
                 "ringfoldrun: error: --host-discovery-script: '%s' is not an executable found on PATH "
                 "(give a path, e.g. ./%s)\nTry 'ringfoldrun --help' for more information.\n",
                 scriptWord.c_str(), scriptWord.c_str());
    return kUsageExitCode;
  }
  discovery_ = std::make_unique<DiscoveryPoller>(options_.discoveryScript, options_.slotsPerHost,
                                                 params::kElasticDiscoveryInterval.asSeconds(),
                                                 params::kElasticDiscoveryTimeout.asSeconds());
  try {
    hosts_ = discovery_->discoverNow();
  } catch (const Error& e) {
    sayLine(e.what());
    return 1;
  }
  if (options_.verbose) sayLine("host discovery: " + hostsText(hosts_));
  auto found = resolveProgram(options_.command[0], buildRankEnvironment(base_, options_, RankSlot{}, StoreEndpoint{}));
  if (!found) {
    sayLine("cannot execute '" + options_.command[0] + "': command not found");
    return kCannotExecuteExitCode;
  }
  program_ = *found;
  std::optional<std::string> firstRemote;
  for (const auto& h : hosts_) {
    if (!firstRemote && !isLocalHost(h.host, hostname_, addresses_)) firstRemote = h.host;
  }
  if (auto s = resolveProgram("ssh", base_)) ssh_ = *s;
  if (firstRemote && ssh_.empty()) {
    sayLine("cannot execute 'ssh': command not found (remote hosts such as " + *firstRemote +
            " are started over ssh: install openssh-client)");
    return kCannotExecuteExitCode;
  }
  if (ssh_.empty()) ssh_ = "ssh";  // a remote host discovered later fails to start, and is blacklisted
  const double startTimeout =
      options_.startTimeoutSeconds ? *options_.startTimeoutSeconds : secondsOf(params::kStartTimeout.asSeconds());
  sshSettings_ = SshSettings{options_.sshPort, options_.sshIdentityFile, options_.sshOptions, startTimeout};
  nonce_ = newNonce();
  cwd_ = std::filesystem::current_path().string();

  // The store: it outlives every incarnation. A store address for remote hosts is chosen from
  // the first remote host known now (or --network-interface).
  std::string storeAddr;
  try {
    storeAddr = chooseStoreAddress(options_.networkInterfaces, firstRemote);
  } catch (const Error& e) {
    sayLine(e.what());
    return 1;
  }
  const std::string secret = rendezvous::generateSecret();
  rendezvous::TcpStoreServer server(storeAddr, 0, secret);
  endpoint_ = StoreEndpoint{storeAddr, server.port(), secret};
  store_ = std::make_unique<rendezvous::TcpStore>(storeAddr, server.port(), secret, std::chrono::seconds(10));
  if (options_.verbose) sayLine("rendezvous store listening on " + storeAddr + ":" + std::to_string(server.port()));

  discovery_->start();
  phase_ = Phase::kWaitingForHosts;
  needed_ = static_cast<size_t>(options_.numProc);
  waitSince_ = launchedAt;
  waitUntil_ = launchedAt + toDuration(elasticTimeout_);
  stepWaiting();

  while (true) {
    reapWorkers();
    if (phase_ == Phase::kStopping) {
      if (runningCount() == 0) break;
      if (done_) {
        // The job succeeded; what still runs was left out of it and should exit by itself.
        stepLeftOut();
        if (Clock::now() >= giveUpAt_) {
          sayLine("giving up on " + std::to_string(runningCount()) + " left-out worker(s)");
          break;
        }
      } else if (!signalSent_) {
        if (Clock::now() >= signalAt_) sendStopSignal();
      } else if (!killed_ && Clock::now() >= killAt_) {
        sayLine(std::to_string(runningCount()) + " worker(s) still running after the " +
                formatSeconds(options_.gracePeriodSeconds, "%g") + " s grace period, sending SIGKILL");
        killAll();
      } else if (killed_ && Clock::now() >= giveUpAt_) {
        sayLine("giving up on " + std::to_string(runningCount()) + " worker(s) that did not exit after SIGKILL");
        break;
      }
    } else {
      checkStarts();
      pollReadyKeys();
      if (phase_ == Phase::kDeciding) stepDeciding();
      if (phase_ == Phase::kWaitingForHosts) stepWaiting();
      stepLeftOut();
    }
    pollfd pfd[2] = {{sigFd, POLLIN, 0}, {discovery_->eventFd(), POLLIN, 0}};
    int r = poll(pfd, 2, pollTimeoutMs());
    if (r < 0 && errno != EINTR) RF_CHECK_ERRNO(r, "poll on the signalfd");
    if (r > 0 && pfd[0].revents != 0) handleSignals(sigFd);
    if (r > 0 && pfd[1].revents != 0) {
      if (auto hosts = discovery_->takeChange()) {
        if (phase_ != Phase::kStopping) onHostsChanged(std::move(*hosts));
      }
    }
  }
  discovery_.reset();
  for (auto& f : forwarders_) f->stop(kOutputDrain);
  store_.reset();  // the client before the server it talks to
  return exitCode_;
}

}  // namespace ringfold::launcher
