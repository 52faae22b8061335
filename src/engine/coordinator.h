// Coordinator: the bookkeeping that process-set rank 0 keeps during negotiation.
//
// Every rank reports the tensors it has ready (requests); the coordinator counts them per name.
// A tensor is *ready* when every rank of the set has submitted it, where a rank that has
// joined (Engine::join in engine.h, as Horovod's hvd.join) counts as present for allreduce, which it
// feeds with zeros. Ready tensors are turned into responses in the order their names were first
// submitted; the tensors of a group are released together, once all of them are ready.
//
// Building a response checks that the ranks agree: op, dtype, device (CPU or GPU: the GPU index
// may differ between ranks), reduce op, scale factors,
// shape (allgather/alltoall: all but the first dimension), broadcast root, alltoall splits. On
// any disagreement the response is an error whose message names the tensor and, for each
// distinct value, the ranks that passed it; every rank reports that same message.
//
// Stalls: a tensor that some ranks submitted and others did not is *stalled* once it has waited
// longer than a threshold; stalled() lists it with the missing ranks (for the warning), and
// failStalled() turns it into an error response (RINGFOLD_STALL_SHUTDOWN_TIME). A join is
// never stalled: it waits, by design, for the ranks that still have data.
//
// Pure bookkeeping: no communication, no clock of its own (times are passed in), so it is
// unit-tested directly.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace ringfold::engine {

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  // `size`: ranks in the set; `worldSize`: ranks in the global set (bounds process-set ranks).
  Coordinator(int size, int worldSize, bool gpuSupported = false);

  // Records `request` (from request.rank). Returns true if it is the first rank to submit that
  // name (negotiation of it starts now). A rank submitting a name twice is a bug in the caller.
  bool add(const Request& request, Clock::time_point now);

  // Withdraws `rank`'s request for `name` (a cancel on that rank), if the coordinator still
  // holds it, i.e. the tensor has not been released: the other ranks' requests stay (they wait
  // for this rank again), a join is undone. takeReady() then returns a kCancel response whose
  // root is `rank`, so that this rank completes its tensor as cancelled. False (nothing
  // changes) if there is no such request.
  bool withdraw(int rank, const std::string& name);

  // Responses for everything now ready, in first-submission order (see above), after the
  // kCancel responses of the withdrawals since the last call.
  std::vector<Response> takeReady();

  // True while a tensor (or a join) waits for some ranks: negotiation must keep running.
  bool waiting() const { return !order_.empty(); }

  struct Stall {
    std::string name;
    OpType op;
    std::vector<int> missingRanks;
    std::chrono::milliseconds waited;
  };
  std::vector<Stall> stalled(Clock::time_point now, std::chrono::milliseconds olderThan) const;
  // Removes every stalled tensor and returns an error response for each.
  std::vector<Response> failStalled(Clock::time_point now, std::chrono::milliseconds olderThan);

  // The warning text for `stalls` (Horovod's wording, plus the tensor names per missing rank).
  static std::string describeStalls(const std::vector<Stall>& stalls);

 private:
  struct Entry {
    std::vector<std::optional<Request>> byRank;
    int submitted = 0;
    Clock::time_point firstSeen;
  };
  static const Request& anyRequest(const Entry& entry);
  bool ready(const Entry& entry) const;
  std::vector<int> missing(const Entry& entry) const;
  Response build(const std::string& name, const Entry& entry) const;

  int size_;
  int worldSize_;
  bool gpuSupported_;
  std::unordered_map<std::string, Entry> entries_;
  std::vector<std::string> order_;  // names in first-submission order
  std::vector<bool> joined_;
  std::vector<int> joinOrder_;       // ranks joined so far, in order (a withdrawn join leaves)
  std::vector<Response> withdrawn_;  // kCancel responses for the next takeReady()
};

}  // namespace ringfold::engine
