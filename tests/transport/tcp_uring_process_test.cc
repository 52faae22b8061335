// tcp_uring with ranks as forked processes rendezvousing through a FileStore: a mesh that
// exchanges data, a peer killed with SIGKILL mid-transfer, a peer frozen with SIGSTOP, a
// connection reset or closed by a peer that lives on, and a link that goes down (the loopback
// interface of a network namespace of their own) while every process lives.
// Each child reports one line through a pipe, then (in the failure tests) lingers with its
// sockets open so that the parent, not a closing socket, decides when it ends.
#include <linux/filter.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <filesystem>
#include <sstream>

#include "rendezvous/file_store.h"
#include "tcp_test_util.h"
#include "transport/memory_region.h"
#include "transport/tcp_uring/kernel_view.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::test {
namespace {

using Clock = std::chrono::steady_clock;
using transport::PlainMemoryRegion;
using transport::Request;

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of its report pipe
  std::string report;
  bool reported = false;
  Clock::time_point reportedAt;
};

class Job {
 public:
  explicit Job(int size) : size_(size) {
    char tmpl[] = "/tmp/rf_tcp_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~Job() {
    for (Child& c : children_) {
      if (c.pid > 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
      }
      if (c.fd >= 0) close(c.fd);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // body(rank, device, peers, say) runs in a forked child; say(line) reports to the parent.
  // The child lingers `linger` after body returns, then exits.
  using Body = std::function<void(int, transport::Device&, std::vector<std::unique_ptr<transport::Connection>>&,
                                  const std::function<void(const std::string&)>&)>;
  void start(const Body& body, std::chrono::milliseconds linger) {
    for (int r = 0; r < size_; ++r) {
      int fds[2];
      ASSERT_EQ(pipe(fds), 0);
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(fds[0]);
        int out = fds[1];
        auto say = [out](const std::string& line) {
          std::string l = line + "\n";
          (void)!write(out, l.data(), l.size());
        };
        try {
          rendezvous::FileStore store(dir_);
          auto device = transport::createDevice(localBackend());
          auto peers = device->connectAll(store, "p", r, size_, 20s);
          body(r, *device, peers, say);
          std::this_thread::sleep_for(linger);
        } catch (const IoError& e) {
          say("IoError " + std::to_string(e.peerRank()) + " " + e.what());
          std::this_thread::sleep_for(linger);
        } catch (const std::exception& e) {
          say(std::string("Error ") + e.what());
          std::this_thread::sleep_for(linger);
        }
        _exit(0);
      }
      close(fds[1]);
      Child c;
      c.pid = pid;
      c.fd = fds[0];
      children_.push_back(c);
    }
  }

  // Reads one report line from each rank in `ranks`, until `timeout`.
  void collect(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r : ranks) {
        if (!children_[r].reported) {
          fds.push_back({children_[r].fd, POLLIN, 0});
          who.push_back(r);
        }
      }
      if (fds.empty() || Clock::now() >= deadline) return;
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (poll(fds.data(), fds.size(), std::max(left, 1)) <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Child& c = children_[who[i]];
        char buf[4096];
        ssize_t n = read(c.fd, buf, sizeof(buf));
        if (n > 0) c.report.append(buf, n);
        if (n <= 0 || c.report.find('\n') != std::string::npos) {
          c.reported = true;
          c.reportedAt = Clock::now();
          if (auto nl = c.report.find('\n'); nl != std::string::npos) c.report.resize(nl);
        }
      }
    }
  }

  Child& child(int r) { return children_[r]; }

 private:
  int size_;
  std::string dir_;
  std::vector<Child> children_;
};

