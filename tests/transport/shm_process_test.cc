// The shm backend between forked processes, in jobs started like real ones (forked_job.h):
// collectives over memfd rings and cross-memory attach on one pretend host, and next to tcp_uring
// on two; a killed or frozen local peer named on every survivor; nothing left behind (no file in
// /dev/shm, no segment held by anyone) once every rank is killed; and a stranger (a process
// without the job secret) that reaches a rank's mesh socket while the mesh forms gets no
// descriptor, while the job still completes. Every wait is bounded.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "forked_job.h"
#include "rendezvous/tcp_store.h"
#include "tcp_test_util.h"
#include "transport/per_peer/device.h"
#include "transport/shm/device.h"
#include "transport/tcp_uring/mesh.h"

namespace ringfold::test {
namespace {

namespace tu = transport::tcp_uring;

// Same-host peers over shm; every rank on one pretend host unless `twoHosts` (A: 0-1, B: 2-3).
std::function<void(int)> shmEnvironment(bool twoHosts = false, std::vector<std::pair<const char*, const char*>> more = {}) {
  return [twoHosts, more](int) {
    setenv("RINGFOLD_LOCAL_TRANSPORT", "shm", 1);
    if (!twoHosts) setenv("RINGFOLD_TEST_HOST_ID", "S", 1);
    for (auto& [k, v] : more) setenv(k, v, 1);
  };
}

// The communicator's shm device (itself, or the per_peer composite's child), or null.
const transport::shm::Device* shmDevice(Communicator& comm) {
  if (auto* d = dynamic_cast<transport::shm::Device*>(&comm.device())) return d;
  if (auto* pp = dynamic_cast<transport::per_peer::Device*>(&comm.device())) {
    for (size_t i = 0; i < pp->childCount(); ++i) {
      if (pp->label(i) == "shm") return dynamic_cast<transport::shm::Device*>(&pp->child(i));
    }
  }
  return nullptr;
}

// Collectives at a small and a large size on every rank; each reports "ok <device name>; ...".
void collectivesOver(const std::function<void(int)>& environment, const std::string& name) {
  Job job(
      [](Communicator& comm, auto& say) {
        const int wrong = checkCollectives(comm) + checkCollectives(comm, 3 << 20);
        const auto* shm = shmDevice(comm);
        if (wrong != 0 || shm == nullptr) return say("wrong " + std::to_string(wrong) + " " + comm.device().name());
        const auto s = shm->stats();
        say(std::string("ok ") + comm.device().name() + "; " + std::to_string(s.eagerMessages) + " eager, " +
            std::to_string(s.cmaMessages) + " by cma (" + std::to_string(s.cmaBytes) + " bytes); " + shm->describe());
      },
      "20", environment);
  job.collect({0, 1, 2, 3}, 90s);
  for (int r = 0; r < kRanks; ++r) {
    const std::string& line = job.reports[r].line;
    std::cout << "rank " << r << ": " << line << "\n";
    EXPECT_EQ(line.rfind("ok " + name + "; ", 0), 0u) << "rank " << r << ": " << line;
    EXPECT_EQ(line.find("; 0 eager"), std::string::npos) << "rank " << r << ": nothing went through a ring";
    // Where the pair found cross-memory attach usable, large messages must have used it.
    if (line.find("cross-memory attach from") != std::string::npos) {
      EXPECT_EQ(line.find(", 0 by cma"), std::string::npos) << "rank " << r << ": " << line;
    }
  }
}

class ShmProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (uringUnavailable(why)) GTEST_SKIP() << "io_uring unavailable (the store and the mesh use it): " << why;
  }
};

TEST_F(ShmProcess, CollectivesOnOneHost) { collectivesOver(shmEnvironment(), "shm"); }

// Every peer through shm (RINGFOLD_TRANSPORT=shm), rings of 4 small slots (they wrap all the
// time) and cross-memory attach from 4 KiB.
TEST_F(ShmProcess, CollectivesSmallRingsAndCma) {
  collectivesOver(shmEnvironment(false, {{"RINGFOLD_TRANSPORT", "shm"}, {"RINGFOLD_SHM_SLOTS", "4"},
                                         {"RINGFOLD_SHM_SLOT_BYTES", "1K"}, {"RINGFOLD_SHM_CMA", "on"},
                                         {"RINGFOLD_SHM_CMA_MIN_BYTES", "4K"}}),
                  "shm");
}

TEST_F(ShmProcess, CollectivesOverShmAndTcp) { collectivesOver(shmEnvironment(true), "per_peer(shm+tcp_uring)"); }

