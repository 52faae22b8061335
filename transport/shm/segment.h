// Segments, descriptor passing and cross-memory attach for the shm backend.
//
//   Segment     : a memfd (anonymous: no name in /dev/shm, gone when the last descriptor and
//                 mapping are), sized and sealed against resizing, mapped shared. Its descriptor
//                 goes to the one peer over an authenticated Unix socket and is then closed at
//                 both ends: what is left is the two mappings, reachable otherwise only through
//                 /proc/<pid>/map_files of those processes (their user, who could ptrace them).
//   sendFds /
//   recvFds     : a small message with descriptors attached (SCM_RIGHTS) over a blocking
//                 Unix stream socket, with a deadline.
//   Cma         : process_vm_readv from a peer process (Open MPI's CMA path): one copy from the
//                 sender's buffer into the receiver's. probe() reads a known word of the peer to
//                 learn whether the kernel and its ptrace policy (Yama, seccomp, containers)
//                 allow it, and why not.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringfold::transport::shm {

class Segment {
 public:
  Segment() = default;
  // A new memfd of `bytes` (rounded up to pages), zeroed, sealed, mapped. `name` shows in
  // /proc/<pid>/fd and maps ("memfd:<name>"). `populate`: fault every page in now (MAP_POPULATE:
  // no first-touch faults on the data path, and the memory is taken at once); false: pages are
  // taken as they are first touched. Throws IoError with the reason.
  static Segment create(const std::string& name, size_t bytes, bool populate = true);
  // Maps a descriptor received from a peer; checks its size (>= minBytes). Takes the fd.
  static Segment adopt(int fd, size_t minBytes, const std::string& what, bool populate = true);
  Segment(Segment&& other) noexcept { *this = std::move(other); }
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();
  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // Closes the descriptor and keeps the mapping (after it was passed on).
  void closeFd();

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Sends `bytes` with `fds` attached; throws IoError naming `what` on failure.
void sendFds(int socket, const void* data, size_t bytes, const std::vector<int>& fds, const std::string& what);
// Receives exactly `bytes` and up to `maxFds` descriptors (returned; the caller owns them) before
// `deadline`; throws IoError naming `what` (the peer closed, timed out, short message).
std::vector<int> recvFds(int socket, void* data, size_t bytes, size_t maxFds,
                         std::chrono::steady_clock::time_point deadline, const std::string& what);

namespace cma {
// Whether this process can read `bytes` at `address` in process `pid` and finds `expected` there
// (the peer's probe word). False with the reason in `why`.
bool probe(pid_t pid, uint64_t address, uint64_t expected, std::string& why);
// Reads `length` bytes at `remote` in `pid` into `local`; returns "" or the reason it failed
// (the process is gone, the memory was unmapped, permission).
std::string read(pid_t pid, void* local, uint64_t remote, size_t length);
}  // namespace cma

}  // namespace ringfold::transport::shm
