// The engine's cancel of a tensor other ranks have not submitted, and join next to operations
// that cannot run while a rank is joined: each of these used to leave a handle or a rank
// waiting forever. Every wait here is bounded, so a regression fails instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_harness.h"

namespace ringfold::engine {
namespace {

using namespace std::chrono_literals;
using rftest::runEngines;

void expectAllOk(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "ok") << "rank " << r;
}

TensorArgs allreduceArgs(const std::string& name, const std::vector<float>& in, std::vector<float>& out) {
  TensorArgs a;
  a.name = name;
  a.shape = {static_cast<int64_t>(in.size())};
  a.input = in.data();
  a.output = out.data();
  return a;
}

// Waits at most 10 s: a handle that never completes fails the test instead of hanging it.
Status waitShort(Engine& e, Handle h) {
  const Result* r = e.handles().wait(h, 10s);
  if (!r) throw std::runtime_error("handle " + std::to_string(h) + " did not complete within 10 s");
  Status s = r->status;
  e.handles().release(h);
  return s;
}

void expectCancelled(Engine& e, Handle h) {
  Status s = waitShort(e, h);
  if (s.code != StatusCode::kAborted || s.message != "cancelled") {
    throw std::runtime_error("not cancelled: " + (s.ok() ? std::string("completed normally") : s.message));
  }
}

void waitFor(const std::atomic<bool>& flag) {
  for (int i = 0; i < 10000 && !flag; ++i) std::this_thread::sleep_for(1ms);
  if (!flag) throw std::runtime_error("the other rank did not get there within 10 s");
}

// Cancels `h` once the engine (0.5 ms cycles) has had long enough to report it to the
// coordinator, so the cancel has to withdraw it there rather than just drop it from the queue;
// expects it cancelled, then sets `cancelled` for the ranks waiting on it (waitFor).
void cancelReported(Engine& e, Handle h, std::atomic<bool>& cancelled) {
  std::this_thread::sleep_for(200ms);
  e.cancel(h);
  expectCancelled(e, h);
  cancelled = true;
}

// ringfold_cancel on a tensor only this rank submitted: it was reported, nobody else will ever
// match it, and it must complete as cancelled; afterwards the name is free and the coordinator
// holds nothing of it (a later allreduce of that name by both ranks sums both).
TEST(EngineCancel, ReportedTensorOnlyThisRankSubmittedIsCancelled) {
  std::atomic<bool> cancelled{false};
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    std::vector<float> in(4, 1.0f), out(4, 0.0f);
    if (rank == 0) {
      cancelReported(e, e.enqueue(allreduceArgs("lonely", in, out)), cancelled);
    } else {
      waitFor(cancelled);
    }
    Status s = waitShort(e, e.enqueue(allreduceArgs("lonely", in, out)));
    if (!s.ok() || out[0] != 2.0f) throw std::runtime_error("after the cancel: " + s.message + " sum " + std::to_string(out[0]));
  });
  expectAllOk(errors);
}

// Three ranks: ranks 0 and 1 submitted "x", rank 2 has not. Rank 1 cancels: its request is
// withdrawn, rank 0's stays and waits for rank 1 again; once ranks 1 and 2 submit "x", it runs
// with all three.
TEST(EngineCancel, WithdrawnRequestLeavesTheOthersWaiting) {
  std::atomic<bool> cancelled{false}, checked{false};
  auto errors = runEngines(3, [&](Engine& e, int rank) {
    std::vector<float> in(3, 1.0f), out(3, 0.0f);
    Handle h = 0;
    if (rank < 2) h = e.enqueue(allreduceArgs("x", in, out));
    if (rank == 1) {
      cancelReported(e, h, cancelled);
    } else {
      waitFor(cancelled);
    }
    if (rank == 0) {
      std::this_thread::sleep_for(100ms);
      const bool done = e.handles().poll(h);
      checked = true;
      if (done) throw std::runtime_error("rank 0's 'x' completed without ranks 1 and 2");
    } else {
      waitFor(checked);
      h = e.enqueue(allreduceArgs("x", in, out));
    }
    Status s = waitShort(e, h);
    if (!s.ok() || out[0] != 3.0f) throw std::runtime_error("x: " + s.message + " sum " + std::to_string(out[0]));
  });
  expectAllOk(errors);
}

// A cancelled join is undone at the coordinator: the rank counts as present again, so the next
// allreduce waits for its data instead of running with its zeros.
TEST(EngineCancel, CancelledJoinNoLongerCountsAsJoined) {
  std::atomic<bool> cancelled{false};
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    if (rank == 0) {
      cancelReported(e, e.join(), cancelled);
    } else {
      waitFor(cancelled);
    }
    std::vector<float> in(2, static_cast<float>(rank + 1)), out(2, 0.0f);
    if (rank == 0) std::this_thread::sleep_for(100ms);  // rank 1's request is there first
    Status s = waitShort(e, e.enqueue(allreduceArgs("after", in, out)));
    if (!s.ok() || out[0] != 3.0f) throw std::runtime_error("after: " + s.message + " sum " + std::to_string(out[0]));
  });
  expectAllOk(errors);
}

// Horovod's test_horovod_join_allgather at the engine: rank 0 joins, rank 1's allgather fails
// (only allreduce runs while a rank is joined), rank 1 joins. The joined rank must not keep
// that error for a name it never submitted: an allgather of the same name by both ranks
// afterwards runs (it used to fail at once on rank 0, leaving rank 1 waiting for it).
TEST(EngineJoin, OperationFailedWhileJoinedLeavesTheJoinedRankInStep) {
  std::vector<int> last(2, -2);
  auto errors = runEngines(2, [&](Engine& e, int rank) {
    std::vector<float> in(2, static_cast<float>(rank));
    TensorArgs g;
    g.op = OpType::kAllgather;
    g.name = "allgather.noname.0";
    g.shape = {1, 2};
    g.input = in.data();
    if (rank == 1) {
      Status s = waitShort(e, e.enqueue(g));
      if (s.ok() || s.message.find("had joined") == std::string::npos) {
        throw std::runtime_error("allgather while rank 0 is joined: " + (s.ok() ? std::string("no error") : s.message));
      }
    }
    Handle j = e.join();
    const Result* r = e.handles().wait(j, 10s);
    if (!r || !r->status.ok()) throw std::runtime_error("join did not complete");
    last[rank] = r->lastJoinedRank;
    e.handles().release(j);
    Handle h = e.enqueue(g);
    r = e.handles().wait(h, 10s);
    if (!r) throw std::runtime_error("the allgather after the join did not complete within 10 s");
    if (!r->status.ok()) throw std::runtime_error("the allgather after the join failed: " + r->status.message);
    std::vector<float> got(4);
    if (r->outputBytes != sizeof(float) * got.size()) throw std::runtime_error("allgather output size");
    std::memcpy(got.data(), r->output.get(), r->outputBytes);
    e.handles().release(h);
    if (got != std::vector<float>{0, 0, 1, 1}) throw std::runtime_error("allgather result");
  });
  expectAllOk(errors);
  EXPECT_EQ(last[0], 1);
  EXPECT_EQ(last[1], 1);
}

}  // namespace
}  // namespace ringfold::engine
