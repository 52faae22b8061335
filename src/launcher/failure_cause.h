// Which rank's failure came first: ringfoldrun names it as the cause of a failed job, rather
// than whichever rank happened to exit first.
//
// When one rank fails, the others fail too, because of it, often sooner than it exits: a rank
// that raised still runs its exit handlers (ringfold's shutdown among them) while the ranks it
// takes along exit at once. Those report a failed peer, and ringfold's errors name the peer
// ("... the process of rank 1 exited or crashed", "allreduce failed on rank 1: ...",
// "rank 2 sent nothing for 60 s") or say that "at least one rank" shut ringfold down; a rank
// whose own code failed does not. So:
//   * ErrorLines follows one rank's stderr and keeps its error line: the exception line of its
//     last Python traceback ("ValueError: boom"), else its last line.
//   * blameOf() reads an error line: it blames a peer when it names another rank of the job
//     (the last one it names is the peer blamed) or says ringfold was shut down or aborted by
//     "at least one rank" (peer unknown), unless it says the fault is its own network link or
//     a rendezvous store no other rank reached (it then names peers only as those it waited for).
//   * chooseCause(), over every rank that failed or was stopped, picks
//       1. the first rank, in exit order, that failed on its own (exited non-zero or by a signal
//          before the launcher stopped it) without blaming a peer;
//       2. else, of the ranks the launcher stopped, the one whose own exception (a Python
//          traceback that blames no peer) came last before the first failed exit (within
//          kRaisedBefore of it; an older one was handled long ago): it was still exiting when
//          the ranks it took along had exited;
//       3. else the peer that the first failed rank blames, if it names one;
//       4. else the first rank that failed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringfold::launcher {

class ErrorLines {
 public:
  // One line of the rank's stderr, without its newline; nowNs: when it arrived.
  void feed(std::string_view line, int64_t nowNs);
  const std::string& errorLine() const { return exception_.empty() ? last_ : exception_; }
  bool raised() const { return !exception_.empty(); }
  int64_t raisedAtNs() const { return exceptionNs_; }

 private:
  bool inTraceback_ = false;
  std::string exception_;  // exception line of the last Python traceback
  int64_t exceptionNs_ = 0;
  std::string last_;       // last non-empty line
};

struct Blame {
  bool peer = false;  // the error is another rank's failure, seen from here
  int rank = -1;      // that rank, when the error names it
};
Blame blameOf(std::string_view errorLine, int self, int size);

struct RankOutcome {
  int rank = 0;
  int failedSeq = -1;     // order among the ranks that failed on their own; -1: did not
  bool stopped = false;   // stopped by the launcher (or never exited)
  std::string errorLine;  // ErrorLines::errorLine()
  bool raised = false;
  int64_t raisedAtNs = 0;
};

struct Cause {
  int rank = -1;  // -1: no rank failed
  int rule = 0;   // which of the header's rules chose it (1-4)
};
inline constexpr int64_t kRaisedBeforeNs = 30'000'000'000;  // rule 2's window before the first exit
inline constexpr int64_t kRaisedAfterNs = 1'000'000'000;    // ... and after it (output read late)
// firstFailureNs: when the first failed exit was seen (the clock of raisedAtNs).
Cause chooseCause(const std::vector<RankOutcome>& ranks, int size, int64_t firstFailureNs);

}  // namespace ringfold::launcher
