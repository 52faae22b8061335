// UringLoop: the one io_uring of a tcp_uring Device, driven only by the thread that calls
// Request::test/wait (there is no progress thread).
//
// Vocabulary
//   user_data : every SQE carries {op kind, socket id, slot} packed into 64 bits (packOp), so a
//               completion finds its socket and buffer without a lookup table.
//   setup     : the io_uring setup flags. "defer" = SINGLE_ISSUER|DEFER_TASKRUN (completion work
//               runs only when this thread enters the kernel), "coop" = COOP_TASKRUN (no
//               interrupt); both with TASKRUN_FLAG, so the ring's flags say when work waits and
//               io_uring_peek_cqe enters the kernel only then. "plain" = none (the kernel
//               interrupts the task to run completion work). The kernel refusing a flag falls
//               back to the next, in that order.
//
// Contract: functions return -errno, never throw, except the constructor, which throws Error
// explaining why io_uring cannot be used here (ENOSYS, EPERM from kernel.io_uring_disabled or
// seccomp, ENOMEM).
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace ringfold::transport::tcp_uring {

// Kernel UAPI values that liburing 2.3's copy of io_uring.h predates (Linux 6.2).
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)  // sqe->ioprio of SEND_ZC: report copies
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)  // cqe->res of a notification: data was copied
#endif

enum class OpKind : uint8_t {
  kRecvStaging = 1,  // recv into a socket's staging buffer
  kRecvDirect = 2,   // recv of a payload straight into its destination
  kSend = 3,         // sendmsg of a batch of frames (copying)
  kSendZc = 4,       // sendmsg_zc of one frame; slot = the frame's pool index
  kCancel = 5,       // async cancel; its own completion is ignored
};

struct OpId {
  OpKind kind;
  uint32_t socket;  // device-wide socket id (24 bits)
  uint32_t slot;
};

inline uint64_t packOp(OpKind kind, uint32_t socket, uint32_t slot) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{socket & 0xffffffu} << 32) | slot;
}
inline OpId unpackOp(uint64_t userData) {
  return OpId{static_cast<OpKind>(userData >> 56), static_cast<uint32_t>(userData >> 32) & 0xffffffu,
              static_cast<uint32_t>(userData)};
}

class UringLoop {
 public:
  enum class Setup { kDefer, kCoop, kPlain };

  // `setup` is "auto", "defer", "coop" or "plain" (RINGFOLD_URING_SETUP).
  UringLoop(unsigned entries, const std::string& setup);
  ~UringLoop();
  UringLoop(const UringLoop&) = delete;
  UringLoop& operator=(const UringLoop&) = delete;

  Setup setup() const { return setup_; }
  const char* setupName() const;
  bool supportsOp(int opcode) const;

  // A zeroed SQE; when the SQ is full, the queued SQEs are submitted first. Null only if the
  // kernel refuses submissions (the ring is then unusable).
  io_uring_sqe* sqe();
  // Submits queued SQEs, if any. Returns the count or -errno.
  int submit();
  // SQEs prepared but not yet handed to the kernel (io_uring_sq_ready counts only flushed ones).
  unsigned queued() const { return uring_.sq.sqe_tail - uring_.sq.sqe_head; }

  // Hands every completion that is ready to onCqe(const io_uring_cqe&) without blocking;
  // returns how many. onCqe may queue SQEs.
  template <typename F>
  unsigned drain(F&& onCqe) {
    unsigned total = 0;
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_peek_cqe(&uring_, &cqe) != 0 || cqe == nullptr) break;
      unsigned head, n = 0;
      io_uring_for_each_cqe(&uring_, head, cqe) {
        io_uring_cqe copy = *cqe;
        ++n;
        onCqe(copy);
      }
      io_uring_cq_advance(&uring_, n);
      total += n;
    }
    return total;
  }

  // Submits queued SQEs and blocks until a completion is ready or `timeout` passes.
  // Returns 0, -ETIME on timeout, -EINTR, or another -errno.
  int wait(std::chrono::nanoseconds timeout);

 private:
  io_uring uring_{};
  Setup setup_ = Setup::kPlain;
  bool sendZc_ = false;
  bool sendmsgZc_ = false;
};

}  // namespace ringfold::transport::tcp_uring
