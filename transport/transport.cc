// Backend-independent parts of the transport interfaces: error mapping and backend selection.
#include <string>

#include "common/error.h"
#include "common/params.h"
#include "transport/device.h"
#include "transport/loopback/device.h"
#ifdef RINGFOLD_HAVE_URING
#include "transport/tcp_uring/device.h"
#endif

namespace ringfold::transport {

CheckMismatch::CheckMismatch(int peer, uint64_t t, size_t expLen, size_t actLen, uint64_t expCheck,
                             uint64_t actCheck)
    : MismatchError(detail::concat("message from rank ", peer, " with tag ", t, " does not match its receive: length ",
                                   actLen, " vs expected ", expLen, ", check ", actCheck, " vs expected ",
                                   expCheck)),
      peerRank(peer),
      tag(t),
      expectedLength(expLen),
      actualLength(actLen),
      expectedCheck(expCheck),
      actualCheck(actCheck) {}

void throwError(ErrorKind kind, int peerRank, const std::string& message) {
  switch (kind) {
    case ErrorKind::kMismatch: throw MismatchError(message);
    case ErrorKind::kInvalidArgument: throw InvalidArgument(message);
    case ErrorKind::kIo: break;
  }
  throw IoError(peerRank, message);
}

std::unique_ptr<Device> createDevice(const std::string& requested) {
  std::string name = requested.empty() ? params::kTransport.str() : requested;
  if (name == "loopback") return loopback::createDevice();
  if (name == "tcp_uring" || name == "tcp") {
#ifdef RINGFOLD_HAVE_URING
    return tcp_uring::createDevice();
#else
    RF_THROW(InvalidArgument, "transport 'tcp_uring' was not built (liburing was not found at build time)");
#endif
  }
  RF_THROW(InvalidArgument, params::kTransport.name, "='", name,
           "' is not a transport; use tcp_uring or loopback");
}

}  // namespace ringfold::transport
