// The simulator's schedules equal the executor's: the same allreduce plans (allreduce_plan.h)
// run by the real executor over the loopback transport (ranks as threads) and by the
// simulator must send the same messages (peer, tag sub, bytes) in the same order per (phase,
// peer, tag), which is what the transport pairs, and in the same order overall, on every rank.
// The real run records each isend through a Connection wrapper; the simulator records the sends
// it models. The real run's results are checked too (so the operands are right).
//
// The executor is driven phase by phase as allreduce.cc and hierarchical.cc drive it, with the
// plan options the simulator uses (sim::planOptions), on communicators built here: one over all
// ranks and, for hierarchical, one per host (consecutive ranks) and one per local rank across
// hosts, since loopback ranks all share one real host.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <latch>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/sim/simulator.h"
#include "collectives/allreduce_plan.h"
#include "collectives/check.h"
#include "collectives/communicator.h"
#include "collectives/executor.h"
#include "collectives/pipeline.h"
#include "collectives/schedules.h"
#include "reduce/cpu_reducer.h"
#include "rendezvous/hash_store.h"
#include "transport/device.h"

namespace ringfold::sim {
namespace {

using namespace std::chrono_literals;

// Records every isend (phase, job rank of the peer, tag sub, bytes), then passes it on.
class RecordingConnection final : public transport::Connection {
 public:
  RecordingConnection(std::unique_ptr<transport::Connection> inner, int jobPeer, std::vector<SentMessage>& log,
                      const uint32_t& phase)
      : inner_(std::move(inner)), jobPeer_(jobPeer), log_(log), phase_(phase) {}
  int peerRank() const override { return inner_->peerRank(); }
  std::unique_ptr<transport::Request> isend(const transport::MemoryRegion& region, size_t offset, size_t length,
                                            uint64_t tag, uint64_t check) override {
    log_.push_back(SentMessage{phase_, jobPeer_, static_cast<uint32_t>(tag & 0xFFFF), length});
    return inner_->isend(region, offset, length, tag, check);
  }
  std::unique_ptr<transport::Request> irecv(transport::MemoryRegion& region, size_t offset, size_t length,
                                            uint64_t tag, uint64_t check) override {
    return inner_->irecv(region, offset, length, tag, check);
  }

 private:
  std::unique_ptr<transport::Connection> inner_;
  int jobPeer_;
  std::vector<SentMessage>& log_;
  const uint32_t& phase_;
};

struct Case {
  AllreduceAlgorithm algorithm;
  AllreduceAlgorithm cross;
  int ranks, perHost;
  size_t count;  // float elements
};

std::string name(const Case& c) {
  std::string s = algorithmName(c.algorithm);
  if (c.algorithm == AllreduceAlgorithm::kHierarchical) s += std::string("_") + algorithmName(c.cross);
  return s + "_n" + std::to_string(c.ranks) + "_L" + std::to_string(c.perHost) + "_count" + std::to_string(c.count);
}

AllreduceCase simCase(const Case& c) {
  AllreduceCase s;
  s.algorithm = c.algorithm;
  s.cross = c.cross;
  s.elemSize = 4;
  s.bytes = c.count * 4;
  s.segmentBytes = s.treeSegmentBytes = 4096;  // small, so that counts cross segments and rounds
  s.ringChunkBytes = 3 * 4096;
  return s;
}

float input(int rank, size_t i) { return static_cast<float>((rank + 1) * 10 + static_cast<int>(i % 7)); }

// One rank's run: its communicators, its phases through the executor as the runtime runs them.
class RankRun {
 public:
  RankRun(rendezvous::Store& store, const Case& c, const JobShape& job, int rank, std::vector<SentMessage>& log)
      : c_(c), job_(job), shape_(job.shapeOf(rank)), log_(log) {
    all_ = connect(store, "all", rank, job.ranks, [](int p) { return p; });
    if (c.algorithm == AllreduceAlgorithm::kHierarchical) {
      const int host = shape_.crossRank, local = shape_.localRank, L = job.perHost;
      local_ = connect(store, "local" + std::to_string(host), local, shape_.localSize,
                       [host, L](int p) { return host * L + p; });
      cross_ = connect(store, "cross" + std::to_string(local), host, shape_.crossSize,
                       [local, L](int p) { return p * L + local; });
    }
  }

