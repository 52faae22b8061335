// elastic_worker: a fake elastic worker for the launcher tests. It speaks the worker side of the
// elastic protocol (docs/elastic.md, src/launcher/elastic_job.h) through the store client, with
// the training replaced by a heartbeat, and is steered by files in DIR:
//
//   elastic_worker DIR
//
//   * On start and after each re-join it appends to DIR/events one line
//       "join <id> inc=<N> rank=<r> size=<s> local=<lr>/<ls> cross=<cr>/<cs> host=<h> pid=<p>"
//     and writes its pid to DIR/pid.<id>; on stdout: "worker <id> joined incarnation N as rank R".
//   * Every 50 ms ("a step") it bumps the store counter fake/<id>/beat and checks, in order:
//       DIR/finish exists             -> "exit <id> 0", exit 0 (the job is done);
//       DIR/hang.<id> exists          -> sleep until it is removed (a hung worker);
//       DIR/exit.<id> exists          -> exit with the code the file holds (a failing worker);
//       elastic/inc<N>/update is set  -> leave N as "interrupted" (what commit() does);
//       a peer of N that no longer exists (its pid, from fake/<id>/pid): leave N as "failed"
//                                        (what a broken connection does to a collective);
//       a peer of N whose beat did not move for FAKE_PEER_TIMEOUT s (default 3): leave N as
//                                        "failed" (what a collective's timeout does).
//   * Leaving: set elastic/inc<N>/ready/<id> = reason, then wait (bounded by
//     RINGFOLD_ELASTIC_TIMEOUT + 10 s) for elastic/current > N, polling elastic/failed: when it
//     is set, "failed <id> <reason>" and exit 3. Not in the new table: "left <id> inc=<M>", exit
//     0 (with DIR/linger.<id>: only once that file is gone, or a signal ends it). Else join the new incarnation with
//     the table's numbers.
// Any store error: message on stderr, exit 1.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/tcp_store.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void appendLine(const std::string& path, const std::string& line) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string l = line + "\n";
  ssize_t unused = write(fd, l.data(), l.size());
  (void)unused;
  close(fd);
}

struct Entry {
  std::string id, host;
  int rank = 0, size = 0, localRank = 0, localSize = 0, crossRank = 0, crossSize = 0;
};

