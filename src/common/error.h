// Error policy for the whole C++ core, written down once.
//
//  * Inside the C++ core, failures are exceptions derived from ringfold::Error.
//      - InvalidArgument : the caller passed something wrong (bad count, null buffer, bad env var).
//      - IoError         : a peer or the network failed: reset, closed, silent past the timeout,
//                          or a peer that aborted. It always names the peer's rank (-1 if none).
//      - MismatchError   : ranks called the same collective with different arguments.
//      - TimeoutError    : a deadline passed with no peer to blame (e.g. a store key never set).
//  * Inside the io_uring and verbs loops, functions return -errno (liburing's convention) and the
//    loop's caller turns a negative value into an IoError naming the peer.
//  * At the C ABI (bindings/c), exceptions become status codes plus a thread-local message; no
//    exception crosses that boundary.
//
// RF_ENFORCE*(...) build the message from their trailing arguments with operator<<, and the
// _EQ/_LT/... forms print both operands, so a failed check explains itself.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ringfold {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what) {}
};

class MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& what) : Error(what) {}
};

// Something did not happen within its deadline where no single peer is to blame (a store key
// that never appeared, a launcher start timeout). A silent *peer* is an IoError instead.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

// A peer or the network failed. peerRank() is the rank at the other end (-1 when unknown).
class IoError : public Error {
 public:
  IoError(int peerRank, const std::string& what);
  int peerRank() const { return peerRank_; }

 private:
  int peerRank_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}
[[noreturn]] void throwEnforce(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace ringfold

#define RF_THROW(ExceptionType, ...) throw ExceptionType(::ringfold::detail::concat(__VA_ARGS__))

#define RF_ENFORCE(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      ::ringfold::detail::throwEnforce(__FILE__, __LINE__, #cond,                         \
                                       ::ringfold::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

#define RF_ENFORCE_OP_(a, b, op, ...)                                                     \
  do {                                                                                    \
    const auto& rf_a_ = (a);                                                              \
    const auto& rf_b_ = (b);                                                              \
    if (!(rf_a_ op rf_b_)) {                                                              \
      ::ringfold::detail::throwEnforce(                                                   \
          __FILE__, __LINE__, #a " " #op " " #b,                                          \
          ::ringfold::detail::concat("(", rf_a_, " vs ", rf_b_, ") " __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

#define RF_ENFORCE_EQ(a, b, ...) RF_ENFORCE_OP_(a, b, ==, __VA_ARGS__)
#define RF_ENFORCE_NE(a, b, ...) RF_ENFORCE_OP_(a, b, !=, __VA_ARGS__)
#define RF_ENFORCE_LT(a, b, ...) RF_ENFORCE_OP_(a, b, <, __VA_ARGS__)
#define RF_ENFORCE_LE(a, b, ...) RF_ENFORCE_OP_(a, b, <=, __VA_ARGS__)
#define RF_ENFORCE_GT(a, b, ...) RF_ENFORCE_OP_(a, b, >, __VA_ARGS__)
#define RF_ENFORCE_GE(a, b, ...) RF_ENFORCE_OP_(a, b, >=, __VA_ARGS__)

// For system calls that return -1 and set errno: throws ringfold::Error with strerror(errno).
#define RF_CHECK_ERRNO(expr, ...)                                                         \
  do {                                                                                    \
    if ((expr) < 0) {                                                                     \
      ::ringfold::detail::throwErrno(__FILE__, __LINE__, #expr,                           \
                                     ::ringfold::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

namespace ringfold::detail {
[[noreturn]] void throwErrno(const char* file, int line, const char* expr, const std::string& msg);

// Text that came from outside this process (a peer's abort, a store's error answer), fit for an
// error message: bytes outside printable ASCII (but newlines and tabs) as \xNN, at most `maxBytes` of the result (then
// "..."), and `ifEmpty` for no text at all.
std::string printable(std::string_view text, std::string_view ifEmpty, size_t maxBytes = 1000);
}
