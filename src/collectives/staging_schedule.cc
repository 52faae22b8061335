#include "collectives/staging_schedule.h"

#include <algorithm>

#include "common/error.h"

namespace ringfold::sched {

StagingSchedule::StagingSchedule(size_t bytes, size_t elemSize, size_t blockBytes, size_t slots)
    : bytes_(bytes), slots_(slots) {
  RF_ENFORCE_GT(elemSize, size_t{0}, "staging schedule: element size");
  RF_ENFORCE_GE(slots, size_t{2}, "staging schedule: the overlap needs two pinned slots");
  RF_ENFORCE_EQ(bytes % elemSize, size_t{0}, "staging schedule: bytes must be whole elements");
  blockBytes_ = std::max(elemSize, blockBytes / elemSize * elemSize);
  blocks_ = (bytes + blockBytes_ - 1) / blockBytes_;
  using S = StagingStep;
  // Copies in flight: block b+1 is started before b is exchanged; b's copy-out is waited for
  // only when its slot is needed again (before the copy-in of b + slots) or at the end.
  size_t waitedOut = 0;  // copy-outs waited for so far (in block order)
  auto copyIn = [&](size_t b) {
    if (b >= blocks_) return;
    while (b >= slots_ && waitedOut <= b - slots_) steps_.push_back({S::kWaitCopyOut, waitedOut++});
    steps_.push_back({S::kCopyIn, b});
  };
  copyIn(0);
  for (size_t b = 0; b < blocks_; ++b) {
    steps_.push_back({S::kWaitCopyIn, b});
    copyIn(b + 1);
    steps_.push_back({S::kExchange, b});
    steps_.push_back({S::kCopyOut, b});
  }
  while (waitedOut < blocks_) steps_.push_back({S::kWaitCopyOut, waitedOut++});
}

StagingBlock StagingSchedule::block(size_t b) const {
  RF_ENFORCE_LT(b, blocks_, "staging schedule: block index");
  const size_t offset = b * blockBytes_;
  return {offset, std::min(blockBytes_, bytes_ - offset), b % slots_};
}

}  // namespace ringfold::sched
