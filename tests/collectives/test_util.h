// Shared pieces of the collective tests: the matrix axes, buffers with guard bytes, and a
// per-rank failure log (gtest assertions are made on the main thread after the ranks join).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "support/rank_threads.h"

namespace ringfold::rftest {

inline const std::vector<int> kRankCounts = {1, 2, 3, 5, 8};

inline std::vector<DataType> reducibleTypes() {
  std::vector<DataType> out;
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (isReducible(static_cast<DataType>(i))) out.push_back(static_cast<DataType>(i));
  }
  return out;
}
inline std::vector<DataType> allTypes() {
  std::vector<DataType> out;
  for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
  return out;
}
inline std::vector<ReduceOp> allOps() {
  std::vector<ReduceOp> out;
  for (int i = 0; i < kNumReduceOps; ++i) out.push_back(static_cast<ReduceOp>(i));
  return out;
}

// Bytes with 64 guard bytes on each side; intact() says whether anything wrote past the span.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  explicit GuardedBuffer(size_t bytes) : storage_(bytes + 2 * kGuard, std::byte{0xA5}), bytes_(bytes) {}
  std::byte* data() { return storage_.data() + kGuard; }
  size_t size() const { return bytes_; }
  void fill(const std::vector<std::byte>& from) {
    if (!from.empty()) std::memcpy(data(), from.data(), from.size());
  }
  void poison() { std::memset(data(), 0x5A, bytes_); }
  bool intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (storage_[i] != std::byte{0xA5} || storage_[kGuard + bytes_ + i] != std::byte{0xA5}) return false;
    }
    return true;
  }

 private:
  std::vector<std::byte> storage_;
  size_t bytes_;
};

// First element index where a and b differ (-1 if equal).
inline long long firstDifference(const std::byte* a, const std::byte* b, size_t count, size_t es) {
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * es, b + i * es, es) != 0) return static_cast<long long>(i);
  }
  return -1;
}

// Failures noted by rank threads, reported by the main thread.
class FailureLog {
 public:
  template <typename... Args>
  void note(Args&&... args) {
    std::ostringstream out;
    (out << ... << args);
    std::lock_guard<std::mutex> lock(mu_);
    if (lines_.size() < 50) lines_.push_back(out.str());
    ++count_;
  }
  void report() const {
    for (const auto& l : lines_) ADD_FAILURE() << l;
    if (count_ > lines_.size()) ADD_FAILURE() << (count_ - lines_.size()) << " more failures";
  }
  size_t count() const { return count_; }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
  size_t count_ = 0;
};

inline void expectAllOk(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_FALSE(errors[r]) << "rank " << r << ": " << describe(errors[r]);
  }
}

}  // namespace ringfold::rftest