  std::vector<float> run() {
    const AllreduceCase sc = simCase(c_);
    std::vector<coll::Phase> phases = coll::planAllreduce(c_.algorithm, shape_, planOptions(sc));
    std::vector<float> send(c_.count), recv(c_.count, -1.0f);
    for (size_t i = 0; i < c_.count; ++i) send[i] = input(shape_.rank, i);
    coll::Operands call;
    call.src = reinterpret_cast<const std::byte*>(send.data());
    call.dst = reinterpret_cast<std::byte*>(recv.data());
    call.srcElems = call.dstElems = c_.count;
    call.elemSize = 4;
    call.dtype = DataType::kFloat32;
    call.op = ReduceOp::kSum;
    call.reducer = &all_->reducer();
    const coll::CheckFields fields{.kind = coll::Kind::kAllreduceRing, .dtype = DataType::kFloat32,
                                   .op = ReduceOp::kSum, .count = c_.count};
    if (c_.algorithm != AllreduceAlgorithm::kHierarchical) {
      coll::run(*all_, "allreduce", [&] {
        call.call = coll::begin(*all_, fields);
        runFlat(*all_, c_.algorithm, phases, 0, phases.size(), call);
      });
      return recv;
    }
    // hierarchical.cc's three steps.
    const std::vector<sched::Range> blocks = coll::hierarchicalBlocks(c_.count, shape_.localSize);
    const sched::Range mine = blocks[shape_.localRank];
    size_t at = 0;
    if (shape_.localSize > 1) {
      coll::run(*local_, "allreduce", [&] {
        coll::Operands a = call;
        a.dst = call.dst + mine.offset * 4;
        a.dstShift = mine.offset;
        a.dstElems = mine.length;
        a.stageRange = blocks[sched::ringReduceSendChunk(shape_.localRank, 0, shape_.localSize)];
        a.call = coll::begin(*local_, fields);
        phase_ = static_cast<uint32_t>(at);
        coll::execute(*local_, *phases[at++].schedule, a);
      });
    } else {
      std::copy(send.begin(), send.end(), recv.begin());  // a host of one: the block is the input
    }
    size_t crossEnd = at;
    while (crossEnd < phases.size() && phases[crossEnd].group == coll::Group::kCross) ++crossEnd;
    if (crossEnd > at) {
      coll::run(*cross_, "allreduce", [&] {
        coll::Operands a = call;
        a.src = call.dst;
        a.call = coll::begin(*cross_, fields);
        runFlat(*cross_, c_.cross, phases, at, crossEnd, a);
      });
    }
    if (crossEnd < phases.size()) {
      coll::run(*local_, "allreduce", [&] {
        coll::Operands a = call;
        a.src = call.dst;
        a.call = coll::begin(*local_, fields);
        phase_ = static_cast<uint32_t>(crossEnd);
        coll::execute(*local_, *phases[crossEnd].schedule, a);
      });
    }
    return recv;
  }

 private:
  template <typename JobRank>
  std::unique_ptr<Communicator> connect(rendezvous::Store& store, const std::string& prefix, int rank, int size,
                                        JobRank jobRank) {
    auto device = transport::createDevice("loopback");
    auto peers = device->connectAll(store, prefix, rank, size, 20000ms);
    for (int p = 0; p < size; ++p) {
      if (peers[p]) peers[p] = std::make_unique<RecordingConnection>(std::move(peers[p]), jobRank(p), log_, phase_);
    }
    auto comm = std::make_unique<Communicator>(rank, size, std::move(device), std::move(peers), makeCpuReducer());
    comm->setTimeout(20000ms);
    return comm;
  }

  // allreduce.cc's runFlat: each phase over its window of the buffers, with its operand rules.
  void runFlat(Communicator& comm, AllreduceAlgorithm algo, std::vector<coll::Phase>& phases, size_t first,
               size_t last, const coll::Operands& call) {
    for (size_t p = first; p < last; ++p) {
      coll::Operands part = call;
      part.src = call.src + (phases[p].base - call.srcShift) * call.elemSize;
      part.dst = call.dst + (phases[p].base - call.dstShift) * call.elemSize;
      part.srcShift = part.dstShift = 0;
      part.srcElems = part.dstElems = phases[p].count;
      if (algo == AllreduceAlgorithm::kDirect) {
        part.copyOwn = part.src == part.dst && comm.rank() >= 2;
        part.stageRange = sched::Range{0, phases[p].count};
      } else {
        part.stageInDst = true;
      }
      phase_ = static_cast<uint32_t>(p);
      coll::execute(comm, *phases[p].schedule, part);
    }
  }

