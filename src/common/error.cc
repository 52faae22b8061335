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

std::string printable(std::string_view text, std::string_view ifEmpty, size_t maxBytes) {
  if (text.empty()) return std::string(ifEmpty);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= maxBytes) return out + "...";
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t') {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

}  // namespace detail
}  // namespace ringfold
