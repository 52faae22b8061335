#include "engine/fusion.h"

namespace ringfold::engine {

uint64_t responseBytes(const Response& response) {
  return static_cast<uint64_t>(response.elements) * dataTypeSize(response.dtype);
}

namespace {

bool fusable(const Response& r) { return !r.error && r.op == OpType::kAllreduce; }

bool sameKind(const Response& a, const Response& b, bool separateGroups) {
  return a.dtype == b.dtype && a.reduceOp == b.reduceOp && a.preScale == b.preScale &&
         a.postScale == b.postScale && a.device == b.device && (!separateGroups || a.group == b.group);
}

}  // namespace

std::vector<Batch> planBatches(const std::vector<Response>& responses, uint64_t thresholdBytes,
                               bool separateGroups, uint64_t tensorMaxBytes) {
  auto small = [&](const Response& r) { return tensorMaxBytes == 0 || responseBytes(r) < tensorMaxBytes; };
  std::vector<Batch> batches;
  std::vector<bool> placed(responses.size(), false);
  for (size_t i = 0; i < responses.size(); ++i) {
    if (placed[i]) continue;
    placed[i] = true;
    Batch batch;
    batch.members.push_back(i);
    const Response& head = responses[i];
    if (fusable(head) && small(head)) {
      batch.bytes = responseBytes(head);
      for (size_t j = i + 1; j < responses.size() && thresholdBytes > 0; ++j) {
        if (placed[j] || !fusable(responses[j]) || !small(responses[j]) ||
            !sameKind(head, responses[j], separateGroups)) {
          continue;
        }
        uint64_t bytes = responseBytes(responses[j]);
        if (batch.bytes + bytes > thresholdBytes) continue;
        placed[j] = true;
        batch.members.push_back(j);
        batch.bytes += bytes;
      }
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace ringfold::engine
