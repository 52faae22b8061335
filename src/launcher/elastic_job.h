// ElasticJob: ringfoldrun with --host-discovery-script. Workers come and go; the job goes on
// as a series of incarnations (memberships), each with its own ranks, published through the
// launcher's store. This is the launcher's side of the contract with the workers
// (docs/launching.md, "Elastic jobs"; the worker side: docs/elastic.md, ringfold.elastic).
//
// Contract
//   * The store (TcpStoreServer, as Job's) and the launcher outlive every incarnation. Before
//     anything starts, the discovery script runs once (host_discovery.h; its failure fails the
//     job, exit 1) and the command is found on PATH (127 if not). A bare script name must be
//     found on PATH too (a usage error, 2, if not). Then the script runs on its own thread
//     every RINGFOLD_ELASTIC_DISCOVERY_INTERVAL s (1), each run bounded by
//     RINGFOLD_ELASTIC_DISCOVERY_TIMEOUT s (30).
//   * Hosts: those discovery lists now, in its order, minus blacklisted ones; a host's slots
//     are numbered 0..slots-1 and each holds at most one running worker. Hosts are local or
//     remote (over ssh with the ssh options) as rank_layout.h's isLocalHost() says; two names
//     of this machine (localhost, 127.0.0.2, ...) are distinct hosts, so one machine can stand
//     in for several. No CPU binding in elastic mode.
//   * Incarnation 1: once discovery gives at least -np slots (waiting at most
//     --elastic-timeout, else exit 1, "only K slots ... fewer than -np N ..."), one worker per
//     free slot, up to --max-np, ordered by host then slot.
//   * Each worker gets the rank variables of the incarnation it starts in (rank_environment.h),
//     RINGFOLD_ELASTIC=1, RINGFOLD_ELASTIC_WORKER_ID=<host>:<slot>:<serial> (serial counts the
//     job's workers from 0), RINGFOLD_INCARNATION=<N> and RINGFOLD_ELASTIC_TIMEOUT=<s>. Its
//     output is prefixed with its id: "[h:0:1]<stdout>:..." (--output-filename DIR: also in
//     DIR/worker.<id>/stdout and stderr).
//   * Store keys: elastic/inc<N>/table (one line per rank: "<id> <rank> <size> <local_rank>
//     <local_size> <cross_rank> <cross_size> <host>"), then elastic/current = N; new workers
//     start after both are written. elastic/inc<N>/update = "1" when discovery changes while N
//     is current in a way that would change the membership (a member's host or slot gone, or a
//     free slot while below --max-np): a change that alters nothing (a host added at --max-np)
//     interrupts nobody. elastic/failed = the reason, when the job cannot go on or is stopped.
//   * A transition from N starts when a member of N exits non-zero or is killed, or sets
//     elastic/inc<N>/ready/<id> (polled every 100 ms, 20 ms during a transition). It waits,
//     bounded by RINGFOLD_TIMEOUT (-x RINGFOLD_TIMEOUT counts, else the launcher's; 60 s) + 5 s,
//     for every running member to exit or be ready (and, while N is younger than the start timeout, until start timeout
//     + 5 s after N was published: its workers may still wait in init for a peer that never
//     came); members still silent are SIGKILLed ("worker W (rank R) neither exited
//     nor became ready within S s; killing it") and count as failed. Sooner when every other
//     running member is ready, one of them with "failed", and the silent ones are local
//     processes in the stopped state (SIGSTOP): they are the frozen peers the others noticed
//     ("worker W (rank R) is stopped (SIGSTOP?) while its peers left the incarnation as
//     failed"). Every host where a worker failed is blacklisted: "ringfoldrun: blacklisting
//     host H: <how it failed>".
//     Then:
//       - the transition counts as a reset: more than --reset-limit fails the job (exit 1,
//         "... more than --reset-limit R allows");
//       - no ready member left: the job fails ("no worker of incarnation N is left to carry the
//         training state"): new workers would start from nothing (Horovod refuses this too);
//       - members of N+1: ready members on listed, non-blacklisted hosts with their slot still
//         listed, in their rank order of N, then new workers on free slots up to --max-np;
//         fewer than --min-np: wait for discovery up to --elastic-timeout, then fail (exit 1,
//         "only K workers left, fewer than --min-np M, after waiting S s");
//       - publish N+1 (table, current), start its new workers. Ready members left out exit 0 by
//         themselves (their id is not in the table); still running after --grace-period + 5 s
//         they get SIGTERM, then SIGKILL after the grace period.
//   * A member exiting 0 is no failure. The job ends when every member of the current
//     incarnation has exited 0: exit 0 (workers left out of it are stopped as above).
//   * A failure that ends the job sets elastic/failed, gives the workers (all waiting for a
//     table then) the grace period to read it and exit, then stops what is left as Job does
//     (SIGTERM, SIGKILL after the grace period). SIGINT/SIGTERM/SIGHUP: the same with that
//     signal, exit 128+signal; a second signal kills at once. Every wait is bounded.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/host_discovery.h"
#include "launcher/launch_options.h"
#include "launcher/output_forwarder.h"
#include "launcher/rank_environment.h"
#include "launcher/rank_layout.h"
#include "launcher/remote_rank.h"
#include "launcher/supervision.h"
#include "rendezvous/store.h"

