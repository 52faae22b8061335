#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace ringfold {

IoError::IoError(int peerRank, const std::string& what) : Error(what), peerRank_(peerRank) {}

namespace detail {

void throwEnforce(const char* file, int line, const char* cond, const std::string& msg) {
  std::string what = concat("check failed: ", cond);
  if (!msg.empty()) what += concat(": ", msg);
  throw InvalidArgument(concat(what, " (", file, ":", line, ")"));
}

void throwErrno(const char* file, int line, const char* expr, const std::string& msg) {
  int err = errno;
  std::string what = msg.empty() ? std::string(expr) : msg;
  throw Error(concat(what, ": ", std::strerror(err), " (", file, ":", line, ")"));
}

}  // namespace detail
}  // namespace ringfold
