#include "bench/sim/task.h"

#include <new>
#include <vector>

namespace ringfold::sim {

namespace {

// Frames of up to kMaxPooled bytes are kept on free lists by 64-byte size class.
constexpr size_t kClass = 64;
constexpr size_t kMaxPooled = 8192;

struct FramePool {
  std::vector<void*> free[kMaxPooled / kClass + 1];
  ~FramePool() {
    for (auto& list : free) {
      for (void* p : list) ::operator delete(p);
    }
  }
};

FramePool& pool() {
  thread_local FramePool p;
  return p;
}

thread_local ReadyHook* tHook = nullptr;

}  // namespace

void* allocateFrame(size_t bytes) {
  if (bytes > kMaxPooled) return ::operator new(bytes);
  const size_t c = (bytes + kClass - 1) / kClass;
  auto& list = pool().free[c];
  if (list.empty()) return ::operator new(c * kClass);
  void* p = list.back();
  list.pop_back();
  return p;
}

void freeFrame(void* frame, size_t bytes) {
  if (bytes > kMaxPooled) return ::operator delete(frame);
  pool().free[(bytes + kClass - 1) / kClass].push_back(frame);
}

ReadyHook* setReadyHook(ReadyHook* hook) {
  ReadyHook* old = tHook;
  tHook = hook;
  return old;
}

void scheduleReady(std::coroutine_handle<> handle) {
  // Without a hook (a task resumed outside a simulation) the awaiter continues at once.
  if (tHook != nullptr) {
    tHook->ready(handle);
  } else {
    handle.resume();
  }
}

}  // namespace ringfold::sim