namespace ringfold::launcher {

class ElasticJob {
 public:
  explicit ElasticJob(LaunchOptions options);
  ~ElasticJob();
  // Runs the job to the end and returns the launcher's exit code.
  int run();

 private:
  using Clock = std::chrono::steady_clock;
  struct Worker : ChildProcess {
    std::string id;
    int slot = 0;              // on its host
    int rank = -1;             // in the incarnation it is a member of (memberOf)
    int memberOf = 0;          // the newest incarnation it is a member of
    bool ready = false;        // set elastic/inc<memberOf>/ready/<id>
    bool readyFailed = false;  // ... with the value "failed"
    bool failed = false;       // counted as failed (its host is blacklisted)
    bool leftOut = false;      // not in the newest table: expected to exit on its own
    Clock::time_point leftAt;
    bool termSent = false;
    size_t forwarder = 0;  // index in forwarders_
    Clock::time_point startDeadline;
  };
  enum class Phase { kWaitingForHosts, kRunning, kDeciding, kStopping };

  // One loop iteration's pieces.
  void reapWorkers();
  void onWorkerExit(Worker& w);
  void handleSignals(int sigFd);
  void onHostsChanged(std::vector<HostSlots> hosts);
  void pollReadyKeys();
  void checkStarts();
  void stepDeciding();
  bool allPendingStopped(const std::vector<Worker*>& pending);
  void stepWaiting();
  void stepLeftOut();
  int pollTimeoutMs() const;

  void beginTransition(const std::string& why);
  // Members of the next incarnation (indices into workers_, then new slots), from the ready
  // members of the current one and the hosts now listed.
  struct Plan {
    std::vector<size_t> survivors;
    std::vector<std::pair<std::string, int>> newSlots;  // host, slot
    size_t size() const { return survivors.size() + newSlots.size(); }
  };
  Plan plan(bool assumeAllSurvive) const;
  bool hostListed(const std::string& host, int slot) const;
  void publish(const Plan& p);
  // Starts worker `index` as `slot` of the newest incarnation; its stdout and stderr join
  // `outputs` (one forwarder per incarnation's new workers).
  void startWorker(size_t index, const RankSlot& slot, std::vector<OutputForwarder::Source>& outputs);
  void markFailed(Worker& w, const std::string& how);
  void fail(const std::string& reason);
  // Stops every worker: `sig` after `delaySeconds`, SIGKILL after the grace period.
  void beginStop(int sig, const std::string& why, double delaySeconds = 0);
  void sendStopSignal();
  void killAll();
  int runningCount() const;
  std::vector<Worker*> currentMembers();
  double rankTimeoutSeconds() const;

  LaunchOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::unique_ptr<OutputForwarder>> forwarders_;
  std::unique_ptr<DiscoveryPoller> discovery_;
  std::unique_ptr<rendezvous::Store> store_;
  std::vector<HostSlots> hosts_;  // last discovered
  std::set<std::string> blacklist_;
  std::vector<std::string> base_;  // the launcher's environment
  StoreEndpoint endpoint_;
  std::string program_, ssh_, nonce_, cwd_;
  SshSettings sshSettings_;
  std::string hostname_;
  std::vector<std::string> addresses_;

  Phase phase_ = Phase::kWaitingForHosts;
  int incarnation_ = 0;  // newest published (0: none yet)
  int serial_ = 0;       // next worker serial
  int resets_ = 0;
  bool updateSet_ = false;       // elastic/inc<N>/update written for the current N
  size_t needed_ = 0;            // while waiting for hosts
  double elasticTimeout_ = 600;  // --elastic-timeout, else RINGFOLD_ELASTIC_TIMEOUT
  Clock::time_point waitSince_, waitUntil_, decideSince_, decideUntil_, nextReadyPoll_, publishedAt_;
  bool killed_ = false;
  int stopSignal_ = SIGTERM;
  std::string stopWhy_;
  bool signalSent_ = false;
  Clock::time_point signalAt_;
  Clock::time_point killAt_, giveUpAt_;
  int exitCode_ = 0;
  bool done_ = false;
};

}  // namespace ringfold::launcher
