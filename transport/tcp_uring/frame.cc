// Pooled receive buffers of the tcp_uring backend (see frame.h).
#include <algorithm>
#include <bit>
#include <new>

#include <unistd.h>

#include "transport/tcp_uring/frame.h"

namespace ringfold::transport::tcp_uring {

BufferPool::~BufferPool() {
  for (auto& list : free_) {
    for (std::byte* p : list) ::operator delete[](p, std::align_val_t{64});
  }
}

size_t hostMemoryBytes() {
  static const size_t bytes =
      static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return bytes;
}

PooledBuffer BufferPool::get(size_t bytes) {
  if (bytes == 0) return {};
  if (bytes > (size_t{1} << 62)) throw std::bad_alloc();  // its power of two would not fit
  size_t cls = std::max<size_t>(12, std::bit_width(bytes - 1));  // 4 KiB and up
  if ((size_t{1} << cls) > hostMemoryBytes()) throw std::bad_alloc();
  if (cls < free_.size() && !free_[cls].empty()) {
    std::byte* p = free_[cls].back();
    free_[cls].pop_back();
    cached_ -= size_t{1} << cls;
    return {p, size_t{1} << cls};
  }
  return {static_cast<std::byte*>(::operator new[](size_t{1} << cls, std::align_val_t{64})), size_t{1} << cls};
}

void BufferPool::put(PooledBuffer& b) {
  if (b.data == nullptr) return;
  size_t cls = std::bit_width(b.capacity - 1);
  if (cached_ + b.capacity > maxCached_) {
    ::operator delete[](b.data, std::align_val_t{64});
  } else {
    if (free_.size() <= cls) free_.resize(cls + 1);
    free_[cls].push_back(b.data);
    cached_ += b.capacity;
  }
  b = {};
}

}  // namespace ringfold::transport::tcp_uring
