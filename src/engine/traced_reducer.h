// TracedReducer: the communicator's reducer, wrapped so that every reduction shows in the
// timeline as a CPU_REDUCE activity inside the transport activity of the operation running it
// (on the row of the batch's first tensor, so a fused batch of hundreds of tensors does not
// multiply the events). When the timeline is off it adds one relaxed load per call.
#pragma once

#include <memory>
#include <string>

#include "engine/timeline.h"
#include "reduce/reducer.h"

namespace ringfold::engine {

class TracedReducer : public Reducer {
 public:
  explicit TracedReducer(Timeline& timeline) : timeline_(timeline) {}

  // Wraps `comm`'s reducer.
  template <typename Comm>
  static void install(Comm& comm, Timeline& timeline) {
    auto traced = std::make_unique<TracedReducer>(timeline);
    TracedReducer* raw = traced.get();
    raw->inner_ = comm.setReducer(std::move(traced));
  }

  // The tensor whose row the next reductions are recorded on ("" records nothing).
  void setTensor(std::string name) { tensor_ = std::move(name); }

  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale) override {
    const bool trace = timeline_.active() && !tensor_.empty();
    if (trace) timeline_.activityStart(tensor_, "CPU_REDUCE");
    inner_->reduce(dst, a, b, count, dtype, op, postScale);
    if (trace) timeline_.activityEnd(tensor_);
  }
  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override {
    inner_->scale(dst, src, count, dtype, factor);
  }

 private:
  std::unique_ptr<Reducer> inner_;
  Timeline& timeline_;
  std::string tensor_;
};

}  // namespace ringfold::engine