std::vector<Entry> parseTable(const std::string& text) {
  std::vector<Entry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    Entry e;
    if (f >> e.id >> e.rank >> e.size >> e.localRank >> e.localSize >> e.crossRank >> e.crossSize >> e.host) {
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: elastic_worker DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    const std::string id = env("RINGFOLD_ELASTIC_WORKER_ID");
    if (env("RINGFOLD_ELASTIC") != "1" || id.empty()) {
      std::fprintf(stderr, "not started as an elastic worker\n");
      return 1;
    }
    ringfold::rendezvous::TcpStore store(env("RINGFOLD_STORE_ADDR"), std::stoi(env("RINGFOLD_STORE_PORT")),
                                         env("RINGFOLD_SECRET"), 10s);
    const double peerTimeout = env("FAKE_PEER_TIMEOUT").empty() ? 3.0 : std::stod(env("FAKE_PEER_TIMEOUT"));
    const double elasticTimeout = std::stod(env("RINGFOLD_ELASTIC_TIMEOUT"));
    int inc = std::stoi(env("RINGFOLD_INCARNATION"));
    Entry me;
    me.id = id;
    me.rank = std::stoi(env("RINGFOLD_RANK"));
    me.size = std::stoi(env("RINGFOLD_SIZE"));
    me.localRank = std::stoi(env("RINGFOLD_LOCAL_RANK"));
    me.localSize = std::stoi(env("RINGFOLD_LOCAL_SIZE"));
    me.crossRank = std::stoi(env("RINGFOLD_CROSS_RANK"));
    me.crossSize = std::stoi(env("RINGFOLD_CROSS_SIZE"));
    me.host = env("HOROVOD_HOSTNAME");
    appendLine(dir + "/pid." + id, std::to_string(getpid()));
    store.setString("fake/" + id + "/pid", std::to_string(getpid()));
    std::map<std::string, pid_t> pids;  // peers' pids (one pid namespace: the tests' hosts share it)
    const std::string events = dir + "/events";
    while (true) {
      appendLine(events, "join " + id + " inc=" + std::to_string(inc) + " rank=" + std::to_string(me.rank) +
                             " size=" + std::to_string(me.size) + " local=" + std::to_string(me.localRank) + "/" +
                             std::to_string(me.localSize) + " cross=" + std::to_string(me.crossRank) + "/" +
                             std::to_string(me.crossSize) + " host=" + me.host + " pid=" + std::to_string(getpid()));
      std::printf("worker %s joined incarnation %d as rank %d\n", id.c_str(), inc, me.rank);
      std::fflush(stdout);
      const std::string prefix = "elastic/inc" + std::to_string(inc) + "/";
      if (inc >= 3) {  // the launcher deleted incarnation inc-2's keys before publishing inc
        const bool kept = store.check({"elastic/inc" + std::to_string(inc - 2) + "/table"});
        appendLine(events, "old-keys " + id + " inc=" + std::to_string(inc) + (kept ? " kept" : " deleted"));
      }
      std::vector<Entry> peers = parseTable(store.getString(prefix + "table", 10s));
      std::map<std::string, std::pair<int64_t, Clock::time_point>> seen;
      for (const auto& p : peers) seen[p.id] = {-1, Clock::now()};
      std::string reason;
      while (reason.empty()) {
        store.add("fake/" + id + "/beat", 1);
        if (exists(dir + "/finish")) {
          appendLine(events, "exit " + id + " 0");
          return 0;
        }
        while (exists(dir + "/hang." + id)) std::this_thread::sleep_for(50ms);  // a hang, not a SIGSTOP
        if (exists(dir + "/exit." + id)) {
          std::ifstream f(dir + "/exit." + id);
          int code = 1;
          f >> code;
          appendLine(events, "exit " + id + " " + std::to_string(code));
          return code;
        }
        if (store.check({prefix + "update"})) reason = "interrupted";
        for (auto& [peer, last] : seen) {
          if (peer == id || !reason.empty()) continue;
          if (!pids.count(peer) && store.check({"fake/" + peer + "/pid"})) {
            pids[peer] = std::stoi(store.getString("fake/" + peer + "/pid", 1s));
          }
          if (pids.count(peer) && kill(pids[peer], 0) != 0 && errno == ESRCH) {
            reason = "failed";  // the peer is gone (what a broken connection tells a collective)
            break;
          }
          int64_t beat = store.add("fake/" + peer + "/beat", 0);
          if (beat != last.first) {
            last = {beat, Clock::now()};
          } else if (std::chrono::duration<double>(Clock::now() - last.second).count() > peerTimeout) {
            reason = "failed";
          }
        }
        if (reason.empty()) std::this_thread::sleep_for(50ms);
      }
      store.setString(prefix + "ready/" + id, reason);
      appendLine(events, "ready " + id + " inc=" + std::to_string(inc) + " " + reason);
      const auto deadline = Clock::now() + std::chrono::duration<double>(elasticTimeout + 10);
      int next = inc;
      while (next <= inc) {
        if (store.check({"elastic/failed"})) {
          std::string why = store.getString("elastic/failed", 1s);
          appendLine(events, "failed " + id + " " + why);
          std::fprintf(stderr, "elastic job failed: %s\n", why.c_str());
          return 3;
        }
        if (store.check({"elastic/current"})) next = std::stoi(store.getString("elastic/current", 1s));
        if (next > inc) break;
        if (Clock::now() > deadline) {
          std::fprintf(stderr, "no new incarnation after %g s\n", elasticTimeout + 10);
          return 4;
        }
        std::this_thread::sleep_for(20ms);
      }
      inc = next;
      bool found = false;
      for (const auto& e : parseTable(store.getString("elastic/inc" + std::to_string(inc) + "/table", 10s))) {
        if (e.id == id) {
          me = e;
          found = true;
        }
      }
      if (!found) {
        appendLine(events, "left " + id + " inc=" + std::to_string(inc));
        while (exists(dir + "/linger." + id)) std::this_thread::sleep_for(50ms);  // until signalled
        return 0;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_worker failed: %s\n", e.what());
    return 1;
  }
}
