// World: the state one simulation's ranks share (internal to simulator.cc and phase_run.cc):
// the clock and the event queue, the network, the messages in flight and the receives posted
// for them. A message pairs with a receive of the same (sender, receiver, phase, tag sub) in
// FIFO order whichever comes first, as the transport pairs equal tags in order; pairing does
// not depend on time, only arrival does.
//
// Events are (time, sequence) ordered: a rank's resumption, or a remote message's first byte
// reaching its receiving host. Until and Arrived are what a rank's task co_awaits.
#pragma once

#include <algorithm>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "bench/sim/match_table.h"
#include "bench/sim/network.h"
#include "bench/sim/simulator.h"
#include "bench/sim/task.h"

namespace ringfold::sim {

struct Message {
  int from = 0, to = 0;
  uint32_t phase = 0, sub = 0;
  size_t bytes = 0;
  double arrival = -1;   // fully arrived; -1 until known (a remote message before its ingress)
  double lastByte = 0;   // remote: its last byte reaches the receiving host
  int32_t recv = -1;     // the receive it pairs with
  int32_t next = -1;     // next in its (from, to, phase, sub) FIFO while unpaired
};

struct Recv {
  int from = 0;
  uint32_t sub = 0;
  size_t bytes = 0;
  int32_t msg = -1;
  int32_t next = -1;
  bool unexpected = false;  // its message had arrived before it was posted
  double cost = 0, floor = 0, post = 0;  // its waiter's Arrived
  std::coroutine_handle<> waiter;
};

struct RankState {
  int rank = 0;
  coll::PlanShape shape;
  uint32_t phase = 0, phases = 0;
  bool finished = false;
  double finish = 0;
  // What the rank waits for, for the deadlock report.
  int32_t waitRecv = -1;
  int waitLane = -1;
  size_t waitUnit = 0;
  MatchTable match;  // what is unpaired, keyed by (from, phase, sub)
  Task task;
};

class World final : public ReadyHook {
 public:
  World(const JobShape& job, const LinkModel& model, size_t elemSize, const SimOptions& options);
  ~World() override;

  const JobShape& job() const { return job_; }
  const LinkModel& model() const { return model_; }
  size_t elemSize() const { return elemSize_; }
  double now() const { return now_; }
  RankState& rank(int r) { return ranks_[r]; }
  SimResult& result() { return result_; }

  // Advances the clock to t at once when nothing else can happen before (true), or says that
  // the caller must wait for an event at t (false). t <= now: true.
  bool advanceTo(double t);
  void schedule(double t, std::coroutine_handle<> h);
  void ready(std::coroutine_handle<> h) override { ready_.push_back(h); }

  struct Until {
    World& w;
    double t;
    bool await_ready() { return w.advanceTo(t); }
    void await_suspend(std::coroutine_handle<> h) { w.schedule(t, h); }
    void await_resume() const noexcept {}
  };
  Until until(double t) { return Until{*this, t}; }

  // CPU work of `seconds` that may start at `start`; returns when it ends. On the rank's own CPU
  // (LinkModel::cpus == 0) that is start + seconds; with a pool of shared CPUs, the work runs on
  // the CPU that can take it earliest (filling a gap between work already booked there), so
  // ranks that want CPU at once queue for it. Booking is final: call once per piece of work.
  double cpu(double start, double seconds);
  // `cost` of CPU from `start`, then not before `floor`, then `post` of CPU: when it all ends.
  double handle(double start, double cost, double floor, double post) {
    return cpu(std::max(cpu(start, cost), floor), post);
  }

  // The receive `id` has its message, fully arrived; then `cost` seconds of this rank's CPU
  // have passed (handling it), and it is `floor` or later; then `post` more seconds. Resumes at
  // handle(max(now, arrival), cost, floor, post): a wait, the work after it and the next wait
  // of a rank that does nothing else in between, as one event (booked once: `at`).
  struct Arrived {
    World& w;
    int32_t id;
    double cost, floor, post;
    double at = -1;
    double wake(double arrival) {
      if (at < 0) at = w.handle(std::max(w.now_, arrival), cost, floor, post);
      return at;
    }
    bool await_ready();
    void await_suspend(std::coroutine_handle<> h);
    void await_resume() const noexcept {}
  };
  Arrived arrived(int32_t id, double cost, double floor = 0, double post = 0) {
    return Arrived{*this, id, cost, floor, post};
  }
  // Until `seconds` of this rank's CPU work from now have run.
  Until busy(double seconds) { return until(cpu(now_, seconds)); }

  // A rank posts a send of `bytes` now (returns when it completes: its last byte left), or a
  // receive (returns its id).
  double send(int from, int to, uint32_t phase, uint32_t sub, size_t bytes);
  int32_t postRecv(int to, int from, uint32_t phase, uint32_t sub, size_t bytes);
  const Recv& recv(int32_t id) const { return recvs_[id]; }
  // The receive's message has fully arrived by now (Request::test() would say it completed).
  bool received(int32_t id) const {
    const int32_t m = recvs_[id].msg;
    return m >= 0 && messages_[m].arrival >= 0 && messages_[m].arrival <= now_;
  }
  // The rank has waited for the receive and taken its message: both are released.
  void consume(int32_t id);

  // Runs every rank's task from time 0 until all finished, or no event is left (deadlock,
  // result().deadlock), or a rank failed (fail(): the first error wins; run() rethrows it).
  void run();
  void fail(std::exception_ptr error);

 private:
  struct Event {
    double t;
    uint64_t seq;
    void* resume;     // a task to resume, or null
    int32_t message;  // a remote message reaching its ingress
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  int32_t newMessage();
  int32_t newRecv();
  void pair(int32_t msg, int32_t recv);
  void delivered(int32_t msg);
  static uint64_t key(int from, uint32_t phase, uint32_t sub);
  std::string deadlockReport();

  JobShape job_;
  LinkModel model_;
  size_t elemSize_;
  SimOptions options_;
  Network net_;
  double now_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<std::coroutine_handle<>> ready_;
  std::vector<RankState> ranks_;
  std::vector<Message> messages_;
  std::vector<int32_t> freeMessages_;
  std::vector<Recv> recvs_;
  std::vector<int32_t> freeRecvs_;
  SimResult result_;
  // The shared CPUs (LinkModel::cpus): each one's booked work, start -> end, disjoint. Work
  // that ended before now is dropped as the clock passes it (nothing is booked in the past).
  std::vector<std::map<double, double>> cpus_;
  uint64_t consumed_ = 0;
  std::exception_ptr failure_;
  ReadyHook* previousHook_;
};

}  // namespace ringfold::sim
