#include "launcher/failure_cause.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace ringfold::launcher {

namespace {

constexpr size_t kMaxLine = 4096;  // an error line is kept up to this many bytes

std::string_view trimmedRight(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The ranks a line names: "rank 3", "rank 3's", "ranks 1, 2" (the first number after "ranks").
std::vector<int> namedRanks(std::string_view line) {
  std::vector<int> out;
  size_t pos = 0;
  while ((pos = line.find("rank", pos)) != std::string_view::npos) {
    const bool wordStart = pos == 0 || !(std::isalnum(static_cast<unsigned char>(line[pos - 1])) ||
                                         line[pos - 1] == '_');
    size_t i = pos + 4;
    if (i < line.size() && line[i] == 's') ++i;
    pos += 4;
    if (!wordStart || i >= line.size() || line[i] != ' ') continue;
    ++i;
    int64_t n = 0;
    size_t digits = 0;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && digits < 9) {
      n = n * 10 + (line[i] - '0');
      ++i;
      ++digits;
    }
    if (digits > 0 && (i == line.size() || !std::isalnum(static_cast<unsigned char>(line[i])))) {
      out.push_back(static_cast<int>(n));
    }
  }
  return out;
}

}  // namespace

void ErrorLines::feed(std::string_view line, int64_t nowNs) {
  line = trimmedRight(line);
  if (line.empty()) return;
  line = line.substr(0, kMaxLine);
  last_.assign(line);
  if (line == "Traceback (most recent call last):") {
    inTraceback_ = true;
    return;
  }
  // In a traceback, frames and source lines are indented; the first line that is not is the
  // exception ("ValueError: boom").
  if (inTraceback_ && line.front() != ' ' && line.front() != '\t') {
    inTraceback_ = false;
    exception_.assign(line);
    exceptionNs_ = nowNs;
  }
}

Blame blameOf(std::string_view line, int self, int size) {
  Blame b;
  // A rank that says the fault is its own link or the store it cannot be reached at names its
  // peers only as the ones it waited for.
  for (std::string_view own : {std::string_view("this rank's own network link is likely down"),
                               std::string_view("no other rank reached the rendezvous store"),
                               std::string_view("no other rank published its")}) {
    if (line.find(own) != std::string_view::npos) return b;
  }
  for (int r : namedRanks(line)) {
    if (r != self && r >= 0 && r < size) {
      b.peer = true;
      b.rank = r;  // the last one named: "X failed on rank 1: ... rank 2 ..." blames rank 2
    }
  }
  if (!b.peer && (line.find("at least one rank") != std::string_view::npos ||
                  line.find("communicator was aborted") != std::string_view::npos)) {
    b.peer = true;
  }
  return b;
}

Cause chooseCause(const std::vector<RankOutcome>& ranks, int size, int64_t firstFailureNs) {
  std::vector<const RankOutcome*> failed;
  for (const auto& r : ranks) {
    if (r.failedSeq >= 0) failed.push_back(&r);
  }
  std::sort(failed.begin(), failed.end(),
            [](const RankOutcome* a, const RankOutcome* b) { return a->failedSeq < b->failedSeq; });
  for (const RankOutcome* r : failed) {
    if (!blameOf(r->errorLine, r->rank, size).peer) return {r->rank, 1};
  }
  const RankOutcome* raisedLast = nullptr;
  for (const auto& r : ranks) {
    if (!r.stopped || !r.raised || blameOf(r.errorLine, r.rank, size).peer) continue;
    if (r.raisedAtNs < firstFailureNs - kRaisedBeforeNs || r.raisedAtNs > firstFailureNs + kRaisedAfterNs) continue;
    if (raisedLast == nullptr || r.raisedAtNs > raisedLast->raisedAtNs) raisedLast = &r;
  }
  if (raisedLast != nullptr) return {raisedLast->rank, 2};
  if (failed.empty()) return {};
  Blame b = blameOf(failed.front()->errorLine, failed.front()->rank, size);
  if (b.rank >= 0) return {b.rank, 3};
  return {failed.front()->rank, 4};
}

}  // namespace ringfold::launcher
