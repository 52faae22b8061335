#include "bench/sim/simulator.h"

#include <algorithm>
#include <sstream>

#include "bench/sim/phase_run.h"
#include "bench/sim/world.h"
#include "common/error.h"

namespace ringfold::sim {

// ---- job shape ----

coll::PlanShape JobShape::shapeOf(int rank) const {
  coll::PlanShape s;
  s.rank = rank;
  s.size = ranks;
  const int host = rank / perHost;
  s.localRank = rank % perHost;
  s.localSize = std::min(perHost, ranks - host * perHost);
  s.crossRank = host;
  s.crossSize = hosts();
  return s;
}

int JobShape::jobRank(coll::Group group, const coll::PlanShape& s, int peer) const {
  switch (group) {
    case coll::Group::kAll: return peer;
    case coll::Group::kLocal: return s.crossRank * perHost + peer;
    case coll::Group::kCross: return peer * perHost + s.localRank;
  }
  return peer;
}

// ---- world ----

World::World(const JobShape& job, const LinkModel& model, size_t elemSize, const SimOptions& options)
    : job_(job), model_(model), elemSize_(elemSize), options_(options), net_(model, job.ranks, job.perHost),
      ranks_(job.ranks) {
  for (int r = 0; r < job.ranks; ++r) {
    ranks_[r].rank = r;
    ranks_[r].shape = job.shapeOf(r);
  }
  result_.finish.assign(job.ranks, 0.0);
  if (options.recordSends) result_.sends.resize(job.ranks);
  cpus_.resize(static_cast<size_t>(model.cpus));
  previousHook_ = setReadyHook(this);
}

World::~World() {
  setReadyHook(previousHook_);
  // Frames of unfinished ranks (a deadlock or a failure) are destroyed with their Tasks.
  ranks_.clear();
}

uint64_t World::key(int from, uint32_t phase, uint32_t sub) {
  // Never 0 (MatchTable's empty key): from + 1 >= 1; bit 63 clear (ranks < 2^19).
  return (static_cast<uint64_t>(from + 1) << 44) | (static_cast<uint64_t>(phase) << 16) | (sub & 0xFFFF);
}

bool World::advanceTo(double t) {
  if (t <= now_) return true;
  if (!ready_.empty() || (!events_.empty() && events_.top().t <= t)) return false;
  now_ = t;
  return true;
}

double World::cpu(double start, double seconds) {
  if (cpus_.empty() || seconds <= 0) return start + seconds;
  double best = -1;
  size_t at = 0;
  for (size_t c = 0; c < cpus_.size(); ++c) {
    std::map<double, double>& booked = cpus_[c];
    while (!booked.empty() && booked.begin()->second <= now_) booked.erase(booked.begin());
    // The first gap from `start` that holds the work: after the booking that covers start (if
    // any), then after each booking whose gap before the next is too short.
    double t = start;
    auto it = booked.upper_bound(start);
    if (it != booked.begin() && std::prev(it)->second > t) t = std::prev(it)->second;
    for (; it != booked.end() && it->first < t + seconds; ++it) t = std::max(t, it->second);
    if (best < 0 || t < best) {
      best = t;
      at = c;
    }
  }
  cpus_[at].emplace(best, best + seconds);
  return best + seconds;
}

void World::schedule(double t, std::coroutine_handle<> h) {
  events_.push(Event{std::max(t, now_), seq_++, h.address(), -1});
}

int32_t World::newMessage() {
  if (!freeMessages_.empty()) {
    const int32_t id = freeMessages_.back();
    freeMessages_.pop_back();
    messages_[id] = Message{};
    return id;
  }
  RF_ENFORCE(messages_.size() < INT32_MAX, "too many messages in flight");
  messages_.emplace_back();
  return static_cast<int32_t>(messages_.size() - 1);
}

int32_t World::newRecv() {
  if (!freeRecvs_.empty()) {
    const int32_t id = freeRecvs_.back();
    freeRecvs_.pop_back();
    recvs_[id] = Recv{};
    return id;
  }
  RF_ENFORCE(recvs_.size() < INT32_MAX, "too many receives posted");
  recvs_.emplace_back();
  return static_cast<int32_t>(recvs_.size() - 1);
}

void World::pair(int32_t m, int32_t r) {
  Message& msg = messages_[m];
  Recv& rv = recvs_[r];
  if (msg.bytes != rv.bytes) {
    RF_THROW(Error, "rank ", msg.to, " posted a receive of ", rv.bytes, " bytes from rank ", msg.from, " (phase ",
             msg.phase, ", sub ", msg.sub, ") that pairs with a message of ", msg.bytes,
             " bytes: the transport would fail it with a check mismatch");
  }
  msg.recv = r;
  rv.msg = m;
}

// The message's arrival time is known: wake its receiver if it waits (after its CPU cost).
void World::delivered(int32_t m) {
  const Message& msg = messages_[m];
  if (msg.recv < 0) return;
  Recv& rv = recvs_[msg.recv];
  if (rv.waiter) {
    schedule(handle(msg.arrival, rv.cost, rv.floor, rv.post), rv.waiter);
    rv.waiter = {};
  }
}

double World::send(int from, int to, uint32_t phase, uint32_t sub, size_t bytes) {
  RF_ENFORCE(to >= 0 && to < job_.ranks && to != from, "rank ", from, " sends to rank ", to);
  const int32_t m = newMessage();
  {
    Message& msg = messages_[m];
    msg.from = from;
    msg.to = to;
    msg.phase = phase;
    msg.sub = sub;
    msg.bytes = bytes;
  }
  ++result_.messages;
  if (options_.recordSends) result_.sends[from].push_back(SentMessage{phase, to, sub, bytes});
  if (options_.onSend) options_.onSend(now_, from, SentMessage{phase, to, sub, bytes});
  MatchTable& table = ranks_[to].match;
  const uint64_t k = key(from, phase, sub);
  MatchTable::Entry* e = table.find(k);
  if (e != nullptr && !MatchTable::messages(*e)) {  // a receive waits: pair with the oldest
    const int32_t r = e->head;
    e->head = recvs_[r].next;
    if (e->head < 0) table.erase(e);
    pair(m, r);
  } else {
    MatchTable::Entry& f = e != nullptr ? *e : table.insert(k);
    MatchTable::setMessages(f, true);
    if (f.tail >= 0) messages_[f.tail].next = m;
    if (f.head < 0) f.head = m;
    f.tail = m;
  }
  const Network::Posted p = net_.post(now_, from, to, bytes);
  Message& msg = messages_[m];
  if (p.arrival >= 0) {
    msg.arrival = p.arrival;
    delivered(m);
  } else {
    msg.lastByte = p.lastByte;
    events_.push(Event{p.firstByte, seq_++, nullptr, m});
  }
  return p.sendDone;
}

int32_t World::postRecv(int to, int from, uint32_t phase, uint32_t sub, size_t bytes) {
  RF_ENFORCE(from >= 0 && from < job_.ranks && to != from, "rank ", to, " receives from rank ", from);
  const int32_t r = newRecv();
  {
    Recv& rv = recvs_[r];
    rv.from = from;
    rv.sub = sub;
    rv.bytes = bytes;
  }
  MatchTable& table = ranks_[to].match;
  const uint64_t k = key(from, phase, sub);
  MatchTable::Entry* e = table.find(k);
  if (e != nullptr && MatchTable::messages(*e)) {  // a message came first: pair with the oldest
    const int32_t m = e->head;
    e->head = messages_[m].next;
    if (e->head < 0) table.erase(e);
    pair(m, r);
    const double arrival = messages_[m].arrival;
    if (arrival >= 0 && arrival < now_) {
      recvs_[r].unexpected = true;
      ++result_.unexpected;
    }
  } else {
    MatchTable::Entry& f = e != nullptr ? *e : table.insert(k);
    if (f.tail >= 0) recvs_[f.tail].next = r;
    if (f.head < 0) f.head = r;
    f.tail = r;
  }
  return r;
}

void World::consume(int32_t r) {
  const int32_t m = recvs_[r].msg;
  ++consumed_;
  freeRecvs_.push_back(r);
  if (m >= 0) freeMessages_.push_back(m);
}

// Handling starts when the message has arrived and the rank waits for it, whichever is later.
bool World::Arrived::await_ready() {
  const int32_t m = w.recvs_[id].msg;
  if (m < 0 || w.messages_[m].arrival < 0) return false;
  return w.advanceTo(wake(w.messages_[m].arrival));
}

void World::Arrived::await_suspend(std::coroutine_handle<> h) {
  const int32_t m = w.recvs_[id].msg;
  if (m >= 0 && w.messages_[m].arrival >= 0) {
    w.schedule(wake(w.messages_[m].arrival), h);
  } else {
    w.recvs_[id].cost = cost;
    w.recvs_[id].floor = floor;
    w.recvs_[id].post = post;
    w.recvs_[id].waiter = h;  // delivered() schedules it
  }
}

void World::fail(std::exception_ptr error) {
  if (!failure_) failure_ = error;
}

void World::run() {
  for (RankState& rk : ranks_) schedule(0.0, rk.task.handle());
  while (!failure_) {
    if (!ready_.empty()) {
      const std::coroutine_handle<> h = ready_.back();
      ready_.pop_back();
      h.resume();
      continue;
    }
    if (events_.empty()) break;
    const Event e = events_.top();
    events_.pop();
    ++result_.events;
    // The next event's frame is cold (thousands of ranks run in turn): fetch it while this one runs.
    if (!events_.empty() && events_.top().resume != nullptr) {
      const char* next = static_cast<const char*>(events_.top().resume);
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
    }
    now_ = e.t;
    if (e.resume != nullptr) {
      std::coroutine_handle<>::from_address(e.resume).resume();
    } else {
      Message& msg = messages_[e.message];
      msg.arrival = net_.ingress(now_, msg.to, msg.bytes, msg.lastByte);
      delivered(e.message);
    }
  }
  if (failure_) std::rethrow_exception(failure_);
  double last = 0;
  for (const RankState& rk : ranks_) {
    if (!rk.finished) {
      result_.deadlock = true;
      continue;
    }
    result_.finish[rk.rank] = rk.finish;
    last = std::max(last, rk.finish);
  }
  result_.seconds = last;
  result_.unreceived = result_.messages - consumed_;
  if (result_.deadlock) result_.report = deadlockReport();
}

std::string World::deadlockReport() {
  std::ostringstream out;
  int stuck = 0, shown = 0;
  for (const RankState& rk : ranks_) stuck += rk.finished ? 0 : 1;
  out << "deadlock at t=" << now_ * 1e6 << " us: no event left while " << stuck << " of " << job_.ranks
      << " ranks are unfinished";
  for (const RankState& rk : ranks_) {
    if (rk.finished) continue;
    if (++shown > 16) {
      out << "\n  ... and " << stuck - 16 << " more";
      break;
    }
    out << "\n  rank " << rk.rank << ": phase " << rk.phase << " of " << rk.phases;
    if (rk.waitRecv >= 0) {
      const Recv& rv = recvs_[rk.waitRecv];
      out << ", lane " << rk.waitLane << " unit " << rk.waitUnit << ": waits for a message from rank " << rv.from
          << " (sub " << rv.sub << ", " << rv.bytes << " bytes) that was never sent";
    } else {
      out << ": blocked outside a receive";
    }
    size_t unpaired = 0;
    rk.match.forEach([&](const MatchTable::Entry& f) {
      if (!MatchTable::messages(f)) return;
      for (int32_t m = f.head; m >= 0; m = messages_[m].next) ++unpaired;
    });
    if (unpaired > 0) out << "; " << unpaired << " message(s) to it were never received";
  }
  return out.str();
}

// ---- entry points ----

SimResult simulate(const JobShape& job, const LinkModel& model, size_t elemSize, const PlanFn& plan,
                   const SimOptions& options) {
  RF_ENFORCE(job.ranks >= 1 && job.ranks < (1 << 19), "ranks must be from 1 to 2^19, not ", job.ranks);
  RF_ENFORCE(job.perHost >= 1, "ranks per host must be at least 1, not ", job.perHost);
  RF_ENFORCE(elemSize >= 1, "element size must be at least 1");
  World w(job, model, elemSize, options);
  for (int r = 0; r < job.ranks; ++r) w.rank(r).task = rankTask(w, r, plan);
  w.run();
  return std::move(w.result());
}

coll::PlanOptions planOptions(const AllreduceCase& c) {
  coll::PlanOptions o;
  o.count = c.bytes / c.elemSize;
  o.elemSize = c.elemSize;
  o.preScaled = false;
  o.inPlace = false;
  o.segmentBytes = c.segmentBytes;
  o.treeSegmentBytes = c.treeSegmentBytes;
  o.ringChunkBytes = c.ringChunkBytes;
  o.cross = c.cross;
  return o;
}

PlanFn allreducePlan(const AllreduceCase& c) {
  const coll::PlanOptions o = planOptions(c);
  const AllreduceAlgorithm a = c.algorithm;
  return [o, a](const coll::PlanShape& shape) { return coll::planAllreduce(a, shape, o); };
}

SimResult simulateAllreduce(const JobShape& job, const LinkModel& model, const AllreduceCase& c,
                            const SimOptions& options) {
  return simulate(job, model, c.elemSize, allreducePlan(c), options);
}

uint64_t estimateMessages(const JobShape& job, const AllreduceCase& c) {
  const std::vector<coll::Phase> phases = allreducePlan(c)(job.shapeOf(0));
  uint64_t messages = 0;
  for (const coll::Phase& p : phases) {
    const sched::Schedule& s = *p.schedule;
    messages += s.ownSends();
    for (int l = 0; l < s.lanes(); ++l) {
      const size_t units = s.lane(l).units;
      for (size_t u = 0; u < units; ++u) {
        const sched::Unit un = s.unit(l, u);
        messages += (un.forwardTo >= 0 ? 1 : 0) + (un.forwardAlso >= 0 ? 1 : 0);
      }
    }
  }
  return messages * static_cast<uint64_t>(job.ranks);
}

}  // namespace ringfold::sim
