// Tensor fusion: which of a cycle's responses travel together in one transfer.
//
// Many small allreduces cost many latencies; packed into one buffer they cost one. planBatches()
// walks the cycle's agreed response list in order and starts a batch at each response not yet
// placed; it then looks ahead through the rest of the list (past responses that do not match,
// as Horovod's FuseResponses does) and adds every allreduce with the same dtype, reduce op,
// scale factors and device while the batch stays within `thresholdBytes`. Every rank plans from
// the same list with the same threshold, so every rank builds the same batches in the same order.
//
// Only allreduce is fused; every other response is a batch of its own. A threshold of 0 turns
// fusion off. Large tensors gain nothing from fusion (their transfer time dwarfs one latency)
// but would pay a copy in and a copy out, so tensors of at least `tensorMaxBytes` stay alone. With `separateGroups` (RINGFOLD_DISABLE_GROUP_FUSION) a grouped tensor fuses only
// with tensors of its own group, and ungrouped ones only with ungrouped ones.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/message.h"

namespace ringfold::engine {

struct Batch {
  std::vector<size_t> members;  // indices into the response list, in list order
  uint64_t bytes = 0;           // payload of all members
};

// `tensorMaxBytes` > 0: tensors of at least that many bytes are never fused (each is a batch
// of its own and runs without the fusion buffer's two copies).
std::vector<Batch> planBatches(const std::vector<Response>& responses, uint64_t thresholdBytes,
                               bool separateGroups, uint64_t tensorMaxBytes = 0);

// Bytes of one allreduce response's tensor.
uint64_t responseBytes(const Response& response);

}  // namespace ringfold::engine
