// Segments, descriptor passing and cross-memory attach (segment.h).
#include "transport/shm/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace ringfold::transport::shm {

namespace {

size_t pageRound(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

std::string errnoText(int e) { return std::string(std::strerror(e)); }

}  // namespace

Segment Segment::create(const std::string& name, size_t bytes, bool populate) {
  Segment s;
  s.size_ = pageRound(bytes);
  s.fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.fd_ < 0) throw IoError(-1, detail::concat("shm: memfd_create(", name, ") failed: ", errnoText(errno)));
  if (ftruncate(s.fd_, static_cast<off_t>(s.size_)) != 0) {
    throw IoError(-1, detail::concat("shm: sizing the segment ", name, " to ", s.size_, " bytes failed: ", errnoText(errno)));
  }
  // The size is fixed for good: a peer that maps it cannot be made to fault by a shrink.
  (void)fcntl(s.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  s.data_ = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), s.fd_, 0);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    throw IoError(-1, detail::concat("shm: mapping the segment ", name, " (", s.size_, " bytes) failed: ", errnoText(errno)));
  }
  return s;
}

Segment Segment::adopt(int fd, size_t minBytes, const std::string& what, bool populate) {
  Segment s;
  s.fd_ = fd;
  struct stat st{};
  if (fstat(fd, &st) != 0) throw IoError(-1, detail::concat("shm: ", what, ": fstat failed: ", errnoText(errno)));
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) < minBytes) {
    throw IoError(-1, detail::concat("shm: ", what, " is not a segment of at least ", minBytes, " bytes (", st.st_size, ")"));
  }
  // Only a sealed segment: its owner cannot shrink it under this mapping.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    throw IoError(-1, detail::concat("shm: ", what, " is not a sealed memfd segment"));
  }
  s.size_ = static_cast<size_t>(st.st_size);
  s.data_ = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (s.data_ == MAP_FAILED) {
    s.data_ = nullptr;
    throw IoError(-1, detail::concat("shm: mapping ", what, " (", s.size_, " bytes) failed: ", errnoText(errno)));
  }
  return s;
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this == &other) return *this;
  this->~Segment();
  fd_ = std::exchange(other.fd_, -1);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Segment::~Segment() {
  if (data_ != nullptr) munmap(data_, size_);
  closeFd();
  data_ = nullptr;
  size_ = 0;
}

void Segment::closeFd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void sendFds(int socket, const void* data, size_t bytes, const std::vector<int>& fds, const std::string& what) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)), 0);
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return;
    if (n < 0 && errno == EINTR) continue;
    throw IoError(-1, detail::concat("shm: sending ", what, " failed: ", n < 0 ? errnoText(errno) : "short write"));
  }
}

std::vector<int> recvFds(int socket, void* data, size_t bytes, size_t maxFds,
                         std::chrono::steady_clock::time_point deadline, const std::string& what) {
  std::vector<int> fds;
  size_t got = 0;
  auto* out = static_cast<char*>(data);
  auto fail = [&](const std::string& why) {
    for (int fd : fds) ::close(fd);
    throw IoError(-1, detail::concat("shm: receiving ", what, " failed: ", why));
  };
  while (got < bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                            std::chrono::steady_clock::now());
    if (left.count() <= 0) fail("timed out");
    pollfd p{socket, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) fail(errnoText(errno));
    if (r <= 0) continue;
    iovec iov{out + got, bytes - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(maxFds, 1)), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) fail(errnoText(errno));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds.size() > maxFds) fail("too many descriptors attached");
    if (n == 0) fail("the peer closed the connection");
    got += static_cast<size_t>(n);
  }
  return fds;
}

namespace cma {

std::string read(pid_t pid, void* local, uint64_t remote, size_t length) {
  size_t done = 0;
  while (done < length) {
    iovec l{static_cast<char*>(local) + done, length - done};
    iovec r{reinterpret_cast<void*>(remote + done), length - done};
    const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EFAULT;
      if (e == ESRCH) return "the process is gone";
      if (e == EFAULT) return "its memory is no longer mapped (the process is exiting?)";
      return "process_vm_readv: " + errnoText(e);
    }
    done += static_cast<size_t>(n);
  }
  return "";
}

bool probe(pid_t pid, uint64_t address, uint64_t expected, std::string& why) {
  if (pid <= 0) {
    why = "the peer's process is not visible from this one (another pid namespace)";
    return false;
  }
  uint64_t word = 0;
  iovec l{&word, sizeof word};
  iovec r{reinterpret_cast<void*>(address), sizeof word};
  const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (n != static_cast<ssize_t>(sizeof word)) {
    const int e = n < 0 ? errno : EFAULT;
    why = "process_vm_readv of the peer (pid " + std::to_string(pid) + ") failed: " + errnoText(e) +
          (e == EPERM ? " (the ptrace policy forbids it: Yama ptrace_scope, a seccomp profile or a container)"
                      : e == ENOSYS ? " (the kernel lacks cross-memory attach)" : "");
    return false;
  }
  if (word != expected) {
    why = "process_vm_readv of the peer (pid " + std::to_string(pid) + ") read the wrong bytes";
    return false;
  }
  return true;
}

}  // namespace cma

}  // namespace ringfold::transport::shm