TEST(TcpUringProcesses, MeshOfFourExchangesData) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "2"}};
  const int n = 4;
  Job job(n);
  job.start(
      [&](int rank, transport::Device&, auto& peers, auto& say) {
        const size_t sizes[] = {0, 1, 4097, (1u << 20) + 3};
        std::vector<std::vector<uint8_t>> out, in;
        std::vector<std::unique_ptr<PlainMemoryRegion>> regions;
        std::vector<std::unique_ptr<Request>> reqs;
        out.reserve(64);
        in.reserve(64);
        for (int p = 0; p < n; ++p) {
          if (p == rank) continue;
          for (size_t i = 0; i < 4; ++i) {
            out.push_back(patterned(rank * 100 + p * 10 + i, sizes[i]));
            in.emplace_back(sizes[i]);
            regions.push_back(std::make_unique<PlainMemoryRegion>(out.back().data(), sizes[i]));
            reqs.push_back(peers[p]->isend(*regions.back(), 0, sizes[i], i));
            regions.push_back(std::make_unique<PlainMemoryRegion>(in.back().data(), sizes[i]));
            reqs.push_back(peers[p]->irecv(*regions.back(), 0, sizes[i], i));
          }
        }
        for (auto& r : reqs) r->wait(20s);
        size_t k = 0;
        for (int p = 0; p < n; ++p) {
          if (p == rank) continue;
          for (size_t i = 0; i < 4; ++i, ++k) {
            if (firstWrong(in[k], p * 100 + rank * 10 + i, sizes[i]) != -1) {
              return say("wrong data from rank " + std::to_string(p) + " size " + std::to_string(sizes[i]));
            }
          }
        }
        say("ok");
      },
      0ms);
  job.collect({0, 1, 2, 3}, 60s);
  for (int r = 0; r < n; ++r) EXPECT_EQ(job.child(r).report, "ok") << "rank " << r;
}

// Ranks 0 and 1 exchange 4 MiB both ways with rank 2 in a loop (rank 2 is their only peer, so
// it is the one to blame); the parent then kills or freezes rank 2. `local`: the ranks are
// joined by TCP or by Unix sockets (RINGFOLD_LOCAL_TRANSPORT).
void victimScenario(bool freeze, const char* local) {
  EnvGuard env{{"RINGFOLD_TIMEOUT", "3"}, {"RINGFOLD_SOCKETS_PER_PEER", "2"}, {"RINGFOLD_LOCAL_TRANSPORT", local}};
  Job job(3);
  job.start(
      [](int rank, transport::Device& device, auto& peers, auto& say) {
        const size_t n = 4u << 20;
        std::vector<uint8_t> out(n, static_cast<uint8_t>(rank)), in(n);
        PlainMemoryRegion ro(out.data(), n), ri(in.data(), n);
        auto until = Clock::now() + 30s;
        try {
          for (int iter = 0; Clock::now() < until; ++iter) {
            std::vector<std::unique_ptr<Request>> reqs;
            for (int p = 0; p < 3; ++p) {
              if (p == rank || (rank != 2 && p != 2)) continue;
              reqs.push_back(peers[p]->irecv(ri, 0, n, iter));
              reqs.push_back(peers[p]->isend(ro, 0, n, iter));
            }
            for (auto& r : reqs) r->wait(3s);
            if (rank == 2 && iter == 3) say("running");
          }
        } catch (const IoError& e) {
          // What a communicator does next: abort, telling the others. With the peer dead or
          // frozen this must still return promptly.
          auto t0 = Clock::now();
          device.abort(transport::ErrorKind::kIo, e.what());
          long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
          say("IoError " + std::to_string(e.peerRank()) + " " + e.what() + " [abort took " + std::to_string(ms) +
              " ms]");
          return;
        }
        say("finished without noticing");
      },
      30s);
  job.collect({2}, 30s);
  ASSERT_EQ(job.child(2).report, "running");
  std::this_thread::sleep_for(100ms);  // mid-transfer
  auto hit = Clock::now();
  kill(job.child(2).pid, freeze ? SIGSTOP : SIGKILL);
  job.collect({0, 1}, 15s);
  for (int r = 0; r < 2; ++r) {
    const Child& c = job.child(r);
    ASSERT_TRUE(c.reported) << "rank " << r << " did not notice within 15 s";
    // Rank 2 is named: directly, or (peerRank() of the aborting rank) in the text of the other
    // survivor's abort, if that reached this rank first.
    bool direct = c.report.rfind("IoError 2 ", 0) == 0;
    bool relayed = c.report.rfind("IoError " + std::to_string(1 - r) + " ", 0) == 0;
    EXPECT_TRUE(direct || relayed) << "rank " << r << ": " << c.report;
    EXPECT_NE(c.report.find("rank 2"), std::string::npos) << c.report;
    if (freeze) {
      EXPECT_NE(c.report.find("timed out"), std::string::npos) << c.report;
      EXPECT_NE(c.report.find("the process of rank 2 (pid " + std::to_string(job.child(2).pid) + ") is stopped"),
                std::string::npos)
          << c.report;
    } else {
      EXPECT_NE(c.report.find("the process of rank 2 (pid " + std::to_string(job.child(2).pid) + ") exited"),
                std::string::npos)
          << c.report;
    }
    std::cout << "rank " << r << " after " << (freeze ? "SIGSTOP" : "SIGKILL") << ": " << c.report << "\n";
    double after = std::chrono::duration<double>(c.reportedAt - hit).count();
    EXPECT_LT(after, 3.0 + 3.0) << "rank " << r << " took " << after << " s (RINGFOLD_TIMEOUT=3)";
    auto at = c.report.find("[abort took ");
    ASSERT_NE(at, std::string::npos) << c.report;
    EXPECT_LT(std::atol(c.report.c_str() + at + 12), 3000) << c.report;
  }
  if (freeze) kill(job.child(2).pid, SIGKILL);  // reaped by ~Job
}

