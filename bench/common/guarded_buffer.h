// GuardedBuffer: a page-aligned buffer with guard regions on both sides, filled with a known
// byte, so that a collective writing before or past the memory it was given is caught.
//
//   [ guard kGuardBytes | data capacity() | guard kGuardBytes ]
//
// guardDamage() counts the guard bytes that no longer hold kGuardByte. The data region is
// the caller's; fill() sets it to one byte (the harness's "untouched" sentinel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringfold::bench {

class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 4096;
  static constexpr unsigned char kGuardByte = 0xA5;

  explicit GuardedBuffer(size_t capacity);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  void fill(unsigned char byte);
  int64_t guardDamage() const;

 private:
  std::byte* base_;
  std::byte* data_;
  size_t capacity_;
};

}  // namespace ringfold::bench