// Every survivor names the victim: "the process of rank V (pid P) exited" (shm/peer.cc) or
// "... has exited" / "... is stopped" (liveness/monitor.cc), within victimScenario's bound.
TEST_F(ShmProcess, KilledPeerIsNamedRing) { victimScenario(1, false, AllreduceAlgorithm::kRing, shmEnvironment()); }
// The same while large messages go by cross-memory attach: a survivor may be reading the
// victim's memory when it dies.
TEST_F(ShmProcess, KilledPeerIsNamedRingCma) {
  victimScenario(1, false, AllreduceAlgorithm::kRing, shmEnvironment(false, {{"RINGFOLD_SHM_CMA", "on"}}));
}
TEST_F(ShmProcess, KilledPeerIsNamedDirect) { victimScenario(2, false, AllreduceAlgorithm::kDirect, shmEnvironment()); }
TEST_F(ShmProcess, FrozenPeerIsNamedRing) { victimScenario(2, true, AllreduceAlgorithm::kRing, shmEnvironment()); }
TEST_F(ShmProcess, FrozenPeerIsNamedDirect) { victimScenario(1, true, AllreduceAlgorithm::kDirect, shmEnvironment()); }

// ---- nothing left behind ------------------------------------------------------------------------

std::set<std::string> listDir(const std::string& path) {
  std::set<std::string> names;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

constexpr const char* kSegmentName = "/memfd:ringfold-shm-";

// The shm segments `pid` maps: inode -> name ("ringfold-shm-R-from-P"), from /proc/<pid>/maps.
std::map<uint64_t, std::string> mappedSegments(const std::string& pid) {
  std::map<uint64_t, std::string> out;
  std::ifstream in("/proc/" + pid + "/maps");
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(kSegmentName);
    if (at == std::string::npos) continue;
    std::istringstream f(line);
    std::string range, perms, offset, dev;
    uint64_t inode = 0;
    f >> range >> perms >> offset >> dev >> inode;
    out[inode] = line.substr(at + 7, line.find(' ', at) - at - 7);  // after "/memfd:"
  }
  return out;
}

// The inodes of the shm segments `pid` holds open: descriptors linking to "/memfd:ringfold-shm-".
std::set<uint64_t> heldSegments(const std::string& pid) {
  std::set<uint64_t> out;
  const std::string dir = "/proc/" + pid + "/fd/";
  for (const std::string& fd : listDir(dir)) {
    char link[256] = {};
    struct stat st {};
    if (readlink((dir + fd).c_str(), link, sizeof link - 1) > 0 && std::strstr(link, kSegmentName) == link &&
        stat((dir + fd).c_str(), &st) == 0) {
      out.insert(st.st_ino);
    }
  }
  return out;
}

// Every rank maps the six segments of its three pairs while the job runs; once every rank is
// SIGKILLed and reaped, no process of the machine (that this user can read) maps or holds any of
// them, this test holds no shm segment, and /dev/shm has no new file.
TEST_F(ShmProcess, NothingLeftBehindAfterEveryRankIsKilled) {
  const auto shmBefore = listDir("/dev/shm");
  std::optional<Job> job;
  job.emplace(
      [](Communicator& comm, auto& say) {
        const int wrong = checkCollectives(comm);
        say(wrong == 0 ? std::string("ready ") + comm.device().name() : "wrong " + std::to_string(wrong));
      },
      "20", shmEnvironment());
  job->collect({0, 1, 2, 3}, 60s);
  std::set<uint64_t> segments;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(job->reports[r].line, "ready shm") << "rank " << r;
    const std::string pid = std::to_string(job->pid(r));
    const auto mapped = mappedSegments(pid);
    std::set<std::string> names, want;
    for (auto& [inode, name] : mapped) {
      names.insert(name);
      segments.insert(inode);
    }
    for (int p = 0; p < kRanks; ++p) {
      if (p == r) continue;
      want.insert("ringfold-shm-" + std::to_string(r) + "-from-" + std::to_string(p));  // its inboxes
      want.insert("ringfold-shm-" + std::to_string(p) + "-from-" + std::to_string(r));  // its peers'
    }
    EXPECT_EQ(names, want) << "rank " << r << " (pid " << pid << ")";
    std::cout << "rank " << r << " maps " << mapped.size() << " shm segments and holds "
              << heldSegments(pid).size() << " segment descriptors\n";
  }
  EXPECT_EQ(segments.size(), 12u) << "4 ranks x 3 inboxes, each mapped by its writer too";
  job.reset();  // SIGKILLs every rank and reaps it
  std::vector<std::string> holders;
  for (const std::string& pid : listDir("/proc")) {
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    for (auto& [inode, name] : mappedSegments(pid)) {
      if (segments.count(inode)) holders.push_back("pid " + pid + " maps " + name);
    }
    for (uint64_t inode : heldSegments(pid)) {
      if (segments.count(inode)) holders.push_back("pid " + pid + " holds inode " + std::to_string(inode));
    }
  }
  EXPECT_TRUE(holders.empty()) << ::testing::PrintToString(holders);
  EXPECT_TRUE(mappedSegments("self").empty());
  EXPECT_TRUE(heldSegments("self").empty());
  std::vector<std::string> added;
  for (const std::string& name : listDir("/dev/shm")) {
    if (!shmBefore.count(name)) added.push_back(name);
  }
  EXPECT_TRUE(added.empty()) << "new in /dev/shm: " << ::testing::PrintToString(added);
}

// ---- a stranger at the mesh socket ----------------------------------------------------------------

// What a connection from the stranger got before it closed.
struct Outcome {
  size_t bytes = 0, fds = 0;
  bool closed = false;
};

