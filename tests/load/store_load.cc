// store_load: many clients at once against the rendezvous store server (TcpStoreServer, the
// store ringfoldrun and rank 0 host), ctest Load.StoreThousandClients.
//
//   load_store_load [--clients 1000] [--rounds 4] [--runs 1] [--bad 16] [--deadline-s 120]
//
// Contract
//   * The server runs in a child process forked before any thread exists, on 127.0.0.1 with a
//     fresh job secret (rendezvous::generateSecret), so its descriptors and threads are counted
//     alone, from /proc/<pid>/fd and /proc/<pid>/task.
//   * Each run: --clients threads wait at one gate, then connect at the same moment (one
//     TcpStore each: the HMAC handshake, --clients connections in the listen queue at once),
//     wait until every client is connected (the server then holds at least --clients more
//     descriptors: checked; no client closes before that count is taken), and do --rounds rounds of: set its own key, add to a shared counter,
//     get the key of the next client (a get that waits on another thread's set), check its key
//     and the next one's, wait() for the keys of the two after, each value compared byte for
//     byte. --bad more clients with a wrong secret connect meanwhile and must be refused with
//     "wrong secret". Then every client closes; the counter must be clients x rounds, and within
//     5 s the server must be back to its descriptors and threads before the run (no leak).
//   * Every wait is bounded (gets: 60 s; the whole program: --deadline-s, after which it prints
//     what it was doing and exits 1): a regression fails, never stalls.
//   * RLIMIT_NOFILE: the soft limit is raised in-process to what --clients needs (clients +
//     server ends + margin), up to the hard limit; below that it exits 77 (skipped) saying so.
//   * Prints per run: connect ms (gate to all connected), traffic ms (all connected to all
//     done), total ms; with --runs > 1 the medians. Exit 0 only if everything held.
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using ringfold::rendezvous::TcpStore;
using ringfold::rendezvous::TcpStoreServer;

int countEntries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

struct Counts {
  int fds, threads;
};