// In a child whose seccomp filter makes io_uring_setup fail with EPERM (as Docker's default
// profile does), creating the device explains why instead of failing obscurely.
TEST(TcpUringProcesses, IoUringForbiddenIsExplained) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    std::string out = "no filter";
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0) {
      try {
        transport::createDevice("tcp_uring");
        out = "created";
      } catch (const InvalidArgument& e) {
        out = std::string("InvalidArgument ") + e.what();
      } catch (const Error& e) {
        out = std::string("Error ") + e.what();
      }
    }
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[1024];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(got.rfind("Error ", 0), 0u) << got;
  EXPECT_NE(got.find("io_uring is forbidden"), std::string::npos) << got;
  EXPECT_NE(got.find("RINGFOLD_TRANSPORT=loopback"), std::string::npos) << got;
}

// ---- a connection that goes down while the peer's process lives on, or after it exited ----------

enum class Cut { kReset, kClose, kExit };
struct CutResult {
  std::string what;  // rank 0's error
  pid_t pid = 0;     // rank 1's
};

// Rank 1 is a forked process holding a plain mesh socket (connectMesh, no device); rank 0, here,
// has a device and waits for a message rank 1 never sends. Rank 1 then resets its connection
// (SO_LINGER 0) or closes it and lives on, or exits; rank 0's error must say which, naming rank
// 1's pid: only a process that is gone "exited".
CutResult cutScenario(Cut cut) {
  EnvGuard env{{"RINGFOLD_SOCKETS_PER_PEER", "1"}, {"RINGFOLD_TIMEOUT", "10"}};
  char tmpl[] = "/tmp/rf_cut_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  int go[2];
  if (pipe(go) != 0) return {"pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    alarm(60);
    try {
      rendezvous::FileStore store(dir);
      transport::tcp_uring::MeshOptions o;
      o.prefix = "c";
      o.rank = 1;
      o.size = 2;
      o.listenAddress = "127.0.0.1";
      o.timeout = 20s;
      auto mesh = transport::tcp_uring::connectMesh(store, o);
      char byte;
      (void)!read(go[0], &byte, 1);
      if (cut == Cut::kExit) _exit(0);
      int fd = mesh[0][0].release();
      if (cut == Cut::kReset) {
        linger l{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      }
      close(fd);
      pause();  // alive until killed
    } catch (...) {
    }
    _exit(1);
  }
  close(go[0]);
  std::string what = "no error";
  try {
    rendezvous::FileStore store(dir);
    auto device = transport::createDevice("tcp_uring");
    auto peers = device->connectAll(store, "c", 0, 2, 20s);
    std::vector<uint8_t> buf(8);
    PlainMemoryRegion region(buf.data(), buf.size());
    auto r = peers[1]->irecv(region, 0, 8, 1);
    (void)!write(go[1], "g", 1);
    r->wait(10s);
  } catch (const IoError& e) {
    what = e.what();
    if (e.peerRank() != 1) what += " [peerRank " + std::to_string(e.peerRank()) + "]";
  } catch (const std::exception& e) {
    what = std::string("unexpected: ") + e.what();
  }
  close(go[1]);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return {what, pid};
}

TEST(TcpUringProcesses, ResetWhileThePeerLivesIsNotCalledAnExit) {
  const auto [what, pid] = cutScenario(Cut::kReset);
  EXPECT_NE(what.find("connection to rank 1 reset"), std::string::npos) << what;
  EXPECT_NE(what.find("the process of rank 1 (pid " + std::to_string(pid) + ") is still running"), std::string::npos)
      << what;
  EXPECT_NE(what.find("cut the connection"), std::string::npos) << what;
  EXPECT_EQ(what.find("exited"), std::string::npos) << what;
}

TEST(TcpUringProcesses, CloseWhileThePeerLivesIsNotCalledAnExit) {
  const std::string what = cutScenario(Cut::kClose).what;
  EXPECT_NE(what.find("connection to rank 1 closed"), std::string::npos) << what;
  EXPECT_NE(what.find("is still running"), std::string::npos) << what;
  EXPECT_EQ(what.find("exited"), std::string::npos) << what;
}

// The exited process is not reaped yet (a zombie) when rank 0 sees the connection close.
TEST(TcpUringProcesses, PeerThatExitedIsCalledExited) {
  const auto [what, pid] = cutScenario(Cut::kExit);
  EXPECT_NE(what.find("connection to rank 1 closed"), std::string::npos) << what;
  EXPECT_NE(what.find("the process of rank 1 (pid " + std::to_string(pid) + ") exited"), std::string::npos) << what;
  EXPECT_EQ(what.find("still running"), std::string::npos) << what;
}

// ---- a link that goes down while both processes live ---------------------------------------------

bool setLoopbackUp(bool up) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq r{};
  std::strcpy(r.ifr_name, "lo");
  bool ok = s >= 0 && ioctl(s, SIOCGIFFLAGS, &r) == 0;
  r.ifr_flags = static_cast<short>(up ? (r.ifr_flags | IFF_UP) : (r.ifr_flags & ~IFF_UP));
  ok = ok && ioctl(s, SIOCSIFFLAGS, &r) == 0;
  if (s >= 0) close(s);
  return ok;
}

