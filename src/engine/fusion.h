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
// fusion off. With `separateGroups` (RINGFOLD_DISABLE_GROUP_FUSION) a grouped tensor fuses only
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

std::vector<Batch> planBatches(const std::vector<Response>& responses, uint64_t thresholdBytes,
                               bool separateGroups);

// Bytes of one allreduce response's tensor.
uint64_t responseBytes(const Response& response);

}  // namespace ringfold::engine