Counts serverCounts(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  return {countEntries(base + "/fd"), countEntries(base + "/task")};
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

// The gate every client thread waits at, so they connect at one moment.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> l(m_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(Clock::time_point deadline) {
    std::unique_lock<std::mutex> l(m_);
    return cv_.wait_until(l, deadline, [&] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

std::string valueOf(int run, int client, int round) {
  // Distinct lengths and bytes per client and round (up to ~300 bytes), including zero bytes.
  std::string v = "v" + std::to_string(run) + "." + std::to_string(client) + "." + std::to_string(round) + ":";
  v.append(static_cast<size_t>((client * 7 + round) % 257), static_cast<char>(client % 256));
  return v;
}

std::string keyOf(int run, int client, int round) {
  return "load/" + std::to_string(run) + "/" + std::to_string(client) + "/" + std::to_string(round);
}

std::atomic<const char*> gPhase{"starting"};

struct Options {
  int clients = 1000, rounds = 4, runs = 1, bad = 16, deadlineS = 120;
};

bool runOnce(const Options& o, int run, int port, const std::string& secret, pid_t server,
             double& connectMs, double& trafficMs) {
  const int n = o.clients;
  const Counts before = serverCounts(server);
  Gate gate;
  std::atomic<int> connected{0}, done{0}, failures{0}, refused{0};
  std::mutex errMutex;
  std::string firstError;
  auto note = [&](const std::string& e) {
    failures.fetch_add(1);
    std::lock_guard<std::mutex> l(errMutex);
    if (firstError.empty()) firstError = e;
  };
  Gate allConnected, counted;
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadlineS);
  std::vector<std::thread> threads;
  threads.reserve(n + o.bad);
  for (int c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      try {
        if (!gate.wait(deadline)) return note("gate never opened");
        auto s = std::make_unique<TcpStore>("127.0.0.1", port, secret, 60s);
        if (connected.fetch_add(1) + 1 == n) allConnected.open();
        if (!allConnected.wait(deadline)) return note("not every client connected in time");
        for (int r = 0; r < o.rounds; ++r) {
          const std::string mine = keyOf(run, c, r), next = keyOf(run, (c + 1) % n, r);
          const std::string v = valueOf(run, c, r);
          s->set(mine, std::vector<uint8_t>(v.begin(), v.end()));
          s->add("load/" + std::to_string(run) + "/counter", 1);
          if (s->getString(next, 60s) != valueOf(run, (c + 1) % n, r)) {
            return note("client " + std::to_string(c) + " read a wrong value of " + next);
          }
          if (!s->check({mine, next})) return note("check of " + mine + ", " + next + " said missing");
          s->wait({keyOf(run, (c + 2) % n, r), keyOf(run, (c + 3) % n, r)}, 60s);
          if (s->getString(keyOf(run, (c + 3) % n, r), 1s) != valueOf(run, (c + 3) % n, r)) {
            return note("client " + std::to_string(c) + " read a wrong value after wait()");
          }
        }
        done.fetch_add(1);
        // Hold the connection until the server's descriptors are counted: with 1,000 threads on
        // two cores, the counting thread may run only after the quickest clients are done.
        if (!counted.wait(deadline)) return note("the server's descriptors were never counted");
      } catch (const std::exception& e) {
        note("client " + std::to_string(c) + ": " + e.what());
      }
    });
  }
  for (int b = 0; b < o.bad; ++b) {
    threads.emplace_back([&] {
      if (!gate.wait(deadline)) return;
      try {
        TcpStore s("127.0.0.1", port, secret + "-wrong", 60s);
        note("a client with a wrong secret was accepted");
      } catch (const std::exception& e) {
        if (std::strstr(e.what(), "wrong secret") != nullptr) {
          refused.fetch_add(1);
        } else {
          note(std::string("wrong-secret client: unexpected error: ") + e.what());
        }
      }
    });
  }
  gPhase = "connecting";
  const auto t0 = Clock::now();
  gate.open();
  bool ok = allConnected.wait(deadline);
  const auto t1 = Clock::now();
  Counts during = serverCounts(server);
  counted.open();
  gPhase = "traffic";
  for (auto& t : threads) t.join();
  const auto t2 = Clock::now();
  connectMs = ms(t1 - t0);
  trafficMs = ms(t2 - t1);
  gPhase = "checking";
  if (!ok) note("only " + std::to_string(connected.load()) + " of " + std::to_string(n) + " clients connected");
  if (ok && during.fds < before.fds + n) {
    note("with every client connected the server held " + std::to_string(during.fds) + " descriptors, " +
         std::to_string(before.fds) + " before: fewer than one per client");
  }
  if (done.load() != n) note(std::to_string(n - done.load()) + " clients did not finish");
  if (refused.load() != o.bad) note(std::to_string(refused.load()) + " of " + std::to_string(o.bad) + " wrong-secret clients refused");
  try {
    TcpStore check("127.0.0.1", port, secret, 10s);
    const std::string total = check.getString("load/" + std::to_string(run) + "/counter", 10s);
    if (total != std::to_string(n * o.rounds)) note("counter " + total + ", want " + std::to_string(n * o.rounds));
  } catch (const std::exception& e) {
    note(std::string("final check: ") + e.what());
  }
  // No leak: the server closes each connection when it reads EOF; give it 5 s.
  Counts after = serverCounts(server);
  for (auto until = Clock::now() + 5s;
       (after.fds != before.fds || after.threads != before.threads) && Clock::now() < until;
       after = serverCounts(server)) {
    std::this_thread::sleep_for(20ms);
  }
  if (after.fds != before.fds || after.threads != before.threads) {
    note("server leaked: descriptors " + std::to_string(before.fds) + " -> " + std::to_string(after.fds) +
         ", threads " + std::to_string(before.threads) + " -> " + std::to_string(after.threads));
  }
  std::printf("run %d: %d clients x %d rounds, %d wrong-secret refused: connect %.0f ms, traffic %.0f ms, "
              "total %.0f ms; server fds %d before, %d with all connected, %d after; threads %d -> %d\n",
              run, n, o.rounds, refused.load(), connectMs, trafficMs, connectMs + trafficMs, before.fds,
              during.fds, after.fds, before.threads, after.threads);
  if (failures.load() != 0) {
    std::printf("run %d FAILED (%d failures), first: %s\n", run, failures.load(), firstError.c_str());
  }
  std::fflush(stdout);
  return failures.load() == 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--clients") o.clients = v;
    else if (a == "--rounds") o.rounds = v;
    else if (a == "--runs") o.runs = v;
    else if (a == "--bad") o.bad = v;
    else if (a == "--deadline-s") o.deadlineS = v;
    else {
      std::fprintf(stderr, "usage: %s [--clients N] [--rounds R] [--runs K] [--bad B] [--deadline-s S]\n", argv[0]);
      return 2;
    }
  }
  if (o.clients < 4 || o.rounds < 1 || o.runs < 1 || o.bad < 0) {
    std::fprintf(stderr, "store_load: --clients >= 4, --rounds >= 1, --runs >= 1\n");
    return 2;
  }
  // Each client holds one descriptor here and one in the server (which inherits this limit).
  const rlim_t need = static_cast<rlim_t>(o.clients + o.bad) + 256;
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < need) {
    const rlim_t old = lim.rlim_cur;
    lim.rlim_cur = std::min(lim.rlim_max, need);
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur != old) {
      std::printf("store_load: raised RLIMIT_NOFILE from %llu to %llu\n", static_cast<unsigned long long>(old),
                  static_cast<unsigned long long>(lim.rlim_cur));
    }
  }
  if (lim.rlim_cur < need) {  // ctest: SKIP_RETURN_CODE 77
    std::printf("store_load: SKIPPED: RLIMIT_NOFILE hard limit %llu < %llu needed for %d clients\n",
                static_cast<unsigned long long>(lim.rlim_max), static_cast<unsigned long long>(need), o.clients);
    return 77;
  }

  const std::string secret = ringfold::rendezvous::generateSecret();
  int toChild[2], fromChild[2];
  if (::pipe(toChild) != 0 || ::pipe(fromChild) != 0) return 1;
  const pid_t server = ::fork();
  if (server < 0) return 1;
  if (server == 0) {
    ::close(toChild[1]);
    ::close(fromChild[0]);
    int rc = 0;
    try {
      TcpStoreServer s("127.0.0.1", 0, secret);
      int port = s.port();
      if (::write(fromChild[1], &port, sizeof port) != sizeof port) rc = 3;
      ::close(fromChild[1]);
      char c;
      while (::read(toChild[0], &c, 1) > 0) {
      }  // until the parent closes the pipe (or dies)
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store_load: server: %s\n", e.what());
      rc = 4;
    }
    ::_exit(rc);
  }
  ::close(toChild[0]);
  ::close(fromChild[1]);
  int port = 0;
  if (::read(fromChild[0], &port, sizeof port) != sizeof port) {
    std::fprintf(stderr, "store_load: the server did not start\n");
    return 1;
  }
  // Until EOF: the child has closed its end, so its descriptor count is the server's alone.
  char drain;
  while (::read(fromChild[0], &drain, 1) > 0) {
  }
  ::close(fromChild[0]);

  // The watchdog: a run that stalls fails the program instead of hanging it.
  std::thread([&o, server] {
    std::this_thread::sleep_for(std::chrono::seconds(o.deadlineS) * o.runs + 30s);
    std::printf("store_load: FAILED: still %s after %d s\n", gPhase.load(), o.deadlineS * o.runs + 30);
    std::fflush(stdout);
    ::kill(server, SIGKILL);
    ::_exit(1);
  }).detach();

  bool ok = true;
  std::vector<double> connects, traffics, totals;
  for (int run = 0; run < o.runs; ++run) {
    double c = 0, t = 0;
    ok = runOnce(o, run, port, secret, server, c, t) && ok;
    connects.push_back(c);
    traffics.push_back(t);
    totals.push_back(c + t);
  }
  if (o.runs > 1) {
    std::printf("median of %d runs: connect %.0f ms, traffic %.0f ms, total %.0f ms (%d clients x %d rounds)\n",
                o.runs, median(connects), median(traffics), median(totals), o.clients, o.rounds);
  }
  ::close(toChild[1]);  // the server exits
  int status = 0;
  ::waitpid(server, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("store_load: the server process ended with status %d\n", status);
    ok = false;
  }
  std::printf("store_load %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