// The parent's side of a scenario forked into a namespace of its own: everything the child wrote
// into the pipe `fds` (its report), once it has exited.
std::string reportOf(pid_t child, int fds[2]) {
  close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(child, nullptr, 0);
  return got;
}

// Ranks in a network namespace of their own pass data around a ring over TCP on its loopback
// interface, which is then set down: every process lives, no packet passes. Each rank's error
// must say that the host it waits on stopped acknowledging (a network failure), not that a
// process exited; with 3 ranks, where no peer acknowledges anything, that its own link is down.
// Needs CAP_SYS_ADMIN for the namespace (skipped otherwise). Returns each rank's error line.
// `waitSeconds` longer than RINGFOLD_TIMEOUT (3 s) lets the kernel give up first (TCP_USER_TIMEOUT).
std::string linkDownScenario(int n, int waitSeconds = 3) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t island = fork();
  if (island == 0) {
    close(fds[0]);
    alarm(60);
    auto say = [&](const std::string& text) { (void)!write(fds[1], text.data(), text.size()); };
    if (unshare(CLONE_NEWNET) != 0 || !setLoopbackUp(true)) {
      say(std::string("SKIP no network namespace of its own here: ") + std::strerror(errno));
      _exit(0);
    }
    std::string out;
    {
      EnvGuard env{{"RINGFOLD_TIMEOUT", "3"}, {"RINGFOLD_SOCKETS_PER_PEER", "1"}};
      Job job(n);
      job.start(
          [n, waitSeconds](int rank, transport::Device&, auto& peers, auto& say) {
            const size_t bytes = 1u << 20;
            std::vector<uint8_t> out(bytes, static_cast<uint8_t>(rank)), in(bytes);
            PlainMemoryRegion ro(out.data(), bytes), ri(in.data(), bytes);
            for (int iter = 0; iter < 100000; ++iter) {
              auto r = peers[(rank + n - 1) % n]->irecv(ri, 0, bytes, iter);
              auto w = peers[(rank + 1) % n]->isend(ro, 0, bytes, iter);
              r->wait(std::chrono::seconds(waitSeconds));
              w->wait(std::chrono::seconds(waitSeconds));
            }
            say("finished without noticing");
          },
          20s);
      std::this_thread::sleep_for(2s);  // meshed and exchanging
      setLoopbackUp(false);
      std::vector<int> all;
      for (int r = 0; r < n; ++r) all.push_back(r);
      job.collect(all, std::chrono::seconds(20 + waitSeconds));
      for (int r = 0; r < n; ++r) out += "rank " + std::to_string(r) + ": " + job.child(r).report + "\n";
    }
    say(out);
    _exit(0);
  }
  return reportOf(island, fds);
}

