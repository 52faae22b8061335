#include "launcher/output_forwarder.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

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
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  RF_CHECK_ERRNO(wakeFd_, "eventfd for the output forwarder");
  thread_ = std::thread([this] { run(); });
}

OutputForwarder::~OutputForwarder() {
  if (thread_.joinable()) stop(std::chrono::milliseconds(0));
  if (wakeFd_ >= 0) close(wakeFd_);
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
    writeAll(sources_[i].targetFd, out.data(), out.size());
    close(sources_[i].fd);
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
    for (size_t k = 1; k < fds.size(); ++k) {
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
      // EPIPE (nobody reads the launcher's output any more): drop it, keep draining the rank.
      if (!out.empty()) writeAll(sources_[i].targetFd, out.data(), out.size());
    }
  }
  // Drain period over: flush what is left of pipes still held open (e.g. by a grandchild).
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (open[i]) closeSource(i);
  }
}

}  // namespace ringfold::launcher
