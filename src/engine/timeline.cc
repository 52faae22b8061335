#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace ringfold::engine {

namespace {

using Clock = std::chrono::steady_clock;

// Closes the array after the last event. Each flush overwrites it, so the file only grows.
constexpr std::string_view kTrailer = "\n]";

void appendInt(std::string& out, int64_t value) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), value);
  out.append(digits, end);
}

// Length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 if it is not.
size_t utf8Length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return n;
}

// Appends `s` as the inside of a JSON string: quotes, backslashes and control characters are
// escaped, and bytes that are not valid UTF-8 become U+FFFD so strict parsers accept the file.
void appendEscaped(std::string& out, std::string_view s) {
  size_t runStart = 0;
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out.append(s.data() + runStart, i - runStart);
    if (c >= 0x80) {
      size_t n = utf8Length(s, i);
      if (n > 0) {
        out.append(s.data() + i, n);
        i += n;
      } else {
        out += "\\ufffd";
        ++i;
      }
    } else {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default: {
          static constexpr char kHex[] = "0123456789abcdef";
          char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
          out.append(esc, sizeof(esc));
        }
      }
      ++i;
    }
    runStart = i;
  }
  out.append(s.data() + runStart, i - runStart);
}

}  // namespace

Timeline::Timeline(size_t maxPendingBytes) : maxPendingBytes_(maxPendingBytes) {}

Timeline::~Timeline() {
  try {
    stop();
  } catch (...) {
  }
}

void Timeline::start(const std::string& path, bool markCycles) {
  std::lock_guard<std::mutex> control(controlMutex_);
  stopLocked();

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    RF_THROW(InvalidArgument, "timeline: cannot open '", path, "' for writing: ", std::strerror(err));
  }
  int64_t wallMicros =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::string header = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"ringfold\","
                       "\"start_time_since_epoch_in_micros\":";
  appendInt(header, wallMicros);
  header += "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":0,\"args\":{\"sort_index\":0}}";
  header += kTrailer;

  {
    std::lock_guard<std::mutex> file(fileMutex_);
    fd_ = fd;
    path_ = path;
    writeFailed_ = false;
    if (!writeAll(header.data(), header.size(), 0)) {
      ::close(fd_);
      fd_ = -1;
      RF_THROW(InvalidArgument, "timeline: cannot write to '", path, "'");
    }
    contentEnd_ = static_cast<int64_t>(header.size() - kTrailer.size());
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.clear();
    dropped_ = 0;
    droppedTotal_ = 0;
    tensors_.clear();
    nextPid_ = 1;
    stopping_ = false;
    wakeRequested_ = false;
    startTime_ = Clock::now();
    recording_ = true;
  }
  markCycles_.store(markCycles, std::memory_order_relaxed);
  try {
    writer_ = std::thread(&Timeline::writerLoop, this);
  } catch (...) {
    std::lock_guard<std::mutex> file(fileMutex_);
    ::close(fd_);
    fd_ = -1;
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false;
    throw;
  }
  active_.store(true, std::memory_order_relaxed);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> control(controlMutex_);
  stopLocked();
}

void Timeline::stopLocked() {
  if (!writer_.joinable()) return;
  active_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false;
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();

  std::lock_guard<std::mutex> file(fileMutex_);
  flushLocked();
  ::close(fd_);
  fd_ = -1;
  writing_ = std::string();  // give the buffers back: an idle timeline holds no memory
  std::lock_guard<std::mutex> lock(mutex_);
  pending_ = std::string();
  tensors_.clear();
}

void Timeline::flush() {
  std::lock_guard<std::mutex> file(fileMutex_);
  if (fd_ >= 0) flushLocked();
}

void Timeline::writerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kFlushInterval, [this] { return stopping_ || wakeRequested_; });
    if (stopping_) break;  // stopLocked() writes the rest
    lock.unlock();
    {
      std::lock_guard<std::mutex> file(fileMutex_);
      flushLocked();
    }
    lock.lock();
  }
}

void Timeline::flushLocked() {
  uint64_t dropped = 0;
  bool firstDrop = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dropped_ > 0) {  // said where the gap is, in the file itself
      dropped = dropped_;
      firstDrop = droppedTotal_ == 0;
      droppedTotal_ += dropped_;
      dropped_ = 0;
      openEventLocked({}, "TIMELINE_DROPPED_EVENTS", 'i', 0);
      pending_ += ",\"s\":\"g\",\"args\":{\"count\":";
      appendInt(pending_, static_cast<int64_t>(dropped));
      pending_ += "}}";
    }
    writing_.swap(pending_);  // writing_ was empty: both keep their capacity
    wakeRequested_ = false;
  }
  if (firstDrop) {  // once per file: a stuck disk would otherwise log every flush
    RF_LOG(kWarning) << "timeline: " << dropped << " events dropped: '" << path_ << "' was not written for "
                     << "long enough that " << (maxPendingBytes_ >> 20) << " MiB of events waited (a slow or "
                     << "hung filesystem?); the file marks each gap with TIMELINE_DROPPED_EVENTS";
  }
  if (writing_.empty()) return;
  writing_ += kTrailer;
  // On failure these events are lost and the next flush retries at the same offset, so the file
  // still ends with the last flush that succeeded.
  if (writeAll(writing_.data(), writing_.size(), contentEnd_)) {
    contentEnd_ += static_cast<int64_t>(writing_.size() - kTrailer.size());
  }
  writing_.clear();
  if (writing_.capacity() > 8 * kFlushBytes) writing_.shrink_to_fit();  // after a burst
}