// Checks each rank's line for `must` (and "exited" nowhere); returns how many lines there were.
int expectLinkDownLines(const std::string& got, const std::string& must) {
  std::cout << got;
  std::istringstream lines(got);
  int seen = 0;
  for (std::string line; std::getline(lines, line);) {
    ++seen;
    EXPECT_NE(line.find("IoError"), std::string::npos) << line;
    EXPECT_NE(line.find("acknowledg"), std::string::npos) << line;
    EXPECT_NE(line.find(must), std::string::npos) << line;
    EXPECT_EQ(line.find("exited"), std::string::npos) << line;
  }
  return seen;
}

TEST(TcpUringProcesses, LinkDownWhileBothLiveIsReportedAsANetworkFailure) {
  const std::string got = linkDownScenario(2);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got;
  EXPECT_EQ(expectLinkDownLines(got, "network"), 2) << got;
}

// The same when the kernel gives up on the connection (ETIMEDOUT) before the wait does. (The
// other rank may then see its end closed, in this one kernel: it too must not call that an exit.)
TEST(TcpUringProcesses, LinkDownSeenByTheKernelFirstIsReportedAsANetworkFailure) {
  const std::string got = linkDownScenario(2, 15);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got;
  std::cout << got;
  EXPECT_NE(got.find("(Connection timed out) (socket 0 of 1): rank "), std::string::npos) << got;
  EXPECT_NE(got.find("'s host stopped acknowledging this rank's data: the network between them failed, or that host "
                     "is down (the process of rank "),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("exited"), std::string::npos) << got;
}

TEST(TcpUringProcesses, RankThatNoPeerAcknowledgesSaysItsOwnLinkIsDown) {
  const std::string got = linkDownScenario(3);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got;
  EXPECT_EQ(expectLinkDownLines(got, "own network link is likely down"), 3) << got;
}