  Case c_;
  JobShape job_;
  coll::PlanShape shape_;
  std::vector<SentMessage>& log_;
  uint32_t phase_ = 0;
  std::unique_ptr<Communicator> all_, local_, cross_;
};

void PrintTo(const Case& c, std::ostream* out) { *out << name(c); }

// A rank's sends grouped by (phase, peer, sub), each group in order: "phase/peer/sub: bytes...".
std::map<std::string, std::vector<size_t>> byTag(const std::vector<SentMessage>& sends) {
  std::map<std::string, std::vector<size_t>> out;
  for (const SentMessage& m : sends) {
    out[std::to_string(m.phase) + "/" + std::to_string(m.to) + "/" + std::to_string(m.sub)].push_back(m.bytes);
  }
  return out;
}

class SimEqualsExecutor : public ::testing::TestWithParam<Case> {};

TEST_P(SimEqualsExecutor, SameMessagesInTheSameOrder) {
  const Case c = GetParam();
  const JobShape job{c.ranks, c.perHost};
  std::vector<std::vector<SentMessage>> logs(c.ranks);
  std::vector<std::vector<float>> results(c.ranks);
  std::vector<std::string> errors(c.ranks);
  {
    rendezvous::HashStore store;
    std::latch finished(c.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < c.ranks; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<RankRun> run;
        try {
          run = std::make_unique<RankRun>(store, c, job, r, logs[r]);
          results[r] = run->run();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
        // Each rank tears its devices down itself, once no rank needs them any more.
        finished.arrive_and_wait();
        run.reset();
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < c.ranks; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 0; r < c.ranks; ++r) {
    for (size_t i = 0; i < c.count; ++i) {
      float want = 0;
      for (int q = 0; q < c.ranks; ++q) want += input(q, i);
      ASSERT_EQ(results[r][i], want) << "rank " << r << " element " << i;
    }
  }
  SimOptions options;
  options.recordSends = true;
  const SimResult sim = simulateAllreduce(job, LinkModel{}, simCase(c), options);
  ASSERT_FALSE(sim.deadlock) << sim.report;
  EXPECT_EQ(sim.unreceived, 0u);
  size_t recorded = 0;
  for (const auto& log : logs) recorded += log.size();
  EXPECT_GT(recorded, 0u);  // the wrapper saw the executor's sends
  EXPECT_EQ(recorded, sim.messages);
  // Per (phase, peer, tag sub), the same messages in the same order: what the transport pairs.
  for (int r = 0; r < c.ranks; ++r) {
    ASSERT_EQ(sim.sends[r].size(), logs[r].size()) << "rank " << r;
    EXPECT_EQ(byTag(logs[r]), byTag(sim.sends[r])) << "rank " << r;
  }
  // Without interleaved lanes the executor's order of sends is fixed by the schedule (nothing
  // it does depends on timing but when it waits), so each rank's whole sequence is the same
  // too. The tree interleaves its lanes (a broadcast unit goes as soon as its receive is in),
  // so there only the per-tag order above is comparable.
  const bool interleaves = c.algorithm == AllreduceAlgorithm::kTree ||
                           (c.algorithm == AllreduceAlgorithm::kHierarchical && c.cross == AllreduceAlgorithm::kTree);
  for (int r = 0; r < c.ranks && !interleaves; ++r) {
    for (size_t k = 0; k < logs[r].size(); ++k) {
      const SentMessage& a = logs[r][k];
      const SentMessage& b = sim.sends[r][k];
      ASSERT_EQ(a, b) << "rank " << r << " message " << k << ": executor phase " << a.phase << " to " << a.to
                      << " sub " << a.sub << " " << a.bytes << " B, simulator phase " << b.phase << " to " << b.to
                      << " sub " << b.sub << " " << b.bytes << " B";
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree}) {
    for (int n : {2, 3, 5}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{10007}}) {
        out.push_back(Case{a, AllreduceAlgorithm::kRing, n, 1, count});
      }
    }
  }
  // Hierarchical: hosts of 2 and 3 ranks, and the degenerate splits (one rank per host, one host).
  for (AllreduceAlgorithm cross : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree, AllreduceAlgorithm::kDirect}) {
    for (auto [n, L] : {std::pair{4, 2}, std::pair{6, 3}, std::pair{6, 2}, std::pair{3, 1}, std::pair{3, 3}}) {
      for (size_t count : {size_t{1}, size_t{10007}}) out.push_back(Case{AllreduceAlgorithm::kHierarchical, cross, n, L, count});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Plans, SimEqualsExecutor, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

}  // namespace
}  // namespace ringfold::sim
