// Backend-independent parts of the transport interfaces: error mapping and backend selection.
#include <string>

#include "common/error.h"
#include "common/params.h"
#include "transport/device.h"
#include "transport/loopback/device.h"
#include "transport/rdma/device.h"
#ifdef RINGFOLD_HAVE_URING
#include "transport/shm/device.h"
#endif
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

void checkRange(const MemoryRegion& region, size_t offset, size_t length, const char* what) {
  if (offset > region.size() || length > region.size() - offset) {
    RF_THROW(InvalidArgument, what, ": bytes [", offset, ", ", offset + length, ") lie outside the region of ",
             region.size(), " bytes");
  }
  if (length > 0 && region.data() == nullptr) RF_THROW(InvalidArgument, what, ": region has no memory");
}

void throwError(ErrorKind kind, int peerRank, const std::string& message) {
  switch (kind) {
    case ErrorKind::kMismatch: throw MismatchError(message);
    case ErrorKind::kInvalidArgument: throw InvalidArgument(message);
    case ErrorKind::kIo: break;
  }
  throw IoError(peerRank, message);
}

std::vector<std::unique_ptr<Connection>> Device::connectAll(rendezvous::Store& store, const std::string& prefix,
                                                            int rank, int size, std::chrono::milliseconds timeout) {
  ConnectSpec spec;
  spec.store = &store;
  spec.prefix = prefix;
  spec.rank = rank;
  spec.size = size;
  spec.timeout = timeout;
  return connectAll(spec);
}

ErrorKind describeError(const std::exception_ptr& error, std::string& text, int& peer) {
  peer = -1;
  try {
    std::rethrow_exception(error);
  } catch (const MismatchError& e) {
    text = e.what();
    return ErrorKind::kMismatch;
  } catch (const InvalidArgument& e) {
    text = e.what();
    return ErrorKind::kInvalidArgument;
  } catch (const IoError& e) {
    peer = e.peerRank();
    text = e.what();
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
    text = "unknown exception";
  }
  return ErrorKind::kIo;
}

std::unique_ptr<Device> createDevice(const std::string& requested) { return createDevice(requested, DeviceConfig{}); }

std::unique_ptr<Device> createDevice(const std::string& requested, const DeviceConfig& config) {
  std::string name = requested.empty() ? params::kTransport.str() : requested;
  if (name == "loopback") return loopback::createDevice();
  if (name == "tcp_uring" || name == "tcp" || name == "unix_uring") {
#ifdef RINGFOLD_HAVE_URING
    tcp_uring::Options options;
    options.family = name == "unix_uring" ? tcp_uring::Family::kUnix : tcp_uring::Family::kTcp;
    options.storeAddress = config.storeAddress;
    options.listenAddress = config.listenAddress;
    return tcp_uring::createDevice(options);
#else
    RF_THROW(InvalidArgument, "transport '", name, "' was not built (liburing was not found at build time)");
#endif
  }
  if (name == "shm") {
#ifdef RINGFOLD_HAVE_URING
    return shm::createDevice();
#else
    RF_THROW(InvalidArgument, "transport 'shm' was not built (it joins its pairs through tcp_uring's Unix mesh, "
             "and liburing was not found at build time)");
#endif
  }
  if (name == "rdma") return rdma::createDevice();  // the fabric RINGFOLD_RDMA_FABRIC names
  RF_THROW(InvalidArgument, params::kTransport.name, "='", name,
           "' is not a transport; use tcp_uring, rdma, shm or loopback");
}

}  // namespace ringfold::transport
