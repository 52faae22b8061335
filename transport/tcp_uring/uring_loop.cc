#include "transport/tcp_uring/uring_loop.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/logging.h"

namespace ringfold::transport::tcp_uring {
namespace {

unsigned flagsOf(UringLoop::Setup setup) {
  switch (setup) {
    case UringLoop::Setup::kDefer:
      return IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    case UringLoop::Setup::kCoop: return IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    case UringLoop::Setup::kPlain: return 0;
  }
  return 0;
}

std::string sysctlValue(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v)) return "unknown";
  return v;
}

[[noreturn]] void throwUnavailable(int err) {
  std::string why;
  if (err == -ENOSYS) {
    why = "the kernel has no io_uring (built without CONFIG_IO_URING, or older than 5.1)";
  } else if (err == -EPERM || err == -EACCES) {
    why = "io_uring is forbidden here: sysctl kernel.io_uring_disabled=" +
          sysctlValue("/proc/sys/kernel/io_uring_disabled") +
          " (0 allows it; 1 allows only the group in kernel.io_uring_group), or a seccomp profile "
          "(Docker, Kubernetes) blocks io_uring_setup";
  } else if (err == -ENOMEM) {
    why = "the kernel could not allocate the ring (memory cgroup limit or RLIMIT_MEMLOCK on kernels < 5.12)";
  } else {
    why = std::string("io_uring_setup failed: ") + std::strerror(-err);
  }
  RF_THROW(Error, "transport tcp_uring cannot run: ", why,
           ". Use RINGFOLD_TRANSPORT=loopback for ranks that are threads of one process.");
}

}  // namespace

UringLoop::UringLoop(unsigned entries, const std::string& setup) {
  Setup first;
  if (setup == "auto" || setup == "coop") {
    first = Setup::kCoop;
  } else if (setup == "defer") {
    first = Setup::kDefer;
  } else if (setup == "plain") {
    first = Setup::kPlain;
  } else {
    RF_THROW(InvalidArgument, "RINGFOLD_URING_SETUP='", setup, "' is not one of auto, defer, coop, plain");
  }
  int ret = -EINVAL;
  for (int s = static_cast<int>(first); s <= static_cast<int>(Setup::kPlain); ++s) {
    io_uring_params p{};
    p.flags = flagsOf(static_cast<Setup>(s)) | IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    ret = io_uring_queue_init_params(entries, &uring_, &p);
    if (ret == 0) {
      setup_ = static_cast<Setup>(s);
      break;
    }
    if (ret != -EINVAL) break;  // a missing flag gives EINVAL; anything else is final
  }
  if (ret != 0) throwUnavailable(ret);

  if (io_uring_probe* probe = io_uring_get_probe_ring(&uring_)) {
    sendZc_ = io_uring_opcode_supported(probe, IORING_OP_SEND_ZC);
    sendmsgZc_ = io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
    io_uring_free_probe(probe);
  }
  RF_LOG(kDebug) << "io_uring ready: setup=" << setupName() << " entries=" << entries
                 << " sendmsg_zc=" << sendmsgZc_;
}

UringLoop::~UringLoop() { io_uring_queue_exit(&uring_); }

const char* UringLoop::setupName() const {
  switch (setup_) {
    case Setup::kDefer: return "defer (SINGLE_ISSUER|DEFER_TASKRUN)";
    case Setup::kCoop: return "coop (COOP_TASKRUN|TASKRUN_FLAG)";
    case Setup::kPlain: return "plain";
  }
  return "?";
}

bool UringLoop::supportsOp(int opcode) const {
  if (opcode == IORING_OP_SEND_ZC) return sendZc_;
  if (opcode == IORING_OP_SENDMSG_ZC) return sendmsgZc_;
  return true;
}

io_uring_sqe* UringLoop::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&uring_);
  if (s == nullptr) {
    if (io_uring_submit(&uring_) < 0) return nullptr;
    s = io_uring_get_sqe(&uring_);
  }
  return s;
}

int UringLoop::submit() {
  if (queued() == 0) return 0;
  int ret;
  do {
    ret = io_uring_submit(&uring_);
  } while (ret == -EINTR);
  return ret;
}

int UringLoop::wait(std::chrono::nanoseconds timeout) {
  if (timeout.count() < 0) timeout = std::chrono::nanoseconds(0);
  __kernel_timespec ts{};
  ts.tv_sec = timeout.count() / 1000000000;
  ts.tv_nsec = timeout.count() % 1000000000;
  io_uring_cqe* cqe = nullptr;
  int ret = io_uring_submit_and_wait_timeout(&uring_, &cqe, 1, &ts, nullptr);
  if (ret >= 0) return 0;
  return ret;
}

}  // namespace ringfold::transport::tcp_uring