bool Timeline::writeAll(const char* data, size_t size, int64_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd_, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      if (!writeFailed_) {
        RF_LOG(kWarning) << "timeline: writing '" << path_ << "' failed: " << std::strerror(err)
                         << "; events are being dropped";
      }
      writeFailed_ = true;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

Timeline::TensorState& Timeline::tensorLocked(std::string_view tensor) {
  auto it = tensors_.find(tensor);
  if (it != tensors_.end()) return it->second;
  int pid = nextPid_++;
  it = tensors_.emplace(std::string(tensor), TensorState{pid}).first;
  pending_ += ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
  appendInt(pending_, pid);
  pending_ += ",\"args\":{\"name\":\"";
  appendEscaped(pending_, tensor);
  pending_ += "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":";
  appendInt(pending_, pid);
  pending_ += ",\"args\":{\"sort_index\":";
  appendInt(pending_, pid);
  pending_ += "}}";
  return it->second;
}

Timeline::TensorState* Timeline::findLocked(std::string_view tensor) {
  auto it = tensors_.find(tensor);
  return it == tensors_.end() ? nullptr : &it->second;
}

void Timeline::openEventLocked(std::string_view prefix, std::string_view name, char phase, int pid) {
  pending_ += ",\n{";
  if (!prefix.empty() || !name.empty()) {
    pending_ += "\"name\":\"";
    pending_ += prefix;
    appendEscaped(pending_, name);
    pending_ += "\",";
  }
  pending_ += "\"ph\":\"";
  pending_ += phase;
  pending_ += "\",\"ts\":";
  appendInt(pending_, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - startTime_).count());
  pending_ += ",\"pid\":";
  appendInt(pending_, pid);
  pending_ += ",\"tid\":0";
}

bool Timeline::fullLocked() {
  if (pending_.size() < maxPendingBytes_) return false;
  ++dropped_;
  return true;
}

void Timeline::closeEventLocked() {
  pending_ += '}';
  if (pending_.size() >= kFlushBytes && !wakeRequested_) {
    wakeRequested_ = true;
    wake_.notify_one();
  }
}

void Timeline::negotiateStart(std::string_view tensor, std::string_view opType) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_ || fullLocked()) return;
  TensorState& t = tensorLocked(tensor);
  if (t.phase != Phase::kIdle) return;
  t.phase = Phase::kNegotiating;
  openEventLocked("NEGOTIATE_", opType, 'B', t.pid);
  closeEventLocked();
}

void Timeline::negotiateRankReady(std::string_view tensor, int rank) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_ || fullLocked()) return;
  TensorState* t = findLocked(tensor);
  if (t == nullptr || t->phase != Phase::kNegotiating) return;
  char digits[16];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), rank);
  openEventLocked({}, std::string_view(digits, static_cast<size_t>(end - digits)), 'X', t->pid);
  pending_ += ",\"dur\":1";
  closeEventLocked();
}

void Timeline::negotiateEnd(std::string_view tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) return;  // closing events always go in: every B written gets its E
  TensorState* t = findLocked(tensor);
  if (t == nullptr || t->phase != Phase::kNegotiating) return;
  t->phase = Phase::kIdle;
  openEventLocked({}, {}, 'E', t->pid);
  closeEventLocked();
}

void Timeline::opStart(std::string_view tensor, std::string_view opType) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) return;
  TensorState* known = findLocked(tensor);
  if (known == nullptr && fullLocked()) return;  // a new row is an opening event too
  TensorState& t = known != nullptr ? *known : tensorLocked(tensor);
  if (t.phase == Phase::kOp) return;
  if (t.phase == Phase::kNegotiating) {  // the engine skipped negotiateEnd: close it here
    openEventLocked({}, {}, 'E', t.pid);
    closeEventLocked();
    t.phase = Phase::kIdle;
  }
  if (fullLocked()) return;
  t.phase = Phase::kOp;
  t.openActivities = 0;
  openEventLocked({}, opType, 'B', t.pid);
  closeEventLocked();
}

void Timeline::activityStart(std::string_view tensor, std::string_view activity) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_ || fullLocked()) return;
  TensorState* t = findLocked(tensor);
  if (t == nullptr || t->phase != Phase::kOp) return;
  ++t->openActivities;
  openEventLocked({}, activity, 'B', t->pid);
  closeEventLocked();
}

void Timeline::activityEnd(std::string_view tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) return;  // closing events always go in: every B written gets its E
  TensorState* t = findLocked(tensor);
  if (t == nullptr || t->phase != Phase::kOp || t->openActivities == 0) return;
  --t->openActivities;
  openEventLocked({}, {}, 'E', t->pid);
  closeEventLocked();
}

void Timeline::opEnd(std::string_view tensor, std::string_view dtype, const std::vector<int64_t>& shape) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) return;  // closing events always go in: every B written gets its E
  TensorState* t = findLocked(tensor);
  if (t == nullptr || t->phase != Phase::kOp) return;
  for (; t->openActivities > 0; --t->openActivities) {
    openEventLocked({}, {}, 'E', t->pid);
    closeEventLocked();
  }
  t->phase = Phase::kIdle;
  openEventLocked({}, {}, 'E', t->pid);
  pending_ += ",\"args\":{\"dtype\":\"";
  appendEscaped(pending_, dtype);
  pending_ += "\",\"shape\":\"[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) pending_ += ", ";
    appendInt(pending_, shape[i]);
  }
  pending_ += "]\"}";
  closeEventLocked();
}

void Timeline::cycleStart() {
  if (!active() || !markCycles()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_ || fullLocked()) return;
  openEventLocked({}, "CYCLE_START", 'i', 0);
  pending_ += ",\"s\":\"g\"";
  closeEventLocked();
}

}  // namespace ringfold::engine