// Connects to the abstract Unix socket `name`, sends a hello that claims rank `claim` of a
// four-rank job with a made-up token (the real one is in the store, which it cannot read).
int forgeHello(const std::string& name, int claim) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())) != 0) {
    ::close(s);
    return -1;
  }
  tu::wire::Hello h{tu::wire::kHelloMagic, claim, kRanks, 0, 1, 0, {}};
  std::memset(h.token, 'a', sizeof h.token);
  (void)!::send(s, &h, sizeof h, MSG_NOSIGNAL);
  return s;
}

// Reads from `s` until it closes or `deadline`, counting bytes and SCM_RIGHTS descriptors.
Outcome drain(int s, Clock::time_point deadline) {
  Outcome o;
  while (Clock::now() < deadline) {
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char data[256];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
    iovec iov{data, sizeof data};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(s, &m, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) o.fds += (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    }
    if (n <= 0) {
      o.closed = true;
      break;
    }
    o.bytes += static_cast<size_t>(n);
  }
  ::close(s);
  return o;
}

// Ranks 0-2 enter the shm mesh and listen while rank 3 is held stopped before it starts (the test
// publishes rank 3's host identity for it, the value it publishes itself later). The test reads
// the ranks' socket names from the store (it holds the secret, as a launcher does); a forked
// stranger, which does not, connects to each with a forged hello claiming a rank that listener is
// waiting for, and then rank 3 goes on. Each stranger connection must be dropped without one byte
// or descriptor, and the job must still complete its collectives over shm.
TEST_F(ShmProcess, StrangerAtTheMeshSocketGetsNoDescriptor) {
  const int port = freePort();
  Job job(
      [](Communicator& comm, auto& say) {
        const int wrong = checkCollectives(comm);
        say(wrong == 0 ? std::string("ok ") + comm.device().name() : "wrong " + std::to_string(wrong));
      },
      "20",
      [port, env = shmEnvironment()](int r) {
        env(r);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        if (r == 3) raise(SIGSTOP);
      });
  const auto deadline = Clock::now() + 10s;
  for (int st = 0; !(waitpid(job.pid(3), &st, WUNTRACED | WNOHANG) > 0 && WIFSTOPPED(st));) {
    ASSERT_LT(Clock::now(), deadline) << "rank 3 did not stop";
    std::this_thread::sleep_for(5ms);
  }
  rendezvous::TcpStore store("127.0.0.1", port, "forked-test-secret", 20s);  // setForkedRankEnvironment's
  store.setString("rf/host/3", "test:S");
  std::vector<std::string> names;
  for (int r = 0; r < 3; ++r) {
    std::istringstream in(store.getString("rf/shm/addr/" + std::to_string(r), 20s));
    std::string endpoint, token, host, unixName;
    in >> endpoint >> token >> host >> unixName;
    ASSERT_NE(unixName, "-") << "rank " << r << " has no Unix socket";
    names.push_back(unixName);
  }
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  const pid_t stranger = fork();
  ASSERT_GE(stranger, 0);
  if (stranger == 0) {
    ::close(pipeFds[0]);
    std::vector<int> sockets;
    for (int r = 0; r < 3; ++r) sockets.push_back(forgeHello(names[r], r == 0 ? 1 : 0));
    std::string report = "sent\n";
    (void)!write(pipeFds[1], report.data(), report.size());
    report.clear();
    const auto until = Clock::now() + 20s;
    for (int r = 0; r < 3; ++r) {
      const Outcome o = sockets[r] < 0 ? Outcome{} : drain(sockets[r], until);
      report += std::to_string(sockets[r] >= 0) + " " + std::to_string(o.bytes) + " " + std::to_string(o.fds) + " " +
                std::to_string(o.closed) + "\n";
    }
    (void)!write(pipeFds[1], report.data(), report.size());
    _exit(0);
  }
  ::close(pipeFds[1]);
  std::string got;
  auto readUntil = [&](size_t lines, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (static_cast<size_t>(std::count(got.begin(), got.end(), '\n')) < lines && Clock::now() < until) {
      pollfd p{pipeFds[0], POLLIN, 0};
      char buf[512];
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = read(pipeFds[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  };
  readUntil(1, 10s);
  kill(job.pid(3), SIGCONT);
  readUntil(4, 25s);
  kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
  ::close(pipeFds[0]);
  std::istringstream lines(got);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line) && line == "sent") << got;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(std::getline(lines, line)) << "the stranger did not report on rank " << r << ": " << got;
    int connected = 0, bytes = -1, fds = -1, closed = 0;
    std::istringstream(line) >> connected >> bytes >> fds >> closed;
    EXPECT_EQ(connected, 1) << "rank " << r << "'s listener refused the stranger: the test proves nothing";
    EXPECT_EQ(fds, 0) << "rank " << r << " passed descriptors to a stranger";
    EXPECT_EQ(bytes, 0) << "rank " << r << " answered a stranger";
    EXPECT_EQ(closed, 1) << "rank " << r << " kept the stranger's connection open";
  }
  job.collect({0, 1, 2, 3}, 60s);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(job.reports[r].line, "ok shm") << "rank " << r;
}

}  // namespace
}  // namespace ringfold::test
