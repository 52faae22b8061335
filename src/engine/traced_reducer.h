// TracedReducer: a reducer, wrapped so that every reduction shows in the timeline as a
// CPU_REDUCE activity inside the transport activity of the operation running it (on the row of
// the batch's first tensor, so a fused batch of hundreds of tensors does not multiply the
// events). The engine builds one per operation around the communicator's reducer and passes it
// to the collective (AllreduceOptions::reducer). When the timeline is off it adds one relaxed
// load per call.
#pragma once

#include <memory>
#include <string>

#include "engine/timeline.h"
#include "reduce/reducer.h"

namespace ringfold::engine {

class TracedReducer : public Reducer {
 public:
  // Records on `tensor`'s row of `timeline` (null or "" records nothing); `inner` does the work
  // and must outlive this.
  TracedReducer(Timeline* timeline, Reducer& inner, std::string tensor)
      : inner_(&inner), timeline_(timeline), tensor_(std::move(tensor)) {}

  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale) override {
    const bool trace = timeline_ != nullptr && timeline_->active() && !tensor_.empty();
    if (trace) timeline_->activityStart(tensor_, "CPU_REDUCE");
    inner_->reduce(dst, a, b, count, dtype, op, postScale);
    if (trace) timeline_->activityEnd(tensor_);
  }
  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override {
    inner_->scale(dst, src, count, dtype, factor);
  }

 private:
  Reducer* inner_;
  Timeline* timeline_;
  std::string tensor_;
};

}  // namespace ringfold::engine
