// Output forwarding: every rank's stdout and stderr, line by line, prefixed with the rank as
// horovodrun does:
//
//   [3]<stdout>:epoch 1 loss 0.25        (on the launcher's stdout)
//   [3]<stderr>:warning: ...             (on the launcher's stderr)
//
// LinePrefixer is the pure part: bytes in, whole prefixed lines out. A line is emitted only
// once its '\n' arrives (so lines of different ranks never interleave mid-line); a line longer
// than maxLineBytes is cut into pieces of that size; finish() emits a final unterminated line
// with a '\n' added.
//
// OutputForwarder runs one thread with poll() over all the pipes. Each read's complete lines go
// out in one write(2) to the matching launcher fd. It ends when every pipe reached EOF, or when
// stop() is called (after a drain period for pipes a leftover grandchild holds open), flushing
// every unterminated line. A failed write to a closed launcher stdout (EPIPE) drops the output
// and goes on reading, so ranks never block on a full pipe. Nor on one that nobody reads: the
// launcher's stdout and stderr are written only as far as they take without blocking (pieces
// of at most PIPE_BUF bytes while poll() says writable); the rest waits in a buffer of at most
// kMaxPendingBytes per target, past which output is dropped and counted (one line says how
// much, once the target takes output again). At the end the buffer gets 2 s without progress
// to drain. --output-filename copies are written in full either way.
//
// Per source, optionally:
//   * handshake: the first line equal to it is swallowed, and the source counts as started
//     (started(i), with the time it arrived); eventFd() becomes readable when that happens.
//     Lines before it are forwarded as usual (a chatty login shell on a remote host).
//   * copyFd: every forwarded line also goes there, without the prefix (--output-filename);
//     the forwarder closes it.
// lastLine(i) is the last complete line a source printed (for error messages about ssh);
// errorLines(i), for a source forwarded to stderr, what it said about how it failed
// (failure_cause.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "launcher/failure_cause.h"

namespace ringfold::launcher {

class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, size_t maxLineBytes = 1 << 20);
  // Appends the complete, prefixed lines found in [data, data+n) to `out`.
  void feed(const char* data, size_t n, std::string& out);
  // Appends the pending partial line (if any), prefixed and '\n'-terminated, to `out`.
  void finish(std::string& out);

 private:
  std::string prefix_;
  std::string pending_;
  size_t maxLineBytes_;
};

class OutputForwarder {
 public:
  struct Source {
    int fd;         // read end; the forwarder closes it
    int targetFd;   // STDOUT_FILENO or STDERR_FILENO
    std::string prefix;
    std::string handshake = {};  // empty: none
    int copyFd = -1;
  };

  explicit OutputForwarder(std::vector<Source> sources);
  ~OutputForwarder();  // stop(0) if still running
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // Waits up to `drain` for every pipe to reach EOF, then stops the thread and flushes.
  void stop(std::chrono::milliseconds drain);

  // Readable (an eventfd) whenever a handshake arrived since the last drainEvents().
  int eventFd() const { return eventFd_; }
  void drainEvents();
  bool started(size_t source) const { return state_[source]->startedNs.load() != 0; }
  // steady_clock time (ns since its epoch) at which the handshake arrived; 0 if not yet.
  int64_t startedAtNs(size_t source) const { return state_[source]->startedNs.load(); }
  std::string lastLine(size_t source) const;
  ErrorLines errorLines(size_t source) const;
  // Whether the source reached end of file (all it wrote has been forwarded).
  bool finished(size_t source) const { return state_[source]->finished.load(); }

 private:
  struct State {
    std::atomic<int64_t> startedNs{0};
    std::atomic<bool> finished{false};
    mutable std::mutex mutex;
    std::string lastLine;
    ErrorLines errors;
  };
  void run();
  // Handles the complete lines of source i in `lines` (handshake, copy, last line), then
  // forwards what is left.
  void emit(size_t i, const std::string& prefixed);
  // The launcher's stdout/stderr without blocking: queue `text` (or drop it past the cap),
  // then write what the target takes now.
  void queueOut(int fd, const std::string& text);
  void flushOut(int fd);

 public:
  static constexpr size_t kMaxPendingBytes = 4 << 20;

 private:

  std::vector<Source> sources_;
  std::vector<std::unique_ptr<State>> state_;
  int eventFd_ = -1;
  int wakeFd_ = -1;  // eventfd: stop() asks the thread to finish
  std::atomic<int64_t> drainDeadlineNs_{0};
  // Per target fd (the forwarder thread only): bytes waiting, and bytes dropped since the last note.
  std::vector<std::pair<int, std::string>> pending_;
  std::vector<std::pair<int, uint64_t>> dropped_;
  std::thread thread_;
};

// Writes all of [data, data+n) to fd, retrying on EINTR and short writes. Returns false on error.
bool writeAll(int fd, const char* data, size_t n);

}  // namespace ringfold::launcher
