// NetnsCluster: the emulated hosts of the multi-host launcher tests, as a C++ object around
// tests/netns/cluster.sh (4 network namespaces h1..h4 at 10.89.0.1-4, each with its own sshd
// on port 2222, keys and known_hosts in a temp dir).
//
// Contract
//   * skipReason() says why the suite cannot run here (not root, no network namespaces, no
//     sshd), or "" when it can; it creates and deletes one probe namespace.
//   * up() builds the cluster under a prefix unique to this process ("rn<pid>"). Before it
//     does, it forks a reaper: a process in its own session that waits for this process to
//     exit (a pipe reaching end of file), then runs `cluster.sh down`. So namespaces, sshds,
//     ranks and the temp dir go away however the suite ends: normally, by an assertion, or
//     killed by ctest's timeout. down() tears down at once (idempotent) and reaps the reaper.
//   * up() makes this process a child subreaper, so the daemonized sshds and other orphans
//     are reaped by down() rather than left as zombies (this machine's init does not reap).
//   * leftovers() lists the processes still running in any host besides its sshd listener
//     (as "h3: 1234 sleep 60"), waiting up to `timeout` for the list to become empty.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ringfold::launcher::testing {

class NetnsCluster {
 public:
  static constexpr int kHosts = 4;
  static std::string skipReason();

  NetnsCluster() = default;
  ~NetnsCluster() { down(); }
  void up();
  void down();

  std::string ns(int host) const { return prefix_ + "h" + std::to_string(host); }  // 1-based
  static std::string ip(int host) { return "10.89.0." + std::to_string(host); }
  const std::string& dir() const { return dir_; }
  std::string sshdPid(int host) const;

  // argv that runs `argv` inside host `host`'s namespace.
  std::vector<std::string> inHost(int host, std::vector<std::string> argv) const;
  // ringfoldrun's ssh options for this cluster, with the given identity (id_user or id_refused).
  std::vector<std::string> sshOptions(const std::string& identity = "id_user") const;
  // Runs a shell command in the root namespace; returns its exit status.
  static int shell(const std::string& command);

  std::vector<std::string> leftovers(std::chrono::milliseconds timeout) const;

 private:
  std::string prefix_;
  std::string dir_;
  bool up_ = false;
  int reaperPipe_ = -1;
  pid_t reaperPid_ = -1;
};

// The cluster the running suite's tests use (set by runSuiteOnCluster).
extern NetnsCluster* gCluster;

// main() of a netns suite: exits 77 with the reason when the cluster cannot be built here,
// otherwise builds it, runs every test on it (gCluster) and tears it down.
int runSuiteOnCluster(int argc, char** argv, const std::string& suite);

}  // namespace ringfold::launcher::testing
