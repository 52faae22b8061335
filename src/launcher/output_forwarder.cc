#include "launcher/output_forwarder.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/error.h"

namespace ringfold::launcher {

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool writeAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

LinePrefixer::LinePrefixer(std::string prefix, size_t maxLineBytes)
    : prefix_(std::move(prefix)), maxLineBytes_(maxLineBytes == 0 ? 1 : maxLineBytes) {}

void LinePrefixer::feed(const char* data, size_t n, std::string& out) {
  auto emit = [&] {
    out += prefix_;
    out += pending_;
    out += '\n';
    pending_.clear();
  };
  const char* end = data + n;
  while (data < end) {
    if (*data == '\n') {  // the line is complete
      emit();
      ++data;
      continue;
    }
    if (pending_.size() == maxLineBytes_) emit();  // overlong: this piece becomes a line
    const char* nl = static_cast<const char*>(memchr(data, '\n', static_cast<size_t>(end - data)));
    const char* stop = nl != nullptr ? nl : end;
    size_t take = std::min(static_cast<size_t>(stop - data), maxLineBytes_ - pending_.size());
    pending_.append(data, take);
    data += take;
  }
}

void LinePrefixer::finish(std::string& out) {
  if (pending_.empty()) return;
  out += prefix_;
  out += pending_;
  out += '\n';
  pending_.clear();
}

OutputForwarder::OutputForwarder(std::vector<Source> sources) : sources_(std::move(sources)) {
  for (size_t i = 0; i < sources_.size(); ++i) state_.push_back(std::make_unique<State>());
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  RF_CHECK_ERRNO(wakeFd_, "eventfd for the output forwarder");
  eventFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  RF_CHECK_ERRNO(eventFd_, "eventfd for the output forwarder's handshakes");
  thread_ = std::thread([this] { run(); });
}

OutputForwarder::~OutputForwarder() {
  if (thread_.joinable()) stop(std::chrono::milliseconds(0));
  if (wakeFd_ >= 0) close(wakeFd_);
  if (eventFd_ >= 0) close(eventFd_);
}

void OutputForwarder::drainEvents() {
  uint64_t v;
  ssize_t unused = read(eventFd_, &v, sizeof v);
  (void)unused;
}

std::string OutputForwarder::lastLine(size_t source) const {
  std::lock_guard<std::mutex> lock(state_[source]->mutex);
  return state_[source]->lastLine;
}

ErrorLines OutputForwarder::errorLines(size_t source) const {
  std::lock_guard<std::mutex> lock(state_[source]->mutex);
  return state_[source]->errors;
}

void OutputForwarder::emit(size_t i, const std::string& text) {
  if (text.empty()) return;
  const Source& src = sources_[i];
  State& st = *state_[i];
  const std::string* toWrite = &text;
  std::string forward;
  const bool awaitHandshake = !src.handshake.empty() && st.startedNs.load() == 0;
  if (awaitHandshake || src.copyFd >= 0) {
    std::string copy;
    size_t pos = 0;
    while (pos < text.size()) {  // whole prefixed lines, each ending in '\n'
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size() - 1;
      std::string_view line(text.data() + pos, nl + 1 - pos);
      pos = nl + 1;
      std::string_view content = line.substr(std::min(src.prefix.size(), line.size()));
      if (!src.handshake.empty() && st.startedNs.load() == 0 &&
          content.size() == src.handshake.size() + 1 && content.substr(0, src.handshake.size()) == src.handshake) {
        st.startedNs.store(nowNs());
        uint64_t one = 1;
        ssize_t unused = write(eventFd_, &one, sizeof one);
        (void)unused;
        continue;
      }
      forward.append(line);
      if (src.copyFd >= 0) copy.append(content);
    }
    if (src.copyFd >= 0 && !copy.empty()) writeAll(src.copyFd, copy.data(), copy.size());
    toWrite = &forward;
  }
  if (toWrite->empty()) return;
  if (src.targetFd == STDERR_FILENO) {  // the rank's error line (failure_cause.h)
    const int64_t now = nowNs();
    std::lock_guard<std::mutex> lock(st.mutex);
    size_t pos = 0;
    while (pos < toWrite->size()) {
      size_t nl = toWrite->find('\n', pos);
      if (nl == std::string::npos) nl = toWrite->size();
      std::string_view line(toWrite->data() + pos, nl - pos);
      st.errors.feed(line.substr(std::min(src.prefix.size(), line.size())), now);
      pos = nl + 1;
    }
  }
  size_t lastStart = toWrite->size() >= 2 ? toWrite->rfind('\n', toWrite->size() - 2) : std::string::npos;
  lastStart = lastStart == std::string::npos ? 0 : lastStart + 1;
  lastStart += std::min(src.prefix.size(), toWrite->size() - lastStart);
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    st.lastLine.assign(*toWrite, lastStart, toWrite->size() - lastStart - 1);
  }
  // Never blocks: a launcher output nobody reads must not stop the ranks (see the header).
  queueOut(src.targetFd, *toWrite);
}

