// Two forked ranks driving one Fabric each (fabric.h), for the fabric-level tests of the ofi and
// verbs fabrics: a channel between them (a socketpair carrying length-prefixed messages, for
// addresses and keys), the completions each polled, and a runner that waits for both within a
// deadline (SIGKILL past it) and collects what each reported. Children check with CHILD_CHECK;
// a child that throws ChildSkip exits kSkip (the parent then skips the test with its reason).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "transport/rdma/fabric.h"

namespace ringfold::transport::rdma::pairtest {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Type = Completion::Type;

constexpr auto kWait = 10s;          // any single wait inside a child
constexpr auto kTestDeadline = 30s;  // the parent kills both children after this
constexpr int kSkip = 77;

struct ChildFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ChildSkip : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define CHILD_CHECK(cond, ...)                                                                                \
  do {                                                                                                        \
    if (!(cond))                                                                                              \
      throw ChildFailure(detail::concat(__FILE__, ":", __LINE__, ": " #cond " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

inline std::string show(const Completion& c) {
  const char* t = c.type == Type::kWriteDone ? "kWriteDone" : c.type == Type::kImmediate ? "kImmediate" : "kError";
  return detail::concat(t, "{peer ", c.peer, ", imm ", c.imm, ", context ", c.context, ", '", c.error, "'}");
}

// One rank of a two-rank test: the fabric, the channel to the other rank, what poll() returned,
// and notes it reports to the parent.
struct Rank {
  int rank = 0;
  int peer = 1;
  int channel = -1;
  std::unique_ptr<Fabric> fabric;
  std::deque<Completion> got;
  std::vector<std::string> notes;

  void pump() {
    Completion c[16];
    const int n = fabric ? fabric->poll(c, 16) : 0;
    for (int i = 0; i < n; ++i) got.push_back(std::move(c[i]));
  }

  void send(const std::string& text) {
    uint32_t len = static_cast<uint32_t>(text.size());
    std::string frame(reinterpret_cast<const char*>(&len), 4);
    frame += text;
    CHILD_CHECK(::write(channel, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()), strerror(errno));
  }

  // The next message from the other rank; keeps polling the fabric (its progress) meanwhile.
  // `wait`: longer when the other rank may itself spend kWait before it sends.
  std::string recv(std::chrono::milliseconds wait = kWait) {
    std::string buf;
    const auto until = Clock::now() + wait;
    auto readSome = [&](size_t want) {
      while (buf.size() < want) {
        pump();
        pollfd p{channel, POLLIN, 0};
        CHILD_CHECK(Clock::now() < until, "no message from rank ", peer, " within the wait");
        if (::poll(&p, 1, fabric ? 1 : 100) <= 0) continue;
        char tmp[4096];
        ssize_t n = ::read(channel, tmp, std::min(sizeof(tmp), want - buf.size()));
        CHILD_CHECK(n > 0, "rank ", peer, " closed the channel");
        buf.append(tmp, static_cast<size_t>(n));
      }
    };
    readSome(4);
    uint32_t len;
    std::memcpy(&len, buf.data(), 4);
    buf.clear();
    readSome(len);
    return buf;
  }

  // Both ranks meet; the fabric keeps progressing while they wait.
  void barrier() {
    send("barrier");
    CHILD_CHECK(recv() == "barrier");
  }

  // Polls until a completion matching `want` arrives (removing and returning it).
  Completion await(const std::function<bool(const Completion&)>& want, const char* what) {
    const auto until = Clock::now() + kWait;
    for (;;) {
      for (auto it = got.begin(); it != got.end(); ++it) {
        if (want(*it)) {
          Completion c = std::move(*it);
          got.erase(it);
          return c;
        }
      }
      CHILD_CHECK(Clock::now() < until, "no ", what, " within the wait; seen: ", seen());
      pump();
    }
  }
  // The next immediate (or error).
  Completion awaitImm() {
    return await([](const Completion& c) { return c.type != Type::kWriteDone; }, "immediate");
  }
  // The immediate `imm` (or an error).
  Completion awaitImm(uint32_t imm) {
    return await(
        [&](const Completion& c) { return c.type != Type::kWriteDone && (c.type == Type::kError || c.imm == imm); },
        "immediate");
  }
  Completion awaitDone(uint64_t context) {
    return await([&](const Completion& c) { return c.type != Type::kImmediate && c.context == context; },
                 "write completion");
  }
  Completion awaitError() {
    return await([](const Completion& c) { return c.type == Type::kError; }, "error");
  }
  std::string seen() const {
    std::string s;
    for (const auto& c : got) s += show(c) + " ";
    return s;
  }

  // Posts, polling while the fabric answers -EAGAIN (the first write may also connect).
  void post(const std::function<int()>& fn) {
    const auto until = Clock::now() + kWait;
    for (;;) {
      int rc = fn();
      if (rc == 0) return;
      CHILD_CHECK(rc == -EAGAIN, "post returned ", rc, " (", strerror(-rc), ")");
      CHILD_CHECK(Clock::now() < until, "post kept returning -EAGAIN");
      pump();
    }
  }
};

using Body = std::function<void(Rank&)>;
using Environment = std::vector<std::pair<const char*, const char*>>;

struct Outcome {
  int status[2] = {0, 0};
  std::string report[2];  // an error's text, a skip's reason, or the notes
  bool timedOut = false;
};

[[noreturn]] inline void runChild(int rank, int channel, int reportFd, const Body& body) {
  int code = 0;
  std::string text;
  {
    Rank me;
    me.rank = rank;
    me.peer = 1 - rank;
    me.channel = channel;
    try {
      body(me);
      if (me.fabric) me.fabric->close();
      for (const auto& n : me.notes) text += n + "; ";
    } catch (const ChildSkip& e) {
      code = kSkip;
      text = e.what();
    } catch (const std::exception& e) {
      code = 1;
      text = e.what();
    }
  }
  (void)!::write(reportFd, text.data(), text.size());
  _exit(code);
}

// Forks rank 0 and rank 1 with `env` set, waits for both (SIGKILL past the deadline), collects
// their reports.
inline Outcome runPair(const Environment& env, const Body& body0, const Body& body1) {
  Outcome out;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
  pid_t pids[2];
  int reports[2];
  const Body* bodies[2] = {&body0, &body1};
  for (int r = 0; r < 2; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      ::close(fds[0]);
      ::close(sv[1 - r]);
      for (auto& [k, v] : env) setenv(k, v, 1);
      runChild(r, sv[r], fds[1], *bodies[r]);
    }
    ::close(fds[1]);
    pids[r] = pid;
    reports[r] = fds[0];
  }
  ::close(sv[0]);
  ::close(sv[1]);
  const auto until = Clock::now() + kTestDeadline;
  bool done[2] = {false, false};
  while (!(done[0] && done[1])) {
    for (int r = 0; r < 2; ++r) {
      if (!done[r] && waitpid(pids[r], &out.status[r], WNOHANG) == pids[r]) done[r] = true;
    }
    if (Clock::now() > until) {
      out.timedOut = true;
      for (int r = 0; r < 2; ++r) {
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &out.status[r], 0);
          done[r] = true;
        }
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  for (int r = 0; r < 2; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(reports[r], buf, sizeof(buf))) > 0) out.report[r].append(buf, static_cast<size_t>(n));
    ::close(reports[r]);
  }
  return out;
}
inline Outcome runPair(const Body& body0, const Body& body1) { return runPair({}, body0, body1); }

}  // namespace ringfold::transport::rdma::pairtest