// The kernel's view of one TCP connection (kernel_view.h's tcpSilence), in a network namespace
// of its own: from 10.9.0.1 to 10.9.0.2, both on its loopback interface. `cut`: the route to
// 10.9.0.2 is then deleted, as a host whose link went down loses its routes, and a few bytes are
// written (the bytes never leave the host: nothing is in flight, the kernel retries them with
// window probes); else the sender fills the window of a receiver that does not read (a live,
// stopped peer: its kernel answers every probe with a zero window). Samples tcpSilence every
// 100 ms for up to `seconds` (a cut one until it says unacknowledged). Needs CAP_SYS_ADMIN and
// iproute2's `ip` (skipped otherwise). Returns "tracked=T unacknowledged=U unsent=S
// retransmits=R" of the last sample, U being whether any sample said so.
std::string kernelViewScenario(bool cut, int seconds) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t island = fork();
  if (island == 0) {
    close(fds[0]);
    alarm(30);
    auto say = [&](const std::string& text) {
      (void)!write(fds[1], text.data(), text.size());
      _exit(0);
    };
    if (unshare(CLONE_NEWNET) != 0) {
      say(std::string("SKIP no network namespace of its own here: ") + std::strerror(errno));
    }
    if (system("ip link set lo up && ip addr add 10.9.0.1/32 dev lo && ip addr add 10.9.0.2/32 dev lo") != 0) {
      say("SKIP iproute2's ip could not set the namespace up");
    }
    auto addr = [](const char* ip, uint16_t port) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      inet_pton(AF_INET, ip, &a.sin_addr);
      return a;
    };
    const int l = ::socket(AF_INET, SOCK_STREAM, 0), c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in la = addr("10.9.0.2", 0), ca = addr("10.9.0.1", 0);
    socklen_t len = sizeof(la);
    if (bind(l, reinterpret_cast<sockaddr*>(&la), len) != 0 || listen(l, 1) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&la), &len) != 0 ||
        bind(c, reinterpret_cast<sockaddr*>(&ca), sizeof(ca)) != 0 ||
        connect(c, reinterpret_cast<sockaddr*>(&la), sizeof(la)) != 0) {
      say(std::string("socket set-up failed: ") + std::strerror(errno));
    }
    const int a = accept(l, nullptr, nullptr);
    char byte = 1;
    if (a < 0 || write(c, &byte, 1) != 1 || read(a, &byte, 1) != 1) say("no exchange");
    if (cut) {
      if (system("ip route del local 10.9.0.2 table local") != 0) say("SKIP could not delete the route");
      const char bytes[100] = {};
      if (write(c, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) say("write failed");
    } else {
      static char block[65536];
      while (send(c, block, sizeof block, MSG_DONTWAIT) > 0) {
      }
    }
    transport::tcp_uring::TcpSilence t;
    bool ever = false;
    for (int i = 0; i < seconds * 10 && !(cut && ever); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t = transport::tcp_uring::tcpSilence(c);
      ever = ever || t.unacknowledged;
    }
    say("tracked=" + std::to_string(t.tracked) + " unacknowledged=" + std::to_string(ever) +
        " unsent=" + std::to_string(t.unsent) + " retransmits=" + std::to_string(t.retransmits));
  }
  return reportOf(island, fds);
}

// A rank cut off while it only waits to receive has nothing in flight: only its WAITING notices,
// queued. They count as unacknowledged (what lets it say its own link is down: the fault matrix's
// link-down cells; liveness_test holds the monitor's side).
TEST(TcpUringKernelView, BytesThatCannotLeaveThisHostAreUnacknowledged) {
  const std::string got = kernelViewScenario(true, 10);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got;
  ASSERT_EQ(got.rfind("tracked=1 unacknowledged=1 unsent=1 retransmits=", 0), 0u) << got;
  EXPECT_GE(std::stoi(got.substr(got.rfind('=') + 1)), 2) << got;
}

// A live peer that does not read (a stopped process) answers the window probes: never that.
TEST(TcpUringKernelView, ALivePeersClosedWindowIsNotUnacknowledged) {
  const std::string got = kernelViewScenario(false, 4);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got;
  EXPECT_EQ(got.rfind("tracked=1 unacknowledged=0", 0), 0u) << got;
}

TEST(TcpUringProcesses, KilledPeerIsNamedWithinTheTimeout) { victimScenario(false, "tcp"); }
TEST(TcpUringProcesses, FrozenPeerIsNamedWithinTheTimeout) { victimScenario(true, "tcp"); }
TEST(TcpUringProcesses, KilledPeerOverUnixSocketsIsNamedWithinTheTimeout) { victimScenario(false, "unix"); }
TEST(TcpUringProcesses, FrozenPeerOverUnixSocketsIsNamedWithinTheTimeout) { victimScenario(true, "unix"); }

}  // namespace
}  // namespace ringfold::test