namespace {
template <typename T>
T& slotOf(std::vector<std::pair<int, T>>& v, int fd) {
  for (auto& [f, x] : v) {
    if (f == fd) return x;
  }
  v.emplace_back(fd, T{});
  return v.back().second;
}
}  // namespace

void OutputForwarder::queueOut(int fd, const std::string& text) {
  std::string& q = slotOf(pending_, fd);
  if (q.size() + text.size() > kMaxPendingBytes) {
    slotOf(dropped_, fd) += text.size();
  } else {
    q += text;
  }
  flushOut(fd);
}

void OutputForwarder::flushOut(int fd) {
  std::string& q = slotOf(pending_, fd);
  uint64_t& dropped = slotOf(dropped_, fd);
  size_t off = 0;
  for (;;) {
    if (off == q.size() && dropped != 0) {  // caught up: say what was lost
      q.erase(0, off);
      off = 0;
      q = "ringfoldrun: dropped " + std::to_string(dropped) +
          " bytes of the ranks' output here: nothing read it for a while (--output-filename keeps all)\n";
      dropped = 0;
    }
    if (off == q.size()) break;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0 || (p.revents & POLLOUT) == 0) {
      if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) off = q.size();  // closed: drop it
      break;
    }
    ssize_t n = write(fd, q.data() + off, std::min<size_t>(PIPE_BUF, q.size() - off));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) off = q.size();  // EPIPE or another error: drop, keep draining ranks
      break;
    }
    off += static_cast<size_t>(n);
  }
  q.erase(0, off);
}

void OutputForwarder::stop(std::chrono::milliseconds drain) {
  if (!thread_.joinable()) return;
  drainDeadlineNs_.store(nowNs() + std::chrono::nanoseconds(drain).count());
  uint64_t one = 1;
  ssize_t unused = write(wakeFd_, &one, sizeof one);
  (void)unused;
  thread_.join();
}

void OutputForwarder::run() {
  std::vector<LinePrefixer> prefixers;
  for (const auto& s : sources_) prefixers.emplace_back(s.prefix);
  std::vector<bool> open(sources_.size(), true);
  size_t openCount = sources_.size();
  std::vector<pollfd> fds;
  std::vector<size_t> index;  // fds[k] (k >= 1) reads sources_[index[k - 1]]
  std::string out;
  char buf[64 * 1024];

  auto closeSource = [&](size_t i) {
    out.clear();
    prefixers[i].finish(out);
    emit(i, out);
    close(sources_[i].fd);
    if (sources_[i].copyFd >= 0) close(sources_[i].copyFd);
    state_[i]->finished.store(true);
    open[i] = false;
    --openCount;
  };

  while (openCount > 0) {
    fds.assign(1, pollfd{wakeFd_, POLLIN, 0});
    index.clear();
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (!open[i]) continue;
      fds.push_back(pollfd{sources_[i].fd, POLLIN, 0});
      index.push_back(i);
    }
    const size_t readers = fds.size();
    for (const auto& [fd, q] : pending_) {
      if (!q.empty()) fds.push_back(pollfd{fd, POLLOUT, 0});
    }
    int timeoutMs = -1;
    int64_t deadline = drainDeadlineNs_.load();
    if (deadline != 0) {
      int64_t left = deadline - nowNs();
      if (left <= 0) break;
      timeoutMs = static_cast<int>(left / 1000000 + 1);
    }
    int r = poll(fds.data(), fds.size(), timeoutMs);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) {
      uint64_t v;
      ssize_t unused = read(wakeFd_, &v, sizeof v);
      (void)unused;
    }
    for (size_t k = readers; k < fds.size(); ++k) {
      if (fds[k].revents != 0) flushOut(fds[k].fd);
    }
    for (size_t k = 1; k < readers; ++k) {
      if (fds[k].revents == 0) continue;
      size_t i = index[k - 1];
      ssize_t n = read(sources_[i].fd, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        closeSource(i);
        continue;
      }
      out.clear();
      prefixers[i].feed(buf, static_cast<size_t>(n), out);
      emit(i, out);
    }
  }
  // Drain period over: flush what is left of pipes still held open (e.g. by a grandchild).
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (open[i]) closeSource(i);
  }
  // What the launcher's outputs did not take yet: 2 s without progress, then it is dropped.
  int64_t lastProgress = nowNs();
  for (;;) {
    fds.clear();
    size_t left = 0;
    for (const auto& [fd, q] : pending_) {
      if (!q.empty()) fds.push_back(pollfd{fd, POLLOUT, 0});
      left += q.size();
    }
    if (fds.empty() || nowNs() - lastProgress > 2'000'000'000) break;
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    for (const auto& p : fds) {
      if (p.revents != 0) flushOut(p.fd);
    }
    size_t now = 0;
    for (const auto& [fd, q] : pending_) now += q.size();
    if (now < left) lastProgress = nowNs();
  }
}

}  // namespace ringfold::launcher
