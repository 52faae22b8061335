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
// and goes on reading, so ranks never block on a full pipe.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

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
  };

  explicit OutputForwarder(std::vector<Source> sources);
  ~OutputForwarder();  // stop(0) if still running
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // Waits up to `drain` for every pipe to reach EOF, then stops the thread and flushes.
  void stop(std::chrono::milliseconds drain);

 private:
  void run();

  std::vector<Source> sources_;
  int wakeFd_ = -1;  // eventfd: stop() asks the thread to finish
  std::atomic<int64_t> drainDeadlineNs_{0};
  std::thread thread_;
};

// Writes all of [data, data+n) to fd, retrying on EINTR and short writes. Returns false on error.
bool writeAll(int fd, const char* data, size_t n);

}  // namespace ringfold::launcher
