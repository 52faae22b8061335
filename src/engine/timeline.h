// The engine's timeline (HOROVOD_TIMELINE): a Chrome-trace JSON file that opens in Perfetto and
// chrome://tracing, showing what the background engine did to each tensor.
//
// File format. The file is one JSON array of trace events and is valid JSON after every flush:
//
//   [
//   {"name":"process_name","ph":"M","pid":0,"args":{"name":"ringfold","start_time_since_epoch_in_micros":N}},
//   {"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},
//   {"name":"process_name","ph":"M","pid":1,"args":{"name":"grad/conv1"}},     <- first use of a tensor
//   {"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}},
//   {"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":12,"pid":1,"tid":0},
//   ...
//   ]
//
// Every tensor is a row of its own ("pid" N >= 1, in first-use order). "ts" is microseconds since
// start() on a steady clock; the header carries the wall-clock start, as Horovod's does, so files
// from several runs or hosts can be aligned. Each flush writes its events over the closing `]`,
// each event led by ",\n", and ends the file with "\n]" again, in one pwrite that only ever grows
// the file: a reader sees a complete array whenever no flush is in progress.
//
// Per tensor the calls follow negotiate{Start, RankReady*, End} then op{Start, activity{Start,End}*,
// End}. A call that does not fit the tensor's state (an activityEnd with none open, a second
// opStart) is ignored, and opEnd closes activities still open, so every "B" has its "E".
//
// Cost model. The engine thread calls these on its hot path, guarded by active() (one relaxed
// load, so an inactive timeline costs a predictable branch). An active call takes a short mutex,
// reads the steady clock and formats the event straight into a string buffer: no syscall, and no
// allocation once the buffer and the tensor table have grown (a new tensor name allocates once).
// A writer thread swaps that buffer for a second one (both keep their capacity) and writes it
// out every ~100 ms, at once when it passes 1 MiB, and on stop(); file I/O never holds the
// event mutex. Memory is bounded: while the writer is stuck (a hung network filesystem, a full
// disk retrying) the buffer grows to at most maxPendingBytes (64 MiB by default); events past
// that are dropped, counted, and reported in the file as one TIMELINE_DROPPED_EVENTS instant
// with the count once writing resumes, and once in the log. Only opening events (B, X, instants,
// new rows) are dropped: an E whose B is in the file always goes in, so pairs still balance, and
// the E events let in past the cap are bounded by the B events open at that moment.
// Horovod's timeline queued records through a lock-free queue to a writer that formatted them
// with iostreams; here formatting is a few appends, and writes are batched.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ringfold::engine {

// Records engine activity to a Chrome-trace file. Thread-safe: start()/stop()/flush() may come
// from any thread, events from any thread (normally the engine's). Every event call is a no-op
// while inactive. start() throws InvalidArgument if the file cannot be opened.
class Timeline {
 public:
  static constexpr size_t kMaxPendingBytes = size_t{64} << 20;
  explicit Timeline(size_t maxPendingBytes = kMaxPendingBytes);
  ~Timeline();  // stops (flushes and closes) if active
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (truncating it). Throws InvalidArgument naming the path and errno
  // text if it cannot be opened. Starting while active first stops the current file.
  void start(const std::string& path, bool markCycles);
  void stop();  // flushes; the file is complete, valid JSON
  // Writes everything recorded so far; on return the file is valid JSON and contains it.
  void flush();
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  bool markCycles() const noexcept { return markCycles_.load(std::memory_order_relaxed); }

  void negotiateStart(std::string_view tensor, std::string_view opType);   // B "NEGOTIATE_<opType>"
  void negotiateRankReady(std::string_view tensor, int rank);              // X "<rank>", 1 us
  void negotiateEnd(std::string_view tensor);                              // E
  void opStart(std::string_view tensor, std::string_view opType);          // B "<opType>"
  void activityStart(std::string_view tensor, std::string_view activity);  // B nested activity
  void activityEnd(std::string_view tensor);                               // E innermost activity
  void opEnd(std::string_view tensor, std::string_view dtype, const std::vector<int64_t>& shape);
  void cycleStart();  // global instant "CYCLE_START"; no-op unless markCycles

 private:
  enum class Phase : uint8_t { kIdle, kNegotiating, kOp };
  struct TensorState {
    int pid = 0;
    Phase phase = Phase::kIdle;
    int openActivities = 0;
  };
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using TensorTable = std::unordered_map<std::string, TensorState, NameHash, std::equal_to<>>;

  // All below with mutex_ held.
  TensorState& tensorLocked(std::string_view tensor);  // adds the row (and its metadata) on first use
  TensorState* findLocked(std::string_view tensor);    // null if the tensor has no row yet
  // Appends `,\n{"name":"<prefix><name>","ph":..,"ts":..,"pid":..,"tid":0` (no name if both are
  // empty); the caller may add fields, then closeEventLocked() adds `}` and wakes the writer
  // once the buffer passes kFlushBytes.
  void openEventLocked(std::string_view prefix, std::string_view name, char phase, int pid);
  // True (and counts the event as dropped) when the buffer is at maxPendingBytes_.
  bool fullLocked();
  void closeEventLocked();

  void writerLoop();
  void flushLocked();  // with fileMutex_ held: moves pending_ to the file
  void stopLocked();   // with controlMutex_ held
  bool writeAll(const char* data, size_t size, int64_t offset);  // pwrite loop; logs the first failure

  static constexpr size_t kFlushBytes = size_t{1} << 20;
  static constexpr std::chrono::milliseconds kFlushInterval{100};

  std::atomic<bool> active_{false};
  std::atomic<bool> markCycles_{false};

  std::mutex controlMutex_;  // start/stop; taken before fileMutex_
  std::thread writer_;

  std::mutex fileMutex_;  // the file and writing_; taken before mutex_
  int fd_ = -1;
  std::string path_;  // for messages
  int64_t contentEnd_ = 0;  // file offset just past the last event (where the closing `]` starts)
  std::string writing_;
  bool writeFailed_ = false;  // since start(): log a failing disk once

  std::mutex mutex_;  // everything the event calls touch
  std::condition_variable wake_;
  bool recording_ = false;
  bool stopping_ = false;
  bool wakeRequested_ = false;
  std::chrono::steady_clock::time_point startTime_;
  std::string pending_;
  const size_t maxPendingBytes_;
  uint64_t dropped_ = 0;       // events dropped since the last flush
  uint64_t droppedTotal_ = 0;  // since start(), for the log
  TensorTable tensors_;
  int nextPid_ = 1;
};

}  // namespace ringfold::engine
