// simulate: runs every rank's real schedules (collectives/allreduce_plan.h, schedule.h) against
// modelled links (network.h, link_model.h) in simulated time, mirroring the executor
// (collectives/executor.cc) step for step, and says when each rank finishes.
//
// What is mirrored (phase_run.h): own sends paced `lead` ahead of the folds in all lanes, the
// lanes' receive windows and gates (retire: the send must have completed; block), receives
// posted first where the schedule asks, units processed in lane order (wait the receives, fold,
// forward to forwardTo then forwardAlso), Flight's FIFO send window (posting into a full window
// first waits for the oldest send), and waiting for every send at the end. A rank starts its next
// phase as soon as it is done with the current one (no barrier). Messages pair with receives per
// (sender, receiver, phase, tag sub) in FIFO order, as the transport pairs equal tags; a message
// may arrive before its receive is posted (it is then copied out at `copy` per byte).
//
// Time: every rank starts at 0; CPU work (o per message at each end, gamma per folded byte,
// copies of unexpected messages) is serialized on the rank's own timeline; the links are
// network.h's. Deterministic: the same inputs give the same times, bit for bit.
//
// Errors: a schedule that breaks a rule the executor enforces (a receive slot reused while in
// use, a pipeline stall, a receive whose length differs from its message's) throws Error naming
// the rank and phase. A deadlock (no event left while ranks are unfinished) is returned as
// SimResult::deadlock with the stuck ranks' state, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/sim/link_model.h"
#include "collectives/allreduce_plan.h"

namespace ringfold::sim {

// The job: `ranks` ranks on hosts of `perHost` consecutive ranks (the last may hold fewer).
struct JobShape {
  int ranks = 2;
  int perHost = 1;
  int hosts() const { return (ranks + perHost - 1) / perHost; }
  // Where `rank` sits: its host's ranks are its local group; its cross group is the ranks
  // with its local rank on every host.
  coll::PlanShape shapeOf(int rank) const;
  // The job rank of `peer`, a rank of `rank`'s group `group`.
  int jobRank(coll::Group group, const coll::PlanShape& shape, int peer) const;
};

// One message a rank posted (isend), in the order it posted them.
struct SentMessage {
  uint32_t phase = 0;
  int to = 0;  // job rank
  uint32_t sub = 0;
  size_t bytes = 0;
  bool operator==(const SentMessage&) const = default;
};

struct SimOptions {
  bool recordSends = false;  // fill SimResult::sends
  // Called as each message is posted, with the time, the sender and the message (traces).
  std::function<void(double, int, const SentMessage&)> onSend;
};

struct SimResult {
  double seconds = 0;          // when the last rank finished
  std::vector<double> finish;  // per rank
  uint64_t messages = 0;       // messages sent
  uint64_t unexpected = 0;     // of which arrived before their receive was posted
  uint64_t unreceived = 0;     // of which no receive ever took (a schedule that pairs badly)
  uint64_t events = 0;         // events the loop handled
  bool deadlock = false;
  std::string report;          // with deadlock: the stuck ranks and what each waits for
  std::vector<std::vector<SentMessage>> sends;  // with recordSends: per rank
};

// The phases one rank runs, in order (built when the rank starts; each schedule is released
// when the rank has finished its phase).
using PlanFn = std::function<std::vector<coll::Phase>(const coll::PlanShape&)>;

SimResult simulate(const JobShape& job, const LinkModel& model, size_t elemSize, const PlanFn& plan,
                   const SimOptions& options = {});

// An allreduce as rf_sim runs it: out of place, no preScale.
struct AllreduceCase {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  AllreduceAlgorithm cross = AllreduceAlgorithm::kRing;  // hierarchical: among hosts
  size_t bytes = 0;
  size_t elemSize = 4;
  size_t segmentBytes = 512 << 10;
  size_t treeSegmentBytes = 512 << 10;
  size_t ringChunkBytes = 256 << 10;
};
coll::PlanOptions planOptions(const AllreduceCase& c);
PlanFn allreducePlan(const AllreduceCase& c);
SimResult simulateAllreduce(const JobShape& job, const LinkModel& model, const AllreduceCase& c,
                            const SimOptions& options = {});
// The messages the job would send: rank 0's plan counted, times the ranks (exact for the
// symmetric algorithms, an estimate for hierarchical's ragged blocks). Cheap: to refuse runs
// that would take too long (direct at thousands of ranks sends n^2 messages).
uint64_t estimateMessages(const JobShape& job, const AllreduceCase& c);

}  // namespace ringfold::sim
