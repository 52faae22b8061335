// StagingSchedule: the order of work of a collective on device memory staged through pinned
// host buffers (collectives/gpu_staged.h runs it with CUDA copies and events). Pure index
// math and ordering, no CUDA: tests/collectives/staging_schedule_test.cc checks it on the CPU.
//
// Vocabulary
//   block  : a piece of the buffer, [offset, offset + bytes), a whole number of elements; the
//            buffer is cut into blocks of at most blockBytes (the last may be shorter).
//   slot   : one of `slots` pinned host buffers of blockBytes; block b lives in slot b % slots.
//   Steps  : kCopyIn b     start the device-to-host copy of block b into its slot (async)
//            kWaitCopyIn b wait until that copy finished
//            kExchange b   run the host collective on block b's slot (sends, receives, and
//                          folds, which the staged reducer does on the device)
//            kCopyOut b    start the host-to-device copy of block b's result (async)
//            kWaitCopyOut b wait until that copy finished (its slot may then be reused)
//
// Contract
//   * Every block gets exactly one of each step, in the order CopyIn < WaitCopyIn < Exchange <
//     CopyOut < WaitCopyOut; blocks are exchanged in order 0, 1, 2, ...
//   * Overlap: the copy-in of block b+1 (when there is one) is started before block b is
//     exchanged, so the device-to-host copy of the next block runs while this one is on the
//     network; with slots >= 3 the copy-out of block b also runs while b+1 is exchanged.
//   * A slot is refilled (kCopyIn of b + slots) only after kWaitCopyOut of b, so a copy never
//     overwrites a block whose result is still being copied to the device.
//   * 0 bytes: no steps. slots >= 2; blockBytes is at least one element.
#pragma once

#include <cstddef>
#include <vector>

namespace ringfold::sched {

struct StagingStep {
  enum Kind { kCopyIn, kWaitCopyIn, kExchange, kCopyOut, kWaitCopyOut };
  Kind kind;
  size_t block;
  bool operator==(const StagingStep&) const = default;
};

struct StagingBlock {
  size_t offset;
  size_t bytes;
  size_t slot;
};

class StagingSchedule {
 public:
  // blockBytes is rounded down to a multiple of elemSize (at least one element).
  StagingSchedule(size_t bytes, size_t elemSize, size_t blockBytes, size_t slots = 3);

  size_t blockBytes() const { return blockBytes_; }
  size_t blocks() const { return blocks_; }
  size_t slots() const { return slots_; }
  StagingBlock block(size_t b) const;
  const std::vector<StagingStep>& steps() const { return steps_; }

 private:
  size_t bytes_, blockBytes_, slots_, blocks_;
  std::vector<StagingStep> steps_;
};

}  // namespace ringfold::sched
