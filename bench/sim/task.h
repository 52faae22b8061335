// Task: a C++20 coroutine that a simulated rank runs, so that the simulator can mirror the
// executor's blocking code (executor.cc) line for line: where the executor waits on a request,
// the simulated rank co_awaits an event of the simulation and is resumed in simulated time.
//
// Contract
//   * A Task starts suspended. `co_await task` runs it inline in the awaiting coroutine's
//     context; if it finishes without suspending the awaiter just continues (no stack grows
//     with the number of tasks awaited in a loop). If it suspends, the awaiter suspends too, and
//     when the task finishes later (resumed by the event loop) its awaiter is handed to the
//     ready hook (setReadyHook), which resumes it from the event loop at the same instant.
//   * An exception thrown in a task reaches its awaiter at the co_await.
//   * The top-level task of a rank is started with start(); it has no awaiter.
//   * Frames come from a per-thread pool (task.cc): tasks are created per message.
//   * One thread runs a simulation at a time (the hook and the pool are per thread).
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <utility>

namespace ringfold::sim {

void* allocateFrame(size_t bytes);
void freeFrame(void* frame, size_t bytes);

// Receives the awaiters of tasks that finished after suspending (the event loop's ready list).
class ReadyHook {
 public:
  virtual ~ReadyHook() = default;
  virtual void ready(std::coroutine_handle<> handle) = 0;
};
// Sets this thread's hook (null: none); returns the previous one.
ReadyHook* setReadyHook(ReadyHook* hook);
void scheduleReady(std::coroutine_handle<> handle);

class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::coroutine_handle<> awaiter;
    std::exception_ptr error;
    bool inlineRun = false;  // being run from its awaiter's co_await, not from the event loop

    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Final {
        bool await_ready() noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          promise_type& p = h.promise();
          if (!p.inlineRun && p.awaiter) scheduleReady(p.awaiter);
        }
        void await_resume() noexcept {}
      };
      return Final{};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
    static void* operator new(size_t bytes) { return allocateFrame(bytes); }
    static void operator delete(void* frame, size_t bytes) { freeFrame(frame, bytes); }
  };

  Task() = default;
  Task(Task&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (h_) h_.destroy();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  // co_await: run inline; suspend the awaiter only if the task suspends.
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> awaiter) {
    promise_type& p = h_.promise();
    p.awaiter = awaiter;
    p.inlineRun = true;
    h_.resume();
    p.inlineRun = false;
    return !h_.done();
  }
  void await_resume() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
  }

  // A top-level task: runs until it first suspends.
  void start() { h_.resume(); }
  bool done() const { return !h_ || h_.done(); }
  std::coroutine_handle<> handle() const { return h_; }
  std::exception_ptr error() const { return h_ ? h_.promise().error : nullptr; }

 private:
  explicit Task(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

}  // namespace ringfold::sim
