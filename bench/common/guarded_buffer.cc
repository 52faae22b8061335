#include "bench/common/guarded_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "bench/common/data.h"

namespace ringfold::bench {

GuardedBuffer::GuardedBuffer(size_t capacity) : capacity_(capacity) {
  // Round the data region up to whole pages so the trailing guard is page-aligned as well.
  const size_t dataBytes = (capacity + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  const size_t total = dataBytes + 2 * kGuardBytes;
  base_ = static_cast<std::byte*>(std::aligned_alloc(kGuardBytes, total));
  if (!base_) throw std::bad_alloc();
  data_ = base_ + kGuardBytes;
  std::memset(base_, kGuardByte, kGuardBytes);
  // Everything after the data region, including the rounding slack, is guard.
  std::memset(data_ + capacity_, kGuardByte, total - kGuardBytes - capacity_);
}

GuardedBuffer::~GuardedBuffer() { std::free(base_); }

void GuardedBuffer::fill(unsigned char byte) { std::memset(data_, byte, capacity_); }

int64_t GuardedBuffer::guardDamage() const {
  const size_t dataBytes = (capacity_ + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  return countNotEqual(base_, kGuardBytes, kGuardByte) +
         countNotEqual(data_ + capacity_, dataBytes - capacity_ + kGuardBytes, kGuardByte);
}

}  // namespace ringfold::bench
