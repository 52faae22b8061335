// The nccl-tests loop for the comparison programs (Gloo, Open MPI): float32 sum allreduce
// only, timed and checked exactly as ringfold's all_reduce_perf times and checks it
// (bench/common/harness.h), and printed through the same nccl-tests formatter, so that one
// parser reads all three and the numbers are comparable.
//
//   warm-up (-w) at every power-of-two size; per size, out-of-place then in-place: one untimed
//   run, barrier, -n x -m timed runs with rotating buffer offsets, time combined over ranks
//   per -a, then -c checked runs on fresh data (the same integer pattern as data.h's sum, so
//   the float sums are exact), #wrong summed over ranks.
#pragma once

#include <cstddef>
#include <string>

#include "bench/common/flags.h"

namespace ringfold::bench {

// What a comparison program supplies: its collective and the few helpers the loop needs,
// implemented with the compared library itself.
class CompareBackend {
 public:
  enum class Combine { kSum, kMin, kMax };

  virtual ~CompareBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string deviceName() const = 0;  // e.g. "gloo tcp ring"
  virtual void barrier() = 0;
  virtual double combine(double value, Combine how) = 0;
  // Called for every (send, recv) placement before it is timed, outside the timed region
  // (Gloo's older algorithms bind their buffers at construction).
  virtual void prepare(const float* send, float* recv, size_t count, bool inPlace) {}
  // Forget prepared placements (called between sizes).
  virtual void release() {}
  // recv = sum over ranks of send (in place: of recv).
  virtual void allreduce(const float* send, float* recv, size_t count, bool inPlace) = 0;
};

// Runs the loop and prints on rank 0. Returns 0 if every checked element was right, else 1.
int runCompare(const std::string& program, const BenchFlags& flags, CompareBackend& backend);

// Rejects flags the comparison programs do not support (anything but -d float -o sum).
void requireFloatSum(const BenchFlags& flags);

}  // namespace ringfold::bench
